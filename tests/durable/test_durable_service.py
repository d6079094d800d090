"""The durable domain on PostgreSQL: concurrent appends and producers, forks and their deletion,
lifetimes and the expiry sweep, retention, and the JSON-mode and offset helpers."""

from __future__ import annotations

import threading
import uuid

import pytest

from postbox import db
from postbox.durable import catalog, jsontext, lifecycle, offsets, reads, writes
from postbox.durable.model import CreateSpec, Producer, Scope
from postbox.errors import Conflict, Gone, Invalid, NotFound, PostboxError


def name() -> str:
    return f"d-{uuid.uuid4().hex[:10]}"


def payloads(scope: Scope, stream: str, start: int | None = None) -> list[bytes]:
    return reads.read(scope, stream, start, max_bytes=1 << 30).payloads


def test_concurrent_appends_lose_nothing_and_offsets_are_gapless(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    threads, per = 8, 25
    results: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        for i in range(per):
            written = writes.append(scope, s, f"{w}:{i};".encode(), content_type="text/plain")
            with lock:
                results.append(written.offset)

    pool = [threading.Thread(target=writer, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert sorted(results) == list(range(threads * per))
    got = payloads(scope, s)
    assert len(got) == threads * per
    assert sorted(got) == sorted(f"{w}:{i};".encode() for w in range(threads) for i in range(per))
    for w in range(threads):  # each writer's appends keep their order
        mine = [p for p in got if p.startswith(f"{w}:".encode())]
        assert mine == [f"{w}:{i};".encode() for i in range(per)]


def test_concurrent_duplicate_producer_writes_apply_once(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    outcomes: list[bool] = []
    lock = threading.Lock()

    def send(seq: int) -> None:
        w = writes.append(scope, s, f"m{seq}".encode(), content_type="text/plain", producer=Producer("p", 0, seq))
        with lock:
            outcomes.append(w.duplicate)

    for seq in range(5):
        pool = [threading.Thread(target=send, args=(seq,)) for _ in range(4)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    assert payloads(scope, s) == [f"m{i}".encode() for i in range(5)]
    assert outcomes.count(False) == 5 and outcomes.count(True) == 15


def test_producer_epochs_and_gaps(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    writes.append(scope, s, b"a", content_type="text/plain", producer=Producer("p", 1, 0))
    with pytest.raises(PostboxError) as stale:  # PB403: the class of every 403 out of SQL
        writes.append(scope, s, b"b", content_type="text/plain", producer=Producer("p", 0, 1))
    assert (stale.value.status, stale.value.code) == (403, "PRODUCER_EPOCH_STALE")
    assert stale.value.details["current_epoch"] == 1
    with pytest.raises(Conflict) as gap:
        writes.append(scope, s, b"c", content_type="text/plain", producer=Producer("p", 1, 5))
    assert (gap.value.details["expected_seq"], gap.value.details["received_seq"]) == (1, 5)
    with pytest.raises(Invalid):
        writes.append(scope, s, b"d", content_type="text/plain", producer=Producer("p", 2, 3))
    writes.append(scope, s, b"e", content_type="text/plain", producer=Producer("p", 2, 0))
    assert payloads(scope, s) == [b"a", b"e"]


def test_stream_seq_and_close(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    writes.append(scope, s, b"1", content_type="text/plain", seq="09")
    writes.append(scope, s, b"2", content_type="text/plain", seq="10")
    with pytest.raises(Conflict):
        writes.append(scope, s, b"3", content_type="text/plain", seq="10")
    closed = writes.append(scope, s, b"last", content_type="text/plain", close=True)
    assert closed.closed and closed.next_offset == 3
    with pytest.raises(Conflict) as err:
        writes.append(scope, s, b"more", content_type="text/plain")
    assert err.value.code == "STREAM_CLOSED" and err.value.details["next_offset"] == 3
    assert reads.read(scope, s, 3, max_bytes=100).closed_at_tail


def test_fork_reads_through_chain_and_cascading_delete(scope):
    src, fork, grand = name(), name(), name()
    lifecycle.create(scope, src, CreateSpec(content_type="text/plain", body=b"a"))
    writes.append(scope, src, b"b", content_type="text/plain")
    lifecycle.create(scope, fork, CreateSpec(source_name=src, fork_offset=1))
    writes.append(scope, src, b"c", content_type="text/plain")  # after the fork point: not in the fork
    writes.append(scope, fork, b"x", content_type="text/plain")
    lifecycle.create(scope, grand, CreateSpec(source_name=fork, fork_sub_offset=0))
    writes.append(scope, grand, b"y", content_type="text/plain")
    assert payloads(scope, fork) == [b"a", b"x"]
    assert payloads(scope, grand) == [b"a", b"x", b"y"]
    assert payloads(scope, grand, 1) == [b"x", b"y"]
    lifecycle.delete(scope, src)  # soft: forks still read it
    with pytest.raises(Gone):
        reads.read(scope, src, None, max_bytes=10)
    with pytest.raises(Conflict):
        lifecycle.create(scope, src, CreateSpec(content_type="text/plain"))
    lifecycle.delete(scope, fork)
    assert payloads(scope, grand) == [b"a", b"x", b"y"]
    lifecycle.delete(scope, grand)  # the last reader goes: the soft-deleted chain is collected
    with pytest.raises(NotFound):
        catalog.head(scope, src)
    with pytest.raises(NotFound):
        catalog.head(scope, fork)
    assert lifecycle.create(scope, src, CreateSpec(content_type="text/plain")).created


def test_fork_at_sub_offset_keeps_a_prefix(scope):
    src, fork = name(), name()
    lifecycle.create(scope, src, CreateSpec(content_type="application/json", body=b"[1, 2, 3]"))
    lifecycle.create(scope, fork, CreateSpec(source_name=src, fork_offset=0, fork_sub_offset=2))
    r = reads.read(scope, fork, None, max_bytes=100)
    assert jsontext.as_array(r.payloads) == b"[1,2]" and r.next_offset == 1
    with pytest.raises(Invalid):
        lifecycle.create(scope, name(), CreateSpec(source_name=src, fork_offset=0, fork_sub_offset=4))


def test_expiry_removes_or_soft_deletes(scope):
    lone, src, fork = name(), name(), name()
    lifecycle.create(scope, lone, CreateSpec(content_type="text/plain", ttl_seconds=60, body=b"x"))
    lifecycle.create(scope, src, CreateSpec(content_type="text/plain", ttl_seconds=60, body=b"y"))
    lifecycle.create(scope, fork, CreateSpec(source_name=src, ttl_seconds=3600))
    with db.transaction() as conn:
        conn.execute("UPDATE durable_streams SET accessed_at = accessed_at - interval '1 hour'"
                     " WHERE project_id = %s AND name = ANY(%s)", (scope.project_id, [lone, src]))
    from functions.agents.durable_expiry import handler
    from functions.local.lambda_context import LocalContext

    assert handler({}, LocalContext("durable-expiry", 30))["expired"] >= 2
    with db.transaction() as conn:
        left = conn.execute("SELECT count(*) FROM durable_streams WHERE project_id = %s AND name = %s",
                            (scope.project_id, lone)).fetchone()[0]
    assert left == 0  # removed by the agent, not by a request
    with pytest.raises(NotFound):
        catalog.head(scope, lone)
    with pytest.raises(Gone):
        catalog.head(scope, src)
    assert payloads(scope, fork) == [b"y"]


def test_retention_drops_records_and_answers_gone(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    for i in range(5):
        writes.append(scope, s, str(i).encode(), content_type="text/plain")
    assert lifecycle.retain(scope, s, 3) == 3
    with pytest.raises(Gone):
        reads.read(scope, s, 2, max_bytes=100)
    assert payloads(scope, s) == [b"3", b"4"]
    with db.transaction() as conn:
        left = conn.execute(
            "SELECT count(*) FROM log_segments g JOIN durable_streams s ON s.partition_id = g.partition_id"
            " WHERE s.project_id = %s AND s.name = %s", (scope.project_id, s)).fetchone()[0]
    assert left == 2


def test_read_is_bounded_in_bytes_but_returns_one_append(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="application/octet-stream"))
    for _ in range(4):
        writes.append(scope, s, b"z" * 100, content_type="application/octet-stream")
    r = reads.read(scope, s, None, max_bytes=250)
    assert len(r.payloads) == 2 and r.next_offset == 2 and not r.up_to_date
    r = reads.read(scope, s, None, max_bytes=10)
    assert len(r.payloads) == 1


def test_json_text_helpers():
    assert jsontext.messages_of(b' [ {"a" : "x  y"}, [1, 2] , 3 ] ') == ['{"a":"x  y"}', "[1,2]", "3"]
    assert jsontext.messages_of(b'"s\\"]"') == ['"s\\"]"']
    assert jsontext.messages_of(b"[]", allow_empty=True) == []
    for bad in (b"[]", b"{", b"NaN", b"\xff"):
        with pytest.raises(Invalid):
            jsontext.messages_of(bad)
    assert jsontext.as_ndjson([jsontext.pack(["1", "2"]), jsontext.pack(["3"])]) == b"1\n2\n3\n"


def test_offsets_are_sortable_and_strict():
    assert offsets.format_offset(9) < offsets.format_offset(10)
    assert offsets.parse_offset(offsets.format_offset(42)) == 42
    for bad in ("-1", "now", "1_2", "0000000000000000_000000000000000a", "0001000000000000_0000000000000000"):
        assert offsets.parse_offset(bad) is None
    first = offsets.response_cursor(None)
    assert int(offsets.response_cursor(first)) > int(first)


def test_retention_stops_at_a_forks_offset(scope):
    src, fork = name(), name()
    lifecycle.create(scope, src, CreateSpec(content_type="text/plain", body=b"a"))
    for b in (b"b", b"c"):
        writes.append(scope, src, b, content_type="text/plain")
    lifecycle.create(scope, fork, CreateSpec(source_name=src, fork_offset=2))
    with pytest.raises(Invalid):  # the fork still reads offsets 0 and 1 through the source
        lifecycle.retain(scope, src, 1)
    assert payloads(scope, fork) == [b"a", b"b"]
    lifecycle.retain(scope, fork, 2)  # the fork lets go of what it inherited
    assert lifecycle.retain(scope, src, 3) == 3
    assert payloads(scope, fork) == []
