"""What each call of the queues surface's send_batch / read / archive cycle writes to the WAL, per
message, by record type (pg_walinspect): the figure bench/cost.py prices as Aurora I/O.

Each call goes through the queues handler as in bench/cost.py, on a durable embedded server (full
page writes on). The WAL between the LSNs read just before and just after a call is that call's,
unless autovacuum or a checkpoint wrote in between: their records are shown on their own lines.

    .venv/bin/python bench/queue_wal.py            # batches 10 and 100, 200 cycles each
    .venv/bin/python bench/queue_wal.py --cycles 50
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import bench_tenant, configure, start_server  # noqa: E402
from bench.cost import Timer, _json  # noqa: E402

RECORDS = """
SELECT r.resource_manager || '/' || split_part(r.record_type, ' ', 1)
       || CASE WHEN r.block_ref LIKE '%%FPW%%' THEN ' +FPI' ELSE '' END
       || coalesce(' ' || (SELECT c.relname FROM pg_class c
                           WHERE c.relfilenode = substring(r.block_ref from 'rel \\d+/\\d+/(\\d+)')::oid
                           LIMIT 1), ''),
       r.record_length, r.fpi_length
FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) r
"""


def lsn(conn) -> str:
    return conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]


def measure(url: str, t: Timer, n: int, cycles: int) -> None:
    import psycopg

    q = f"w{n}{uuid.uuid4().hex[:6]}"
    t.call("queues", "setup", "POST", "/api/v1/queues", {"name": q})
    per_call: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    totals: dict[str, int] = defaultdict(int)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")

        def call(label: str, *args, **kwargs):
            before = lsn(conn)
            out = t.call("queues", label, *args, **kwargs)
            after = lsn(conn)
            if measuring:
                ranges.append((label, before, after))
            return out

        ranges: list[tuple[str, str, str]] = []

        for i in range(cycles + 5):
            measuring = i >= 5  # the first cycles warm the caches and create the counter rows
            ids = _json(call("send_batch", "POST", f"/api/v1/queues/{q}/send_batch",
                             {"messages": [{"n": j} for j in range(n)]}))["msg_ids"]
            got = _json(call("read", "POST", f"/api/v1/queues/{q}/read", {"qty": n, "vt": 30}))["messages"]
            call("archive", "POST", f"/api/v1/queues/{q}/archive", {"msg_ids": [m["msg_id"] for m in got]})
            assert len(got) == len(ids) == n
        conn.execute("SELECT pg_switch_wal()")  # the reads' asynchronous commits flushed: all of it readable
        for label, before, after in ranges:
            totals[label] += int(conn.execute("SELECT %s::pg_lsn - %s::pg_lsn", (after, before)).fetchone()[0])
            for kind, length, fpi in conn.execute(RECORDS, (before, after)).fetchall():
                row = per_call[label][kind]
                row[0] += 1
                row[1] += length
                row[2] += fpi

    messages = cycles * n
    print(f"\n### batch {n}: WAL bytes per message ({cycles} cycles)\n")
    print("| call | record (resource manager/type, relation) | records per message | bytes per message |"
          " of which full-page images |")
    print("| --- | --- | ---: | ---: | ---: |")
    for label, kinds in per_call.items():
        for kind, (count, length, fpi) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
            print(f"| {label} | {kind} | {count / messages:.2f} | {length / messages:.1f} | {fpi / messages:.1f} |")
        print(f"| **{label}** | (LSN difference) | | **{totals[label] / messages:.1f}** | |")
    print(f"| **cycle** | | | **{sum(totals.values()) / messages:.1f}** | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--batches", default="10,100")
    args = parser.parse_args()
    configure(1)
    server, url = start_server(fast=False)
    try:
        _, key, _ = bench_tenant(url)
        t = Timer(key)
        for n in (int(b) for b in args.batches.split(",")):
            measure(url, t, n, max(2, args.cycles * 10 // n))
    finally:
        from postbox import db

        db.close_pool()
        server.stop()


if __name__ == "__main__":
    main()
