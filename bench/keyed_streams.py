"""Keyed streams publish, single and batched, against the queues surface's send and send_batch,
measured in one run on one embedded PostgreSQL.

    .venv/bin/python bench/keyed_streams.py [--quick] [--fast]

Each request goes through its surface's real handler, as Lambda calls it (the API Gateway event
with the authorizer's answer, the body parsed and validated, the domain layer, the SQL): the cost a
function pays per message. Per message it prints the handler's wall and CPU time and the database
server's CPU, for keyed streams at batch 1, 10 and 100 (each message with its own key and
idempotency key) and for the queues surface at the same sizes, in rounds that alternate the two so
that both see the same machine; then the ratios: keyed streams' batch against its single publish,
and against the queues surface at the same batch size (Postbox's cheapest write path, the
reference of bench/cost.py's goal: keyed streams at batch 10 within 1.5x of the queues surface).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench import common  # noqa: E402

SIZES = (1, 10, 100)
PAYLOAD = {"order_id": 8891, "customer": "tenant_42", "items": [{"sku": "A-1", "qty": 2}], "note": "x" * 64}


class Handlers:
    """The two surfaces' handlers, called with API Gateway events for one key."""

    def __init__(self, key: str) -> None:
        from functions import routes
        from functions.local.invoke import entry_point

        self.key = key
        self.handlers = {name: entry_point(dotted) for name, dotted in routes.FUNCTIONS.items()}

    def call(self, surface: str, path: str, body: dict) -> dict:
        from functions.local.lambda_context import LocalContext
        from support.events import api_event

        result = self.handlers[surface](api_event("POST", path, key=self.key, body=body), LocalContext(surface))
        if result["statusCode"] >= 400:
            raise RuntimeError(f"POST {path}: {result['statusCode']} {result.get('body', '')[:300]}")
        return json.loads(result["body"])


def keyed(h: Handlers, stream: str, n: int, seq: list[int]) -> None:
    start = seq[0]
    seq[0] += n
    messages = [{"key": f"k{(start + i) % 50}", "payload": PAYLOAD, "idempotency_key": f"m-{start + i}"}
                for i in range(n)]
    if n == 1:
        assert h.call("keyed-streams", f"/v1/streams/{stream}/messages", messages[0])["replayed"] is False
    else:
        results = h.call("keyed-streams", f"/v1/streams/{stream}/messages/batch", {"messages": messages})["results"]
        assert len(results) == n and all(r["ok"] and not r["replayed"] for r in results)


def queues(h: Handlers, queue: str, n: int, seq: list[int]) -> None:
    seq[0] += n
    if n == 1:
        assert "msg_id" in h.call("queues", f"/api/v1/queues/{queue}/send", {"message": PAYLOAD})
    else:
        ids = h.call("queues", f"/api/v1/queues/{queue}/send_batch", {"messages": [PAYLOAD] * n})["msg_ids"]
        assert len(ids) == n


def timed(fn, h: Handlers, name: str, n: int, seq: list[int], requests: int, url: str) -> tuple[float, float, float]:
    """(wall, handler CPU, server CPU) seconds per message over `requests` requests of n messages."""
    with common.CpuMeter(PostgreSQL=common.postmaster_pid(url)) as meter:
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(requests):
            fn(h, name, n, seq)
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    total = requests * n
    return wall / total, cpu / total, meter.used["PostgreSQL"] / total


def run(args, url: str) -> None:
    from postbox import db

    _, key, _ = common.bench_tenant(url)
    h = Handlers(key)
    run_id = uuid.uuid4().hex[:6]
    rounds = 3 if args.quick else 7
    messages = 300 if args.quick else 2000  # per size, per round, per surface
    names = {}
    for n in SIZES:
        names[("keyed", n)] = f"ks{n}{run_id}"
        h.call("keyed-streams", "/v1/streams", {"name": names[("keyed", n)]})
        h.call("keyed-streams", f"/v1/streams/{names[('keyed', n)]}/subscriptions", {"name": "w"})
        names[("queues", n)] = f"qs{n}{run_id}"
        h.call("queues", "/api/v1/queues", {"name": names[("queues", n)]})
    fns = {"keyed": keyed, "queues": queues}
    seqs = {k: [0] for k in names}
    common.progress("warming both surfaces")
    for (surface, n), name in names.items():
        for _ in range(max(3, 100 // n)):
            fns[surface](h, name, n, seqs[(surface, n)])
    samples: dict[tuple[str, int], list[tuple[float, float, float]]] = {k: [] for k in names}
    for r in range(rounds):
        common.progress(f"round {r + 1} of {rounds}")
        order = list(names) if r % 2 == 0 else list(reversed(names))
        for surface, n in order:
            samples[(surface, n)].append(timed(fns[surface], h, names[(surface, n)], n, seqs[(surface, n)],
                                               max(1, messages // n), url))
    db.close_pool()

    def med(k: tuple[str, int], i: int) -> float:
        return statistics.median(s[i] for s in samples[k])

    print(f"\nper message, median of {rounds} rounds of {messages:,} messages each (µs): handler wall, handler CPU,"
          " database server CPU")
    print(f"{'surface':<16}{'batch':>6}{'wall':>10}{'CPU':>10}{'server':>10}")
    for surface, n in names:
        k = (surface, n)
        print(f"{'keyed streams' if surface == 'keyed' else 'queues':<16}{n:>6}{med(k, 0) * 1e6:>10.0f}"
              f"{med(k, 1) * 1e6:>10.0f}{med(k, 2) * 1e6:>10.0f}")
    print("\nratios (per message wall time; > 1 means the first is cheaper)")
    for n in SIZES[1:]:
        print(f"keyed streams batch({n}) vs keyed streams single:     "
              f"{med(('keyed', 1), 0) / med(('keyed', n), 0):6.2f}x cheaper")
    for n in SIZES:
        server = med(("queues", n), 2)
        print(f"keyed streams batch({n}) / queues send{'' if n == 1 else '_batch'}({n}):"
              f"{'':>{13 - len(str(n)) * 2}}{med(('keyed', n), 0) / med(('queues', n), 0):6.2f} (wall), "
              + (f"{med(('keyed', n), 2) / server:.2f} (server CPU)" if server else "server CPU below the meter"))


def main() -> None:
    common.bench_main(__doc__, 1, run, quick_help="3 rounds of 300 messages per size instead of 7 of 2,000")


if __name__ == "__main__":
    main()
