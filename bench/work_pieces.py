"""What each piece of a work publish costs: the whole publish, then the same with one piece taken out.

    .venv/bin/python bench/work_pieces.py [--quick] [--fast]

The single publish trails pgqueuer's (bench/work_peers.py). This says where its time goes, one piece at
a time, each line the same publishes on 2 clients (one connection each) with its CPU per call on each
side (the clients, PostgreSQL with its background processes) and the rate:

- the route's call: the domain layer as the publish route calls it (checks, the ACL gate, the schema,
  one SQL call, the answer decoded);
- its SQL call alone: the same statement and parameters on a plain connection (the domain layer's
  share is the difference);
- without the journal row, without the document (the answer only the id): the SQL call alone with
  that SQL function replaced, in the run's own throwaway database, and put back after;
- a bare insert: one INSERT of the message's row (its columns, defaults and indexes), the table's
  floor; a commit alone: a one-row INSERT into a table with no index, a transaction's floor.

The batch publish of 100 is measured the same way (ten times the messages), whole and without its
journal row.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench import common  # noqa: E402
from bench.work import CLIENTS, WorkClient, send_all  # noqa: E402

ROUNDS = 2  # each line's best round
NO_JOURNAL = """CREATE OR REPLACE FUNCTION work_journal_published(s work_scopes, q work_queues, p_ids uuid[],
    p_correlations text[], p_actor_type text, p_actor_id text, p_emit boolean) RETURNS void LANGUAGE sql AS $$ $$"""
ID_ONLY = """CREATE OR REPLACE FUNCTION work_message_doc(p_id uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('id', p_id) $$"""
BARE_INSERT = """INSERT INTO work_messages (queue_id, scope_id, tenant_id, visible_at, body, max_retries,
    visibility_timeout_s, source_type, source_id)
    VALUES (%s, %s, %s, clock_timestamp(), %s::jsonb, 3, 30, 'api_key', %s)"""


class SqlClient:
    """One publish per call as the route's statement, on a plain connection of its own."""

    def __init__(self, url: str, params: Callable[[Any], tuple], statement: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True, prepare_threshold=None)  # as the domain layer's
        self.params, self.statement = params, statement

    def send(self, msg: Any) -> None:
        self.conn.execute(self.statement, self.params(msg))

    def close(self) -> None:
        self.conn.close()


class Bench:
    def __init__(self, url: str, n: int) -> None:
        from postbox import db
        from postbox.jsoncodec import dumps
        from postbox.work import messages, queues, scopes
        from postbox.work.acl import guard
        from postbox.work.common import PUBLISH

        self.url, self.n, self.table = url, n, common.Table()
        self.tenant, _, self.principal = common.bench_tenant(url)
        self.scope = scopes.create_scope(self.principal, {"slug": "bench"})["id"]
        self.queue = queues.create_queue(self.principal, self.scope, {"slug": "fifo"})["id"]
        db.pool().wait()
        self.queue_pk = self._sql("SELECT id FROM work_queues WHERE queue_id = %s", self.queue)[0]
        self._sql("CREATE TABLE bench_commits (n int)")
        key, gate = self.principal.key_id, guard(self.principal, self.tenant, self.scope, PUBLISH, queue=self.queue)
        actor_type, actor_id = self.principal.actor

        def routed(msg: Any) -> tuple:  # what messages.publish sends for {"body": msg}
            body = {"body": msg, "source_type": actor_type, "source_id": actor_id}
            return self.tenant, self.scope, self.queue, dumps(body).decode(), key, None, gate

        self.routed, self.statement = routed, messages.PUBLISH_SQL
        self.bare = lambda msg: (self.queue_pk, self.scope, self.tenant, dumps(msg).decode(), actor_id)
        self.pg = common.postmaster_pid(url)
        self.whole: tuple[float, float, float] | None = None

    def _sql(self, statement: str, *params: Any) -> tuple | None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params or None)
            return cur.fetchone() if cur.description else None

    @contextlib.contextmanager
    def replaced(self, function: str, definition: str) -> Iterator[None]:
        """`function` defined as `definition` while the line runs, then as it was."""
        before = self._sql("SELECT pg_get_functiondef(%s::regproc)", function)[0]
        self._sql(definition)
        try:
            yield
        finally:
            self._sql(before)

    def measure(self, label: str, make_client: Callable[[], Any], per_call: int = 1) -> None:
        """`self.n` calls' messages on CLIENTS clients, best of ROUNDS: the rate and CPU per call on each
        side (CPU is counted in ticks of 10 ms: each line makes enough calls for that not to show)."""
        send_all(make_client, max(200, 4 * per_call * CLIENTS))  # untimed: connections compile what they call
        best = None
        for _ in range(ROUNDS):
            self._sql("VACUUM ANALYZE work_messages")
            self._sql("VACUUM ANALYZE work_journal")
            self._sql("CHECKPOINT")
            with common.CpuMeter(PostgreSQL=self.pg) as meter:
                seconds, count = send_all(make_client, self.n * per_call // 10 if per_call > 1 else self.n)
            calls = count / per_call
            found = (count / seconds, meter.used["clients"] / calls * 1000, meter.used["PostgreSQL"] / calls * 1000)
            best = found if best is None or found[0] > best[0] else best
        rate, clients, server = best
        if self.whole is None:
            self.whole = best
        share = (clients + server) / (self.whole[1] + self.whole[2])
        print(f"{label:<44} {rate:>9,.0f}/s   clients {clients:5.2f} ms   PostgreSQL {server:5.2f} ms   "
              f"together {clients + server:5.2f} ms ({share:4.0%} of the route's call)", flush=True)

    def single(self) -> None:
        work = lambda: WorkClient(self.principal, self.scope, self.queue)  # noqa: E731
        sql = lambda: SqlClient(self.url, self.routed, self.statement)  # noqa: E731
        print("a single publish, per call:")
        self.measure("  the route's call", work)
        self.measure("  its SQL call alone", sql)
        with self.replaced("work_journal_published", NO_JOURNAL):
            self.measure("  its SQL call without the journal row", sql)
        with self.replaced("work_message_doc", ID_ONLY):
            self.measure("  its SQL call answering the id only", sql)
        self.measure("  a bare insert of the message's row", lambda: SqlClient(self.url, self.bare, BARE_INSERT))
        self.measure("  a commit alone (one-row insert, no index)",
                     lambda: SqlClient(self.url, lambda msg: (msg["n"],), "INSERT INTO bench_commits VALUES (%s)"))

    def batch(self) -> None:
        class Batched(WorkClient):
            def send(self, msg: Any) -> None:  # a call of 100 for every 100th message, as send_all counts
                self.pending = [*getattr(self, "pending", []), msg]
                if len(self.pending) == 100:
                    self.send_batch(self.pending)
                    self.pending = []

        work = lambda: Batched(self.principal, self.scope, self.queue)  # noqa: E731
        print("a batch publish of 100, per call:")
        self.whole = None
        self.measure("  the route's call", work, per_call=100)
        with self.replaced("work_journal_published", NO_JOURNAL):
            self.measure("  without the journal row", work, per_call=100)


def main() -> None:
    def run(args, url: str) -> None:
        bench = Bench(url, 1_000 if args.quick else 4_000)
        print(f"clients: {CLIENTS}, one connection each; {bench.n:,} messages a line, best of {ROUNDS} rounds\n")
        common.steps(("single publish", bench.single), ("batch publish", bench.batch))

    common.bench_main(__doc__, CLIENTS, run, "1,000 messages a line (about a minute)")


if __name__ == "__main__":
    main()
