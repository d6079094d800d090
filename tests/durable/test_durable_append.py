"""The append as one SQL call (`durable_append`): every outcome it answers, the order of the
protocol's checks (a body's validation comes after the stream's state), producer state across
close, lifetimes renewed by writes, and one round trip per append."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from postbox import db
from postbox.durable import lifecycle, reads, writes
from postbox.durable.model import CreateSpec, Producer, Scope
from postbox.errors import Conflict, Gone, Invalid, NotFound, PreconditionFailed

JSON = "application/json"



def name() -> str:
    return f"a-{uuid.uuid4().hex[:10]}"


def payloads(scope: Scope, stream: str) -> list[bytes]:
    return reads.read(scope, stream, None, max_bytes=1 << 30).payloads


def age(scope: Scope, stream: str, hours: int = 1) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE durable_streams SET accessed_at = accessed_at - %s * interval '1 hour'"
                     " WHERE project_id = %s AND name = %s", (hours, scope.project_id, stream))


def test_json_append_is_validated_flattened_and_offsets_follow(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type=JSON))
    first = writes.append(scope, s, b'[{"a": 1}, 2]', content_type="application/json; charset=utf-8")
    second = writes.append(scope, s, b' "x" ', content_type=JSON)
    assert (first.offset, first.next_offset, second.offset, second.next_offset) == (0, 1, 1, 2)
    assert payloads(scope, s) == [b'{"a":1}\n2', b'"x"']


def test_validation_comes_after_the_streams_state(scope):
    missing, closed, text = name(), name(), name()
    with pytest.raises(NotFound):
        writes.append(scope, missing, b"{not json", content_type=JSON)
    lifecycle.create(scope, closed, CreateSpec(content_type=JSON, closed=True))
    with pytest.raises(Conflict) as err:
        writes.append(scope, closed, b"{not json", content_type=JSON)
    assert err.value.code == "STREAM_CLOSED"
    lifecycle.create(scope, text, CreateSpec(content_type="text/plain"))
    with pytest.raises(Conflict) as mismatch:
        writes.append(scope, text, b"{not json", content_type=JSON)
    assert mismatch.value.code == "CONTENT_TYPE_MISMATCH"
    ok = name()
    lifecycle.create(scope, ok, CreateSpec(content_type=JSON))
    with pytest.raises(Invalid) as invalid:
        writes.append(scope, ok, b"{not json", content_type=JSON)
    assert invalid.value.code == "INVALID_REQUEST"
    with pytest.raises(Invalid) as empty:
        writes.append(scope, ok, b"[]", content_type=JSON)
    assert empty.value.code == "EMPTY_APPEND"
    assert payloads(scope, ok) == []


def test_incarnation_and_gone(scope):
    s, src, fork = name(), name(), name()
    created = lifecycle.create(scope, s, CreateSpec(content_type="text/plain")).stream
    with pytest.raises(PreconditionFailed) as err:
        writes.append(scope, s, b"x", content_type="text/plain", incarnation="0" * 16)
    assert err.value.details["incarnation"] == created.incarnation
    ok = writes.append(scope, s, b"x", content_type="text/plain", incarnation=created.incarnation)
    assert ok.incarnation == created.incarnation and ok.next_offset == 1
    lifecycle.create(scope, src, CreateSpec(content_type="text/plain", body=b"a"))
    lifecycle.create(scope, fork, CreateSpec(source_name=src))
    lifecycle.delete(scope, src)  # forks still read it: soft-deleted
    with pytest.raises(Gone):
        writes.append(scope, src, b"y", content_type="text/plain")


def test_an_expired_stream_takes_no_appends_and_a_write_renews_a_lifetime(scope):
    lone, src, fork, live = name(), name(), name(), name()
    lifecycle.create(scope, lone, CreateSpec(content_type="text/plain", ttl_seconds=60))
    lifecycle.create(scope, src, CreateSpec(content_type="text/plain", ttl_seconds=60, body=b"a"))
    lifecycle.create(scope, fork, CreateSpec(source_name=src, ttl_seconds=3600))
    age(scope, lone)
    age(scope, src)
    with pytest.raises(NotFound):
        writes.append(scope, lone, b"x", content_type="text/plain")
    with pytest.raises(Gone):
        writes.append(scope, src, b"x", content_type="text/plain")
    lifecycle.create(scope, live, CreateSpec(content_type="text/plain", ttl_seconds=3600))
    with db.transaction() as conn:
        conn.execute("UPDATE durable_streams SET accessed_at = accessed_at - interval '50 minutes'"
                     " WHERE project_id = %s AND name = %s", (scope.project_id, live))
    writes.append(scope, live, b"x", content_type="text/plain")
    with db.transaction() as conn:
        idle = conn.execute("SELECT clock_timestamp() - accessed_at < interval '1 minute' FROM durable_streams"
                            " WHERE project_id = %s AND name = %s", (scope.project_id, live)).fetchone()[0]
    assert idle  # the append renewed the sliding lifetime


def test_closing_with_a_producer_is_deduplicated(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    writes.append(scope, s, b"a", content_type="text/plain", producer=Producer("p", 0, 0))
    closed = writes.append(scope, s, b"", content_type=None, close=True, producer=Producer("p", 0, 1))
    assert closed.closed and not closed.duplicate and closed.next_offset == 1
    again = writes.append(scope, s, b"", content_type=None, close=True, producer=Producer("p", 0, 1))
    assert again.closed and again.duplicate and again.last_seq == 1
    plain = writes.append(scope, s, b"", content_type=None, close=True)
    assert plain.closed and not plain.duplicate
    with pytest.raises(Conflict) as other:
        writes.append(scope, s, b"", content_type=None, close=True, producer=Producer("q", 0, 0))
    assert other.value.code == "STREAM_CLOSED" and other.value.details["next_offset"] == 1
    assert payloads(scope, s) == [b"a"]


def test_an_append_that_closes_keeps_its_data_and_its_producer(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    last = writes.append(scope, s, b"end", content_type="text/plain", close=True, producer=Producer("p", 3, 0))
    assert (last.offset, last.next_offset, last.closed) == (0, 1, True)
    retry = writes.append(scope, s, b"end", content_type="text/plain", close=True, producer=Producer("p", 3, 0))
    assert retry.duplicate and retry.closed and retry.next_offset == 1
    assert payloads(scope, s) == [b"end"]


def test_duplicate_producer_write_answers_the_last_seq_and_appends_nothing(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    for seq in range(3):
        writes.append(scope, s, b"m%d" % seq, content_type="text/plain", producer=Producer("p", 0, seq))
    dup = writes.append(scope, s, b"m1", content_type="text/plain", producer=Producer("p", 0, 1))
    assert dup.duplicate and dup.last_seq == 2 and dup.next_offset == 3 and dup.offset is None
    with pytest.raises(Conflict) as new:
        writes.append(scope, s, b"x", content_type="text/plain", producer=Producer("fresh", 0, 4))
    assert (new.value.details["expected_seq"], new.value.details["received_seq"]) == (0, 4)
    assert len(payloads(scope, s)) == 3


def test_stream_seq_compares_bytes(scope):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type="text/plain"))
    writes.append(scope, s, b"1", content_type="text/plain", seq="Z")
    writes.append(scope, s, b"2", content_type="text/plain", seq="a")  # 'a' > 'Z' in bytes, not in en_US
    writes.append(scope, s, b"3", content_type="text/plain", seq="é")  # UTF-8 0xC3 > 'a'
    with pytest.raises(Conflict) as err:
        writes.append(scope, s, b"4", content_type="text/plain", seq="z")
    assert err.value.code == "STREAM_SEQ_CONFLICT"
    writes.append(scope, s, b"5", content_type="text/plain", close=True)  # no Stream-Seq: not checked
    assert payloads(scope, s) == [b"1", b"2", b"3", b"5"]


def test_one_round_trip_per_append(scope, monkeypatch):
    s = name()
    lifecycle.create(scope, s, CreateSpec(content_type=JSON))
    writes.append(scope, s, b"1", content_type=JSON)  # warm the pool's connection
    sent: list[str] = []
    real = psycopg.Connection.execute

    def counting(self, query, *args, **kwargs):
        sent.append(str(query))
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", counting)
    writes.append(scope, s, b'{"n": 2}', content_type=JSON, seq="001", producer=Producer("p", 0, 0))
    assert len(sent) == 1 and "durable_append" in sent[0]
