"""Streamed SSE answers under `postbox dev` (the local gateway over HTTP): a `live=sse` read stays open
past the long-poll window until the stream closes, sends a control event as a heartbeat while idle,
ends at its cap with the offset to reconnect from, and gives back what it holds when its client goes
away. The Durable Streams Python client follows it to the end; the npm client is tested beside
the conformance suite."""

from __future__ import annotations

import json
import threading
import time
import uuid

import httpx
import pytest

from postbox import config, db

TEXT = {"content-type": "application/json"}


def off(n: int) -> str:
    return f"0000000000000000_{n:016d}"


@pytest.fixture
def short_waits(monkeypatch):
    """Long polls (the window a buffered SSE answer had) of 300 ms, heartbeats as often."""
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", "300")
    monkeypatch.setenv("POSTBOX_STREAM_HEARTBEAT_MS", "300")
    config.reset()


@pytest.fixture
def stream_path(api):
    path = f"/v1/stream/live-{uuid.uuid4().hex[:8]}"
    assert api.put(path, headers=TEXT).status_code == 201
    return path


def _events(lines) -> iter:
    """(event, data) pairs of an SSE body read line by line."""
    kind, data = None, []
    for line in lines:
        if line == "":
            if kind is not None:
                yield kind, "\n".join(data)
            kind, data = None, []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))


def _slots_held(tenant_id: str) -> int:
    with db.connection() as conn:
        return conn.execute("SELECT count(*) FROM wait_slots WHERE caller = %s", (f"tenant:{tenant_id}",)).fetchone()[0]


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.05)


def test_the_python_client_follows_sse_across_many_windows_until_the_stream_closes(api, gateway, stream_path,
                                                                                    short_waits):
    """The client's `live="sse"` follow (one request: it never reconnects) gets every append made
    seconds apart, each after more than a long-poll window of silence, and ends when the stream closes.
    A buffered answer ended after the first append that followed a wait."""
    from durable_streams import stream

    url = gateway.url + stream_path
    got: list = []
    done = threading.Event()

    def follow() -> None:
        with stream(url, offset="-1", live="sse", headers={"apikey": api.tenant.key}, timeout=30) as res:
            for item in res.iter_json():
                got.append(item)
        done.set()

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    for i in range(4):
        time.sleep(0.8)  # more than two windows (and heartbeats) between appends
        assert api.post(stream_path, content=json.dumps({"n": i}), headers=TEXT).status_code == 204
    _until(lambda: len(got) == 4)
    assert not done.is_set()  # still following: the stream is open
    assert api.post(stream_path, headers={"stream-closed": "true"}).status_code == 204
    assert done.wait(10), "the follow did not end when the stream closed"
    assert got == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]


def test_an_idle_stream_sends_heartbeats_then_the_append_on_the_same_answer(api, gateway, stream_path, short_waits):
    with httpx.Client(base_url=gateway.url, headers={"apikey": api.tenant.key}, timeout=10) as c, \
            c.stream("GET", stream_path, params={"offset": "-1", "live": "sse"}) as r:
        assert r.status_code == 200 and "content-length" not in r.headers
        assert r.headers["transfer-encoding"] == "chunked"
        events = _events(r.iter_lines())
        first = [next(events) for _ in range(4)]  # the catch-up's control, then heartbeats
        for kind, data in first:
            assert kind == "control"
            assert json.loads(data) == {"streamNextOffset": off(0), "streamCursor": json.loads(data)["streamCursor"],
                                        "upToDate": True}
        assert api.post(stream_path, content=b'{"late": 1}', headers=TEXT).status_code == 204
        kind, data = next(e for e in events if e[0] == "data")
        assert json.loads(data) == [{"late": 1}]
        kind, data = next(events)
        assert kind == "control" and json.loads(data)["streamNextOffset"] == off(1)


def test_an_answer_ends_at_its_cap_and_a_reconnect_from_its_offset_misses_nothing(api, gateway, stream_path,
                                                                                 short_waits, monkeypatch):
    monkeypatch.setenv("POSTBOX_STREAM_MAX_SECONDS", "1")
    config.reset()
    assert api.post(stream_path, content=b'{"n": 0}', headers=TEXT).status_code == 204
    started = time.monotonic()
    first = api.get(stream_path, params={"offset": "-1", "live": "sse"})  # read whole: it ends by itself
    assert time.monotonic() - started < 8
    events = list(_events(first.text.split("\n")))
    assert [k for k, _ in events[:2]] == ["data", "control"] and all(k == "control" for k, _ in events[2:])
    last = json.loads(events[-1][1])
    assert last["streamNextOffset"] == off(1) and last["upToDate"] is True and "streamClosed" not in last
    assert api.post(stream_path, content=b'{"n": 1}', headers=TEXT).status_code == 204
    assert api.post(stream_path, headers={"stream-closed": "true"}).status_code == 204
    again = api.get(stream_path, params={"offset": last["streamNextOffset"], "live": "sse"})
    events = list(_events(again.text.split("\n")))
    assert [json.loads(d) for k, d in events if k == "data"] == [[{"n": 1}]]
    assert json.loads(events[-1][1]) == {"streamNextOffset": off(2), "streamClosed": True}


def test_a_client_that_goes_away_gives_back_its_wait(api, gateway, stream_path, short_waits):
    """The server finds out at the next heartbeat, ends the answer and gives the caller's slot back."""
    c = httpx.Client(base_url=gateway.url, headers={"apikey": api.tenant.key}, timeout=10)
    with c.stream("GET", stream_path, params={"offset": "now", "live": "sse"}) as r:
        next(r.iter_lines())
        _until(lambda: _slots_held(api.tenant.tenant_id) == 1)
    c.close()
    _until(lambda: _slots_held(api.tenant.tenant_id) == 0)


def test_a_stream_deleted_under_an_open_answer_ends_it(api, gateway, stream_path, short_waits):
    with httpx.Client(base_url=gateway.url, headers={"apikey": api.tenant.key}, timeout=10) as c, \
            c.stream("GET", stream_path, params={"offset": "-1", "live": "sse"}) as r:
        lines = r.iter_lines()
        next(lines)
        assert api.delete(stream_path).status_code == 204
        rest = list(lines)  # the answer ends (chunked, with its last chunk)
        assert all(json.loads(d).get("upToDate") for k, d in _events(rest) if k == "control")
    again = api.get(stream_path, params={"offset": "-1", "live": "sse"})
    assert again.status_code == 404
