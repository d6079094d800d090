"""The log engine on real PostgreSQL: ordered offsets, frames, compression, dedup, retention."""

from __future__ import annotations

import threading

from postbox import db
from postbox.log_engine import frames, store
from postbox.log_engine.frames import Record


def _partition(tenant, name="Default", owner=1):
    with db.transaction() as conn:
        return store.ensure_partition(conn, tenant.tenant_id, "test", owner, name)


def test_frames_round_trip_with_and_without_compression():
    records = [Record(b"x" * n, id=f"id-{n}", key=None if n % 2 else "k", headers=b'{"h":1}' if n % 3 else None,
                      ts_ms=n) for n in range(1, 60)]
    codec, stored, raw = frames.pack(records)
    assert codec == frames.ZSTD and len(stored) < raw
    entries = frames.decode(frames.unpack(codec, stored), 10, 999)
    assert [(e.offset, e.payload, e.id, e.key, e.headers, e.ts_ms) for e in entries] == [
        (10 + i, r.payload, r.id, r.key, r.headers, r.ts_ms) for i, r in enumerate(records)]
    small = [Record(b"hi")]
    assert frames.pack(small)[0] == frames.RAW
    assert frames.decode(frames.encode(small), 0, 7)[0].ts_ms == 7  # 0 means the segment's time


def test_append_and_read_back_in_order(tenant):
    p = _partition(tenant)
    with db.transaction() as conn:
        a = store.append(conn, p.id, [Record(f"m{i}".encode()) for i in range(5)])
        b = store.append(conn, p.id, [Record(f"m{i}".encode()) for i in range(5, 8)])
    assert (a.first_offset, b.first_offset, b.next_offset) == (0, 5, 8)
    with db.transaction() as conn:
        assert [e.payload for e in store.read(conn, p.id, 0)] == [f"m{i}".encode() for i in range(8)]
        assert [e.offset for e in store.read(conn, p.id, 3, max_records=3)] == [3, 4, 5]
        assert [e.offset for e in store.read(conn, p.id, 6, until_offset=7)] == [6]
        assert store.read(conn, p.id, 8) == []
        assert [e.offset for e in store.read(conn, p.id, 0, max_bytes=5)] == [0, 1]


def test_partitions_are_created_once_per_owner_and_name(tenant):
    a = _partition(tenant, "x")
    b = _partition(tenant, "x")
    c = _partition(tenant, "y")
    assert a.id == b.id != c.id
    with db.transaction() as conn:
        assert [p.name for p in store.partitions_of(conn, "test", 1) if p.id in (a.id, c.id)] == ["x", "y"]


def test_dedup_skips_ids_already_appended_and_repeated_in_a_batch(tenant):
    p = _partition(tenant, owner=2)
    with db.transaction() as conn:
        first = store.append(conn, p.id, [Record(b"a", id="t1"), Record(b"b", id="t2")], dedup=True)
        again = store.append(conn, p.id, [Record(b"a2", id="t1"), Record(b"c", id="t3"), Record(b"c2", id="t3")],
                             dedup=True)
        nothing = store.append(conn, p.id, [Record(b"a3", id="t1")], dedup=True)
    assert first.offsets == [0, 1]
    assert again.offsets == [None, 2, None] and again.duplicates == {0: 0, 2: 2}
    assert nothing.offsets == [None] and nothing.duplicates == {0: 0} and nothing.next_offset == 3


def test_concurrent_appenders_get_strictly_increasing_gapless_offsets(tenant):
    p = _partition(tenant, owner=3)

    def writer(w):
        for i in range(50):
            with db.transaction() as conn:
                store.append(conn, p.id, [Record(f"{w}:{i}:{j}".encode()) for j in range(10)])

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db.transaction() as conn:
        entries = store.read(conn, p.id, 0, max_records=10_000)
    assert [e.offset for e in entries] == list(range(2000))
    for w in range(4):  # each writer's records stay in its own order
        mine = [e.payload for e in entries if e.payload.startswith(f"{w}:".encode())]
        assert mine == [f"{w}:{i}:{j}".encode() for i in range(50) for j in range(10)]


def test_retention_drops_whole_segments_and_keeps_offsets(tenant):
    p = _partition(tenant, owner=4)
    with db.transaction() as conn:
        for s in range(3):
            store.append(conn, p.id, [Record(f"{s}-{i}".encode(), id=f"{s}-{i}") for i in range(10)], dedup=True)
        assert store.drop_before(conn, p.id, 15) == 10  # only the first segment ends at or below 15
        part = store.find_partition(conn, "test", 4, "Default")
        assert part.start_offset == 10 and part.next_offset == 30
        assert store.read(conn, p.id, 0)[0].offset == 10
        nxt = store.append(conn, p.id, [Record(b"new")])
        assert nxt.first_offset == 30
        assert store.delete_partitions(conn, "test", 4) == 21


def test_read_at_finds_scattered_offsets_across_segments(tenant):
    p = _partition(tenant, owner=5)
    with db.transaction() as conn:
        for s in range(4):
            store.append(conn, p.id, [Record(f"{s}-{i}".encode()) for i in range(5)])
        found = store.read_at(conn, p.id, [0, 7, 8, 19, 19, 42])
        assert {o: e.payload for o, e in found.items()} == {0: b"0-0", 7: b"1-2", 8: b"1-3", 19: b"3-4"}
        store.drop_before(conn, p.id, 5)
        assert set(store.read_at(conn, p.id, [0, 5])) == {5}
        assert store.read_at(conn, p.id, []) == {}


def test_frames_pack_and_unpack_from_many_threads_at_once():
    records = [Record(f"payload {i} ".encode() * 40) for i in range(50)]
    failures = []

    def work():
        try:
            for _ in range(200):
                codec, stored, _ = frames.pack(records)
                assert frames.decode(frames.unpack(codec, stored), 0, 0)[-1].payload == records[-1].payload
        except Exception as e:  # surfaced below
            failures.append(e)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
