"""What the queues' cycle writes to the WAL (Aurora bills its write I/Os), and the upgrade that
reordered a waiting message's columns: every row, column and trigger kept."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import pytest

from postbox import db, migrate
from postbox.queues import service
from support import database as session_db
from support.cells import empty_database


def test_a_read_logs_the_columns_it_changes_not_the_message(tenant):
    """A read rewrites vt, read_ct and first_read_at in place; the message and headers come before
    them, so its WAL record leaves them out (a 1,500-byte message logged some 1,900 bytes a read)."""
    service.create_queue(tenant.principal, "big", {})
    runs = []
    for _ in range(3):  # the least of three: what another backend wrote meanwhile does not count
        service.send_messages(tenant.principal, "big", [{"text": "x" * 1500}] * 10, headers={"h": "y" * 200})
        with db.connection() as conn:
            before = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        read = service.read_messages(tenant.principal, "big", 10, 30)
        with db.connection() as conn:
            runs.append(int(conn.execute("SELECT pg_current_wal_insert_lsn() - %s::pg_lsn", (before,)).fetchone()[0]))
        assert len(read) == 10
        service.archive_messages(tenant.principal, "big", [m["msg_id"] for m in read])
    assert min(runs) / 10 < 400, runs


# ---- the upgrade ------------------------------------------------------------------------------


@pytest.fixture
def database_before_reorder(database_url, monkeypatch):
    """A new database migrated up to the migration before the reorder; dropped after."""
    owner = session_db.OWNER_URL or database_url
    url = empty_database(database_url, "reorder")
    name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
    every = migrate.available()
    reorder = next(v for v, n, _ in every if n.endswith("_queue_write_cost.sql"))
    monkeypatch.setattr(migrate, "available", lambda: [m for m in every if m[0] < reorder])
    migrate.apply(url)
    monkeypatch.undo()
    yield url
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(psycopg.sql.Identifier(name)))


COLUMNS = "queue_id, msg_id, vt, read_ct, enqueued_at, message, headers, size, dead_from, first_read_at"


def test_the_reorder_keeps_every_waiting_message_and_its_triggers(database_before_reorder):
    url = database_before_reorder
    at = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET postbox.counted = on")  # no queue row to count on: the triggers stand aside
        conn.execute(
            f"INSERT INTO queue_messages ({COLUMNS}) VALUES"
            " (7, 1, %(at)s, 0, %(at)s, '{\"n\": 1}', NULL, 8, NULL, NULL),"
            " (7, 2, %(at)s, 3, %(at)s, '[1, 2]', '{\"sqs\": {\"g\": \"a\"}}', 30, 5, %(at)s),"
            " (7, 3, %(at)s, 1, %(at)s, NULL, '{}', 0, NULL, %(at)s)", {"at": at})
        before = conn.execute(f"SELECT {COLUMNS} FROM queue_messages ORDER BY msg_id").fetchall()
        triggers = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'queue_messages'::regclass AND NOT tgisinternal"
        triggers_before = sorted(r[0] for r in conn.execute(triggers))

    with psycopg.connect(url, autocommit=True) as conn:  # the table migration alone: its triggers already there
        assert any(name.endswith("_queue_write_cost.sql") for name in migrate._apply_schema(conn))
        assert sorted(r[0] for r in conn.execute(triggers)) == triggers_before == ["queue_messages_del",
                                                                                  "queue_messages_ins"]
    migrate.apply(url)

    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(f"SELECT {COLUMNS} FROM queue_messages ORDER BY msg_id").fetchall() == before
        assert sorted(r[0] for r in conn.execute(triggers)) == triggers_before
        last = conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = 'queue_messages'::regclass"
                            " AND attnum > 0 AND NOT attisdropped ORDER BY attnum DESC LIMIT 3").fetchall()
        assert [r[0] for r in last] == ["first_read_at", "read_ct", "vt"]
        assert conn.execute("SELECT to_regclass('queue_archive_archived_at')").fetchone()[0] is None
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT msg_id FROM queue_messages WHERE queue_id = 7 AND headers->'sqs'->>'g' = 'a'"))
        assert "queue_messages_group" in plan
