"""The flows SDK's pure logic: config hash, state keys, windows, watermark, folds, gate, idle flush.

A fake in-memory client stands in for Postbox so the runner's loop runs without a database; the
real routes are exercised by the other tests of tests/flows.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from postbox_client.flows import Query, Runner, count, sum_of
from postbox_client.flows.fold import Message, fold, needed_keys, prepare, stream_time
from postbox_client.flows.keys import SEP, WATERMARK, state_key
from postbox_client.flows.windows import Cron, Session, Sliding, Tumbling, iso_ms

MIN = 60_000


class FakeClient:
    """Postbox in memory: one source partition `p1`, state rows, sink pushes, a lease per pop."""

    def __init__(self, messages: list[dict[str, Any]] | None = None) -> None:
        self.queue: list[dict[str, Any]] = list(messages or [])
        self.committed = 0
        self.leased: tuple[str, int] | None = None
        self.state: dict[str, Any] = {}
        self.sink: list[dict[str, Any]] = []
        self.cycles: list[dict[str, Any]] = []
        self.hash: str | None = None

    def register(self, name, source_queue, sink_queue, config_hash, reset=False):
        self.hash = config_hash
        return {"success": True, "query_id": "q1"}

    def get_state(self, query_id, partition_id, keys=None, key_prefix=None, ripe_at_or_before=None):
        rows = []
        for k in sorted(self.state):
            v = self.state[k]
            if keys and k not in keys:
                continue
            if key_prefix and not k.startswith(key_prefix):
                continue
            if ripe_at_or_before is not None and not (
                    isinstance(v.get("windowEnd"), int | float) and v["windowEnd"] <= ripe_at_or_before):
                continue
            rows.append({"key": k, "value": json.loads(json.dumps(v))})
        return rows

    def due(self, query_id, consumer_group=None, key_prefix=None, ripe_at_or_before=None):
        """`p1` when it holds matching rows and is quiet (nothing leased, nothing left to pop)."""
        quiet = self.leased is None and self.committed >= len(self.queue)
        rows = self.get_state(query_id, "p1", key_prefix=key_prefix, ripe_at_or_before=ripe_at_or_before)
        return ["p1"] if rows and quiet else []

    def pop(self, queue, *, batch, wait_ms, consumer_group):
        if self.leased is not None or self.committed >= len(self.queue):
            return []
        end = min(self.committed + batch, len(self.queue))
        self.leased = (f"lease{self.committed}", end)
        return [{**m, "partitionId": "p1", "leaseId": self.leased[0]} for m in self.queue[self.committed:end]]

    def cycle(self, body):
        self.cycles.append(body)
        ack = body["ack"]
        if ack is not None:
            assert self.leased and ack["leaseId"] == self.leased[0]
            self.committed += ack["count"]
            if body["release_lease"]:
                self.leased = None
        for op in body["state_ops"]:
            if op["type"] == "upsert":
                self.state[op["key"]] = json.loads(json.dumps(op["value"]))
            else:
                self.state.pop(op["key"], None)
        seen = {i["transactionId"] for i in self.sink}
        self.sink += [i for i in body["push_items"] if i["transactionId"] not in seen]
        return {"success": True}


def msgs(*events: tuple[int, Any]) -> list[dict[str, Any]]:
    """Source messages: (createdAt ms, data)."""
    return [{"transactionId": f"t{i:04d}", "createdAt": ts, "data": data} for i, (ts, data) in enumerate(events)]


def drain(runner: Runner, client: FakeClient) -> None:
    runner.start()
    while runner.run_once(wait_ms=0):
        pass


# ---- config hash and keys -----------------------------------------------------------------------

def _counting(fn=lambda v: v, sink="out"):
    return Query("q", "src").map(fn).tumbling(60).aggregate(n=count()).to(sink)


def test_config_hash_is_sha256_of_the_compact_operator_list():
    q = _counting()
    expected = json.dumps(q.describe(), separators=(",", ":"))
    assert q.config_hash() == hashlib.sha256(expected.encode()).hexdigest()
    assert q.describe()[0] == {"kind": "map"}
    assert q.describe()[1]["kind"] == "tumbling" and q.describe()[1]["size"] == 60


def test_config_hash_ignores_functions_and_queue_names_but_not_the_shape():
    base = _counting().config_hash()
    assert _counting(fn=lambda v: v * 2, sink="elsewhere").config_hash() == base
    assert Query("q", "src").map(lambda v: v).tumbling(120).aggregate(n=count()).to("out").config_hash() != base
    assert Query("q", "src").map(lambda v: v).tumbling(60).aggregate(n=sum_of(len)).to("out").config_hash() != base
    assert Query("q", "src").tumbling(60).aggregate(n=count()).to("out").config_hash() != base


def test_state_key_and_tags():
    assert state_key("tumb:60", iso_ms(0), "acme") == f"tumb:60{SEP}1970-01-01T00:00:00.000Z{SEP}acme"
    assert Tumbling(60).tag == "tumb:60"
    assert Sliding(600, 60).tag == "slide:600:60"
    assert Cron("hour").tag == "cron:hour"
    assert Session(30).tag == "sess:30"
    assert iso_ms(1_786_960_860_123) == "2026-08-17T10:01:00.123Z"


def test_shape_rules():
    with pytest.raises(ValueError):
        Query("q", "s").tumbling(60).to("x")                      # a window needs a fold
    with pytest.raises(ValueError):
        Query("q", "s").tumbling(60).sliding(60, 30)              # one window only
    with pytest.raises(ValueError):
        Query("q", "s").map(len).to("x")                          # no window, no gate
    with pytest.raises(ValueError):
        Sliding(100, 30)                                          # size a multiple of slide
    with pytest.raises(ValueError):
        Query("q", "s").tumbling(60).aggregate(n=count()).to("x").map(len)  # sink is last
    with pytest.raises(ValueError):
        Query("q", "s").tumbling(60).aggregate(n=count()).key_by(len)


# ---- window assignment ---------------------------------------------------------------------------

def test_tumbling_and_cron_alignment():
    assert Tumbling(60).assign(61_000) == [(60_000, 120_000)]
    # 2026-08-19 is a Wednesday; its week starts Monday 2026-08-17 00:00 UTC.
    wednesday = 1_787_140_800_000 + 3_600_000
    (start, end), = Cron("week").assign(wednesday)
    assert iso_ms(start) == "2026-08-17T00:00:00.000Z" and end - start == 7 * 86_400_000
    (start, _), = Cron("hour").assign(1_786_960_860_123)
    assert iso_ms(start) == "2026-08-17T10:00:00.000Z"


def test_sliding_assignment_is_every_window_containing_the_time():
    # size 30 s, slide 10 s: t = 25 s lies in [0,30), [10,40), [20,50).
    assert Sliding(30, 10).assign(25_000) == [(0, 30_000), (10_000, 40_000), (20_000, 50_000)]


# ---- folding through the runner (fake client) ----------------------------------------------------

def test_tumbling_count_closes_windows_by_stream_time_and_idle_flush_emits_the_rest():
    events = [(i * 20_000, {"v": 1}) for i in range(10)]   # 0..180 s: windows 0,60,120 (3 each) and 180 (1)
    client = FakeClient(msgs(*events))
    q = Query("q", "src").tumbling(60).aggregate(n=count()).to("out")
    runner = Runner(q, client, batch=4)
    drain(runner, client)
    got = [(i["payload"]["windowStart"], i["payload"]["value"]["n"]) for i in client.sink]
    assert got == [(0, 3), (60_000, 3), (120_000, 3)]
    assert client.committed == 10
    # The last window is still open; an idle flush by wall clock emits it and deletes its row.
    assert runner.flush_idle(force=True) == 1
    assert client.sink[-1]["payload"]["value"] == {"n": 1} and client.cycles[-1]["ack"] is None
    assert not [k for k in client.state if not k.startswith("__")]


def test_sliding_windows_against_hand_computed_sums():
    # size 30 s, slide 10 s, values at t = 5, 15, 25, 35 s (1, 2, 4, 8); then t = 100 s closes all.
    events = [(5_000, 1), (15_000, 2), (25_000, 4), (35_000, 8), (100_000, 0)]
    client = FakeClient(msgs(*events))
    q = Query("q", "src").sliding(30, 10).reduce(lambda a, v: a + v, 0).to("out")
    drain(Runner(q, client, batch=2), client)
    got = {i["payload"]["windowStart"]: i["payload"]["value"] for i in client.sink}
    assert got == {-20_000: 1, -10_000: 3, 0: 7, 10_000: 14, 20_000: 12, 30_000: 8}


def test_session_windows_against_hand_computed_sessions():
    # gap 10 s, key by user: a at 0, 5, 12 s (one session 0..22), a again at 40 s (new session);
    # b at 3 s alone. Event time closes sessions when the watermark passes lastEventTime + gap.
    events = [(0, ("a", 0)), (0, ("b", 3)), (0, ("a", 5)), (0, ("a", 12)), (0, ("a", 40)), (0, ("z", 100))]
    client = FakeClient(msgs(*events))
    q = (Query("q", "src").key_by(lambda v: v[0])
         .session(10, event_time=lambda v: v[1] * 1000).aggregate(n=count()).to("out"))
    drain(Runner(q, client, batch=2), client)
    got = sorted((i["payload"]["key"], i["payload"]["windowStart"], i["payload"]["windowEnd"],
                  i["payload"]["value"]["n"]) for i in client.sink)
    assert got == [("a", 0, 22_000, 3), ("a", 40_000, 50_000, 1), ("b", 3_000, 13_000, 1)]
    assert client.state[WATERMARK] == {"eventTimeMs": 100_000}
    assert f"sess:10{SEP}open{SEP}z" in client.state


def test_event_time_watermark_drops_late_events_or_includes_them():
    def run(include_late: bool) -> list[tuple[int, int]]:
        # lateness 5 s. After t=70 the watermark is 65 s: window [0,60) closed. A late t=30 comes next.
        events = [(0, 10), (0, 70), (0, 30), (0, 200)]
        client = FakeClient(msgs(*events))
        q = Query("q", "src").tumbling(60, event_time=lambda v: v * 1000, allowed_lateness=5,
                                       include_late=include_late).aggregate(n=count()).to("out")
        drain(Runner(q, client, batch=2), client)
        return [(i["payload"]["windowStart"], i["payload"]["value"]["n"]) for i in client.sink]

    assert run(False) == [(0, 1), (60_000, 1)]
    assert run(True) == [(0, 1), (0, 1), (60_000, 1)]


def test_batch_boundaries_do_not_change_in_order_output():
    events = [(i * 7_000, {"amount": i}) for i in range(40)]
    outputs = []
    for batch in (1, 3, 40):
        client = FakeClient(msgs(*events))
        q = Query("q", "src").tumbling(60).aggregate(n=count(), total=sum_of(lambda v: v["amount"])).to("out")
        drain(Runner(q, client, batch=batch), client)
        outputs.append([(i["transactionId"], i["payload"]) for i in client.sink])
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) == 4


def test_post_operators_map_window_results():
    client = FakeClient(msgs((0, 1), (70_000, 1)))
    q = (Query("q", "src").tumbling(60).aggregate(n=count())
         .map(lambda w: {"start": w["windowStart"], "n": w["value"]["n"]}).to("out"))
    drain(Runner(q, client), client)
    assert [i["payload"] for i in client.sink] == [{"start": 0, "n": 1}]


def test_gate_after_flat_map_acks_whole_source_messages_and_keeps_the_lease():
    # Each message expands to 2 records; the gate admits 5 records, so message 2's second record
    # is refused: 2 source messages are acked (not 5 records), the lease is kept on the rest.
    client = FakeClient(msgs(*[(i, i) for i in range(4)]))

    def budget(value, state):
        state["used"] = state.get("used", 0) + 1
        return state["used"] <= 5

    q = Query("q", "src").flat_map(lambda v: [v, v]).gate(budget).to("out")
    runner = Runner(q, client, batch=10)
    runner.start()
    runner.run_once(wait_ms=0)
    body = client.cycles[0]
    assert body["ack"]["count"] == 2 and body["release_lease"] is False
    assert [i["payload"] for i in client.sink] == [0, 0, 1, 1]
    assert client.state[state_key("gate", "", "p1")] == {"used": 4}


def test_fold_is_pure_given_the_same_state():
    q = Query("q", "src").tumbling(60).aggregate(n=count()).to("out")
    batch = [Message(f"t{i}", i * 1000, {}, "p") for i in range(5)]
    records = prepare(q, batch)
    assert needed_keys(q, records) == [WATERMARK, state_key("tumb:60", iso_ms(0), "p")]
    assert stream_time(q, batch, records, {}) == 4000
    a = fold(q, batch, records, {})
    b = fold(q, batch, records, {})
    assert a.state_ops == b.state_ops and a.state_ops[0]["value"]["acc"] == {"n": 5}


def test_a_gate_retries_its_refused_tail_under_the_same_lease():
    client = FakeClient(msgs(*[(i, i) for i in range(5)]))
    budget = {"left": 2}

    def admit(value, state):
        if budget["left"] <= 0:
            return False
        budget["left"] -= 1
        state["n"] = state.get("n", 0) + 1
        return True

    runner = Runner(Query("q", "src").gate(admit).to("out"), client, batch=10)
    runner.gate_retry_ms = 0
    runner.start()
    runner.run_once(wait_ms=0)
    assert client.committed == 2 and client.leased is not None        # partial ack, lease kept
    budget["left"] = 10
    runner.run_once(wait_ms=0)
    assert client.committed == 5 and client.leased is None             # the tail, then released
    assert [i["payload"] for i in client.sink] == [0, 1, 2, 3, 4]
    assert [c["release_lease"] for c in client.cycles] == [False, True]
    assert client.state[state_key("gate", "", "p1")] == {"n": 5}


def test_ctrl_c_stops_the_runner_cleanly_and_it_says_what_it_did(caplog, monkeypatch):
    import logging

    client = FakeClient(msgs((0, {"v": 1}), (20_000, {"v": 1})))
    runner = Runner(Query("q", "src").tumbling(60).aggregate(n=count()).to("out"), client, batch=4)
    passes = []

    def interrupted(*_a, **_k):
        passes.append(1)
        if len(passes) > 1:
            raise KeyboardInterrupt
        return 0

    monkeypatch.setattr(runner, "run_once", interrupted)
    monkeypatch.setattr(runner, "flush_idle", lambda *a, **k: 0)
    with caplog.at_level(logging.INFO, logger="postbox.flows"):
        runner.run()  # returns instead of raising
    assert len(passes) == 2
    assert "stopped" in caplog.text and "messages folded" in caplog.text


class FakeClientWithResources(FakeClient):
    """FakeClient that also answers the source's resources call, as Postbox's partitioned surface does."""

    def resource(self, queue):
        return {"partitions": [
            {"partitionId": "p1", "nextOffset": len(self.queue), "startOffset": 0,
             "consumerGroups": [{"name": "streams.q1", "lag": len(self.queue) - self.committed}]},
            {"partitionId": "p2", "nextOffset": 7, "startOffset": 2, "consumerGroups": []},  # never read: 5
        ]}


def test_the_progress_line_reports_the_lag_pending_events_and_the_age_of_the_oldest_popped(caplog):
    import logging

    now_ms = 100_000
    client = FakeClientWithResources(msgs(*[(40_000 + i, {"v": i}) for i in range(10)]))
    runner = Runner(Query("q", "src").gate(lambda v, s: True).to("out"), client, batch=4, clock=lambda: now_ms / 1000)
    runner.start()
    assert runner.lag() == {"pending": 10 + 5, "behind_s": 0.0}
    runner.run_once(wait_ms=0)
    assert runner.lag() == {"pending": 6 + 5, "behind_s": 60.0}     # popped t0..t3, the oldest 60 s old
    runner.run_once(wait_ms=0)
    assert runner.lag()["behind_s"] == (now_ms - 40_004) / 1000     # this pass began at t4
    with caplog.at_level(logging.INFO, logger="postbox.flows"):
        runner._report()
    assert "lag: 7 events not yet folded, oldest event of the last pass 60.0 s old" in caplog.text
    while runner.run_once(wait_ms=0):
        pass
    assert runner.lag() == {"pending": 5, "behind_s": 0.0}           # caught up on p1; p2 never read


def test_a_client_that_cannot_tell_the_lag_leaves_it_unknown(caplog):
    import logging

    runner = Runner(Query("q", "src").gate(lambda v, s: True).to("out"), FakeClient(msgs((0, 1))), batch=4)
    runner.start()
    assert runner.lag()["pending"] is None
    with caplog.at_level(logging.INFO, logger="postbox.flows"):
        runner._report()
    assert "lag: ? events not yet folded" in caplog.text
