"""A live move of a tenant holding many queue messages from one cell to another: its duration and
its write freeze, with a producer and a consumer working through the move.

    .venv/bin/python bench/move.py [--messages 1000000] [--fast]

Two databases of one embedded PostgreSQL are the two cells. The backlog is written in bulk; the
producer sends one message a call and the consumer reads and deletes ten a call, both through the
queues surface's handler, retrying a 503 as a client does. Printed: the move's phases as they
start, its duration, its freeze (fence installed to directory flipped), the writes refused and the
longest time a write waited for an answer other than 503.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import psycopg  # noqa: E402

from bench import common  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--fast", action="store_true", help="fsync off (durability off: figures not comparable)")
    args = parser.parse_args()
    common.configure(4)
    server, one = common.start_server(args.fast)
    two = server.ensure_database("bench2", fresh=True)
    os.environ["POSTBOX_CELLS"] = json.dumps([{"name": "cell-1", "database_url": one},
                                              {"name": "cell-2", "database_url": two}])
    os.environ["DATABASE_URL"] = one
    from functions.api.queues.app import handler
    from functions.local.lambda_context import LocalContext
    from postbox import config, migrate, moves, tenancy
    from support.events import api_event  # the event API Gateway sends

    config.reset()
    migrate.apply(one)
    migrate.apply(two)
    with psycopg.connect(two, autocommit=True) as conn:  # cells' ids never meet
        conn.execute("SELECT setval(oid::regclass, 1000000000000) FROM pg_class WHERE relkind = 'S'")
    print(common.server_description(one))
    tenant = tenancy.create_tenant("bench-mover", cell="cell-1")
    key = tenancy.create_key(tenant, "manage").key
    ctx = LocalContext("queues")
    stop = threading.Event()
    refused, waits = [0], [0.0]

    def call(path: str, body: dict) -> dict:
        started = time.perf_counter()
        while True:
            answer = handler(api_event("POST", path, key=key, body=body), ctx)
            if answer["statusCode"] != 503:
                waits[0] = max(waits[0], time.perf_counter() - started)
                return json.loads(answer["body"])
            refused[0] += 1
            time.sleep(float(answer["headers"]["Retry-After"]) / 10)

    call("/api/v1/queues", {"name": "orders"})
    with psycopg.connect(one, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute("INSERT INTO queue_messages (queue_id, vt, read_ct, enqueued_at, message, size)"
                     " SELECT q.id, now(), 0, now(), jsonb_build_object('n', g, 'body', repeat('x', 100)), 120"
                     " FROM queues q, generate_series(1, %s) g WHERE q.tenant_id = %s", (args.messages, tenant))
        print(f"backlog: {args.messages:,} messages written in {time.perf_counter() - started:.1f} s")

    def produce() -> None:
        while not stop.is_set():
            call("/api/v1/queues/orders/send", {"message": {"live": True}})

    def consume() -> None:
        while not stop.is_set():
            found = call("/api/v1/queues/orders/read", {"qty": 10, "vt": 60})["messages"]
            if found:
                call("/api/v1/queues/orders/delete", {"msg_ids": [m["msg_id"] for m in found]})

    workers = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for w in workers:
        w.start()
    time.sleep(1)
    t0 = time.perf_counter()
    report = moves.move("bench-mover", "cell-2", step=lambda p: print(f"  {time.perf_counter() - t0:6.1f} s  {p}")
                        if not p.startswith("copy ") or p == "copy queue_messages" else None)
    stop.set()
    for w in workers:
        w.join()
    print(f"move: {report['duration_s']:.1f} s in all, write freeze {report['freeze_s']:.2f} s,"
          f" {report['tables']['queue_messages']['rows']:,} messages moved, {refused[0]} writes refused (503),"
          f" longest wait for a write's answer {waits[0]:.2f} s")
    server.stop()


if __name__ == "__main__":
    main()
