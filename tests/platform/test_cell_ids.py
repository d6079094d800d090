"""Ids never meet across cells: every sequence steps by 64 times its block and hands out only its
cell's remainder; a second cell takes its number when its first tenant is placed and starts past
the first cell's ids; a move's target is raised past the source, keeping its remainders."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from postbox import cell_ids, migrate, tenancy
from support import cells as test_cells


def test_every_sequence_hands_out_only_its_cells_ids(owner):
    assert cell_ids.problems(owner) == []
    steps = cell_ids.steps(owner)
    assert steps["queue_msg_id_seq"] == 64 and steps["work_journal_seq"] == 64 * 1024
    assert {"work_message_seq", "queues_id_seq", "log_partitions_id_seq"} <= set(steps)


def test_a_sequence_that_would_meet_another_cells_ids_is_named(owner):
    owner.execute("CREATE TABLE public.counted_things (id bigint GENERATED ALWAYS AS IDENTITY)")
    assert cell_ids.problems(owner) == [
        "counted_things_id_seq: steps by 1, not a multiple of 64 (its ids would meet another cell's)"]


def test_the_migration_keeps_a_used_sequence_growing_with_cell_zeros_remainder(database_url):
    url = test_cells.new_database(database_url, "cellids")  # migrated: then back to before the ids changed
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for name, step in cell_ids.steps(conn).items():
                conn.execute(f"ALTER SEQUENCE {name} INCREMENT BY {step // 64}")
            conn.execute("SELECT setval('queue_msg_id_seq', 1000)")
            conn.execute("SELECT setval('work_journal_seq', 5121)")
            conn.execute("DELETE FROM schema_migrations WHERE version = 28")
            conn.execute("DROP TABLE control.cell_identity, control.cell_numbers")
        assert "schema/0028_cell_ids.sql" in migrate.apply(url)
        with psycopg.connect(url) as conn:
            assert cell_ids.problems(conn) == []
            assert conn.execute("SELECT nextval('queue_msg_id_seq')").fetchone()[0] == 1024
            assert conn.execute("SELECT nextval('work_journal_seq')").fetchone()[0] == 65536
    finally:
        test_cells.drop_database(database_url, url)


@pytest.fixture(scope="module")
def second_cell(database_url):
    url = test_cells.new_database(database_url, "cellids2")
    yield url
    test_cells.drop_database(database_url, url)


def _draw(url: str, n: int = 50) -> dict[str, list[int]]:
    with psycopg.connect(url) as conn:
        return {name: [conn.execute(f"SELECT nextval('{name}')").fetchone()[0] for _ in range(n)]
                for name in cell_ids.steps(conn)}


def test_a_second_cell_numbered_at_its_first_tenant_never_meets_the_firsts_ids(database_url, second_cell,
                                                                                 monkeypatch):
    test_cells.use_cells(monkeypatch, database_url, second_cell)
    with psycopg.connect(database_url) as conn:
        first_before = cell_ids.positions(conn)
    tenancy.create_tenant(f"ids-{uuid.uuid4().hex[:10]}", cell="cell-2")
    tenancy.create_tenant(f"ids-{uuid.uuid4().hex[:10]}", cell="cell-1")
    with psycopg.connect(database_url) as conn:
        register = dict(conn.execute("SELECT cell, number FROM control.cell_numbers").fetchall())
    with psycopg.connect(second_cell) as conn:
        k = cell_ids.number_of(conn)
        assert cell_ids.problems(conn) == []
        second_next = {name: v + cell_ids.steps(conn)[name] for name, v in cell_ids.positions(conn).items()}
    assert register["cell-1"] == 0 and register["cell-2"] == k and 0 < k < 64
    assert all(second_next[name] > first_before[name] for name in first_before)  # past the first cell's ids
    one, two = _draw(database_url), _draw(second_cell)
    for name in one:
        assert not set(one[name]) & set(two[name]), name
        step = 64 if name != "work_journal_seq" else 64 * 1024
        assert {v % step for v in two[name]} == {k * step // 64}, name
    # a journal row's block of entries (seq .. seq + 1023) stays within its cell's remainder
    assert all(v % 65536 + 1023 < 65536 for v in one["work_journal_seq"] + two["work_journal_seq"])


def test_advance_sequences_raises_the_target_past_the_source_keeping_its_remainder(database_url, second_cell,
                                                                                    monkeypatch):
    test_cells.use_cells(monkeypatch, database_url, second_cell)
    tenancy.create_tenant(f"ids-{uuid.uuid4().hex[:10]}", cell="cell-2")
    with psycopg.connect(database_url) as conn:
        for _ in range(3):  # the source far ahead
            conn.execute("SELECT setval('queue_msg_id_seq', nextval('queue_msg_id_seq') + 64 * 100000)")
        source = cell_ids.positions(conn)
    with psycopg.connect(second_cell) as conn:
        k = cell_ids.number_of(conn)
        before = cell_ids.positions(conn)
        raised = cell_ids.advance_sequences(conn, source)
        assert set(raised) == set(source)
        assert cell_ids.problems(conn) == []
        got = conn.execute("SELECT nextval('queue_msg_id_seq')").fetchone()[0]
        assert got > source["queue_msg_id_seq"] and got % 64 == k
        # a floor below where a sequence is leaves it there (it draws one value)
        again = cell_ids.advance_sequences(conn, {"queue_msg_id_seq": before["queue_msg_id_seq"]})
        assert again["queue_msg_id_seq"] == got + 64
        with pytest.raises(KeyError, match="no sequence nowhere_seq"):
            cell_ids.advance_sequences(conn, {"nowhere_seq": 1})
