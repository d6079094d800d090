"""The Durable Streams npm client (`@durable-streams/client`, pinned in package.json) follows a stream
with live SSE against the local gateway, as `make dev` serves it: one SSE request from the first
append to the close, across many long-poll windows. With answers that ended at each window the
client reconnected per window, and fell back to long polls after three short connections."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

import pytest
from test_durable_conformance import HERE, npm_install

from postbox import config

pytestmark = pytest.mark.conformance


def test_the_npm_client_follows_sse_on_one_answer_until_the_stream_closes(api, gateway, monkeypatch):
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    npm_install()
    monkeypatch.setenv("POSTBOX_LONG_POLL_MS", "300")  # the window a buffered answer had
    monkeypatch.setenv("POSTBOX_STREAM_HEARTBEAT_MS", "300")
    config.reset()
    path = f"/v1/stream/npm-{uuid.uuid4().hex[:8]}"
    assert api.put(path, headers={"content-type": "application/json"}).status_code == 201
    follower = subprocess.Popen(["node", "follow_sse.mjs", gateway.url + path, api.tenant.key], cwd=HERE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follower.stderr.readline().strip() == "connected"
        for i in range(4):
            time.sleep(0.8)  # more than two windows between appends
            assert api.post(path, content=json.dumps({"n": i}),
                            headers={"content-type": "application/json"}).status_code == 204
        assert api.post(path, headers={"stream-closed": "true"}).status_code == 204
        out, err = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["items"] == [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}]
    assert seen["streamClosed"] is True
    # its catch-up read (no `live`), then one SSE answer to the end
    assert seen["requests"] == {"other": 1, "sse": 1, "longPoll": 0}, (seen, err)
