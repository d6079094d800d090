"""The work surface's tables per million messages, against pgqueuer's, in one run on one server.

    .venv/bin/python bench/work_sizes.py [--quick] [--fast]

Each line publishes a backlog, drains it with claim(100)+complete(100) on 2 clients and folds the
counters, then measures the tables (heap, indexes and TOAST, after VACUUM ANALYZE), scaled to a
million messages: the journal (what the audit log keeps for 90 days), the messages (what a scope
keeps for its `retention_days` once they ended) and the counters. Lines:

- one publish per call (a journal row each, as the single publish route writes);
- publishes 100 to a call (the backlog written straight into the table, its journal rows written as
  a 100-message publish writes them: one a call), where the schema has a journal of rows per call.

The reference is pgqueuer (build/peers, as bench/work_peers.py installs it) on the same server: its
batch enqueue and its drain (`dequeue` + `log_jobs`), its queue and log tables; ratio = Postbox /
pgqueuer (below 1 is smaller).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402
from bench.work import BATCH, CLIENTS, WORK_FILL, WorkClient, drain  # noqa: E402

# Bytes of a table with its indexes and TOAST, its partitions summed (a plain table is its own leaf).
SIZE = """
SELECT CASE WHEN c.relkind = 'p' THEN (SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t
                                       WHERE t.isleaf)
            ELSE pg_total_relation_size(c.oid) END
FROM pg_class c WHERE c.oid = %(t)s::regclass
"""
# A publish of 100 messages journals one row (the schema's journal of rows per call), as this writes it.
BATCH_JOURNAL = """
INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, moved, message_ids)
SELECT %(s)s, %(t)s, %(q)s, 'scaiqueue.message.published', 'api_key', %(actor)s, NULL, array_agg(m.id ORDER BY m.seq)
FROM (SELECT id, seq, (row_number() OVER (ORDER BY seq) - 1) / 100 AS call FROM work_messages
      WHERE queue_id = %(q)s) m
GROUP BY m.call
"""


def _sql(url: str, statement: str, **params) -> tuple | None:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchone() if cur.description else None


def _size(url: str, table: str) -> int:
    return int(_sql(url, SIZE, t=table)[0])


def _per_million(n_bytes: int, n: int) -> str:
    return f"{n_bytes / n * 1_000_000 / 2**20:,.0f} MB"


class Sizes:
    def __init__(self, url: str, n: int) -> None:
        from postbox.work import queues, scopes

        self.url, self.n, self.table = url, n, common.Table()
        self.tenant, _, self.principal = common.bench_tenant(url)
        self.scope = scopes.create_scope(self.principal, {"slug": "sizes"})["id"]
        self.queues = queues
        self.per_call = _sql(url, "SELECT to_regclass('work_counts_folded') IS NOT NULL")[0]
        self.reference = 0  # pgqueuer's bytes for the same messages (measured first)

    def _queue(self, slug: str) -> tuple[str, int]:
        q = self.queues.create_queue(self.principal, self.scope, {"slug": slug})["id"]
        return q, _sql(self.url, "SELECT id FROM work_queues WHERE queue_id = %(q)s", q=q)[0]

    def _reset(self) -> None:
        _sql(self.url, "TRUNCATE work_journal, work_messages, work_queue_counters CASCADE")

    def _measure(self, label: str, queue: str) -> None:
        _, done = drain(lambda: WorkClient(self.principal, self.scope, queue), BATCH)
        assert len(done) == len(set(done)) == self.n, (len(done), len(set(done)))
        if self.per_call:
            _sql(self.url, "SELECT work_counts_fold()")
        common.vacuum_analyze(self.url, "work_journal", "work_messages", "work_queue_counters")
        journal, messages, counters = (_size(self.url, t) for t in ("work_journal", "work_messages",
                                                                     "work_queue_counters"))
        rows = _sql(self.url, "SELECT count(*) FROM work_journal")[0]
        ours = journal + messages + counters
        self.table.row(label, self.n, _per_million(ours, self.n), _per_million(self.reference, self.n),
                       ours / self.reference, f"journal {_per_million(journal, self.n)} ({rows:,} rows), messages"
                       f" {_per_million(messages, self.n)}, counters {_per_million(counters, self.n)}")

    def single(self) -> None:
        self._reset()
        queue, pk = self._queue("single")
        for start in range(0, self.n, 5_000):  # a call per message, 5,000 calls a statement
            _sql(self.url, "SELECT work_publish(%(t)s, %(s)s, %(q)s, jsonb_build_object('body', jsonb_build_object("
                           "'to', 'a@example.com', 'n', g)), 'bench') FROM generate_series(1, %(k)s) g",
                 t=self.tenant, s=self.scope, q=queue, k=min(5_000, self.n - start))
        self._measure("publish one per call, drained", queue)

    def batched(self) -> None:
        if not self.per_call:
            return
        self._reset()
        queue, pk = self._queue("batched")
        _sql(self.url, WORK_FILL, q=pk, s=self.scope, t=self.tenant, n=self.n, ordering="fifo")
        _sql(self.url, BATCH_JOURNAL, q=pk, s=self.scope, t=self.tenant, actor=self.principal.key_id)
        self._measure("publish 100 a call, drained", queue)

    def pgqueuer(self) -> None:
        from bench.work_peers import Peer, _database, install_peers

        peer = Peer("pgqueuer", install_peers()["pgqueuer"], _database(self.url, "peer_pgqueuer"))
        peer.call("fill", self.n)
        r = peer.call("drain", CLIENTS, BATCH)
        assert r["distinct"] == self.n, r
        peer.settle()
        tables = {t: _size(peer.url, t) for t in Peer.TABLES["pgqueuer"]}
        self.reference = sum(tables.values())
        print("   pgqueuer (reference; batch enqueue, drained): "
              + ", ".join(f"{t} {_per_million(b, self.n)}" for t, b in tables.items()), flush=True)


def main() -> None:
    def run(args, url: str) -> None:
        sizes = Sizes(url, 20_000 if args.quick else 100_000)
        print(f"journal: {'a row per call' if sizes.per_call else 'a row per message'}; sizes per million messages,"
              " heap + indexes + TOAST after VACUUM ANALYZE\n")
        sizes.table.header()
        common.steps(("pgqueuer", sizes.pgqueuer), ("publish one per call", sizes.single),
                     ("publish 100 a call", sizes.batched))

    common.bench_main(__doc__, CLIENTS, run, "20,000 messages (100,000 by default)")


if __name__ == "__main__":
    main()
