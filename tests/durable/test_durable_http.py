"""The durable surface over HTTP (local gateway): what the conformance suite does not cover — the
spec file's `/{account}/s.{name}` form, Stream-Incarnation, snapshots and parts, bootstrap,
retention, tenancy, public streams, read-only keys, limits and error bodies."""

from __future__ import annotations

import threading
import uuid
from collections import Counter

import httpx
import pytest

from postbox import db
from support.http import client

OFF0 = "0000000000000000_0000000000000000"


def off(n: int) -> str:
    return f"0000000000000000_{n:016d}"


def tenant_name(tenant_id: str) -> str:
    with db.transaction() as conn:
        return conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]


@pytest.fixture
def stream(api):
    """A fresh JSON stream with two appends (three messages); returns (open path, spec path)."""
    name = f"s-{uuid.uuid4().hex[:8]}"
    r = api.put(f"/v1/stream/{name}", content=b'[{"a": 1}, {"b": [1, 2]}]',
                headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    assert api.post(f"/v1/stream/{name}", content=b'{"c": "x y"}',
                    headers={"content-type": "application/json"}).status_code == 204
    return f"/v1/stream/{name}", f"/{tenant_name(api.tenant.tenant_id)}/s.{name}"


def error_code(r: httpx.Response) -> str:
    return r.json()["error"]["code"]


def test_open_form_reads_json_as_array_or_ndjson(api, stream):
    path, _ = stream
    r = api.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert r.json() == [{"a": 1}, {"b": [1, 2]}, {"c": "x y"}]
    assert r.text == '[{"a":1},{"b":[1,2]},{"c":"x y"}]'  # insignificant whitespace gone, strings kept
    r = api.get(path, headers={"accept": "application/x-ndjson"})
    assert r.headers["content-type"] == "application/x-ndjson"
    assert r.text == '{"a":1}\n{"b":[1,2]}\n{"c":"x y"}\n'
    assert r.headers["stream-next-offset"] == off(2) and r.headers["stream-up-to-date"] == "true"


def test_spec_form_reads_ndjson_with_incarnation_and_server_headers(api, stream):
    _, spec = stream
    r = api.get(spec)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/x-ndjson"
    assert r.text.splitlines() == ['{"a":1}', '{"b":[1,2]}', '{"c":"x y"}']
    assert len(r.headers["stream-incarnation"]) == 16
    assert r.headers["ursula-protocol"] == "11" and r.headers["ursula-cluster-id"]
    assert r.headers["cache-control"] == "no-store"
    head = api.head(spec)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["ursula-max-request-bytes"] == str(4 * 1024 * 1024)
    assert head.headers["stream-incarnation"] == r.headers["stream-incarnation"]


def test_spec_form_appends_and_refuses_lifecycle(api, stream):
    _, spec = stream
    r = api.post(spec, content=b'{"d": 4}', headers={"content-type": "application/json"})
    assert r.status_code == 204 and r.headers["stream-next-offset"] == off(3)
    for method in ("PUT", "DELETE"):
        r = api.request(method, spec)
        assert r.status_code == 403 and error_code(r) == "STREAM_LIFECYCLE"


def test_incarnation_precondition(api, stream):
    path, spec = stream
    token = api.head(spec).headers["stream-incarnation"]
    ok = api.post(spec, content=b"1", headers={"content-type": "application/json", "stream-incarnation": token})
    assert ok.status_code == 204
    # Delete and create again under the same name: a new incarnation; the old token is 412 and changes nothing.
    assert api.delete(path).status_code == 204
    assert api.put(path, headers={"content-type": "application/json"}).status_code == 201
    stale = api.post(spec, content=b"2", headers={"content-type": "application/json", "stream-incarnation": token})
    assert stale.status_code == 412 and error_code(stale) == "INCARNATION_MISMATCH"
    assert stale.headers["stream-incarnation"] != token
    assert api.get(spec, headers={"stream-incarnation": token}).status_code == 412
    assert api.get(spec).text == ""
    bad = api.get(spec, headers={"stream-incarnation": "not-a-token"})
    assert bad.status_code == 400 and error_code(bad) == "INVALID_HEADER"


def test_snapshots_publish_conflict_and_read(api, stream):
    _, spec = stream
    r = api.put(f"{spec}/snapshot/{off(1)}", content=b'{"state": 1}', headers={"content-type": "application/json"})
    assert r.status_code == 204 and r.headers["stream-snapshot-digest"].startswith("sha256:")
    again = api.put(f"{spec}/snapshot/{off(1)}", content=b'{"state": 1}', headers={"content-type": "application/json"})
    assert again.status_code == 204 and again.headers["stream-snapshot-digest"] == r.headers["stream-snapshot-digest"]
    other = api.put(f"{spec}/snapshot/{off(1)}", content=b'{"state": 2}', headers={"content-type": "application/json"})
    assert other.status_code == 409 and error_code(other) == "SNAPSHOT_CONFLICT"
    got = api.get(f"{spec}/snapshot/{off(1)}")
    assert got.status_code == 200 and got.content == b'{"state": 1}'
    assert got.headers["content-type"] == "application/json" and got.headers["stream-snapshot-offset"] == off(1)
    missing = api.get(f"{spec}/snapshot/{off(0)}")
    assert missing.status_code == 404 and error_code(missing) == "SNAPSHOT_NOT_FOUND"
    wrong = api.put(f"{spec}/snapshot/{off(2)}", content=b"{}", headers={"content-type": "application/json",
                                                                      "stream-snapshot-digest": "sha256:00"})
    assert wrong.status_code == 400 and error_code(wrong) == "SNAPSHOT_DIGEST_MISMATCH"
    beyond = api.put(f"{spec}/snapshot/{off(9)}", content=b"{}", headers={"content-type": "application/json"})
    assert beyond.status_code == 400 and error_code(beyond) == "INVALID_SNAPSHOT"
    assert api.head(spec).headers["stream-snapshot-offset"] == off(1)


def test_snapshot_from_staged_parts(api, stream):
    _, spec = stream
    digests = []
    for chunk in (b'{"big": ', b'"state"}'):
        r = api.post(f"{spec}/snapshot/{off(2)}/parts", content=chunk, headers={"content-type": "application/json"})
        assert r.status_code == 204
        digests.append(r.headers["stream-snapshot-part"])
    unknown = api.put(f"{spec}/snapshot/{off(2)}", headers={"stream-snapshot-parts": "sha256:00"})
    assert unknown.status_code == 400 and error_code(unknown) == "UNKNOWN_PART"
    r = api.put(f"{spec}/snapshot/{off(2)}", headers={"stream-snapshot-parts": ",".join(digests),
                                                      "content-type": "application/json"})
    assert r.status_code == 204
    assert api.get(f"{spec}/snapshot/{off(2)}").content == b'{"big": "state"}'
    # Parts are used up by the commit; newly staged ones can be discarded.
    assert api.put(f"{spec}/snapshot/{off(2)}", headers={"stream-snapshot-parts": digests[0]}).status_code == 400
    api.post(f"{spec}/snapshot/{off(2)}/parts", content=b"x", headers={"content-type": "application/json"})
    assert api.delete(f"{spec}/snapshot/parts").status_code == 204
    r = api.get(f"{spec}/snapshot/parts")  # the row `GET .../snapshot/{offset}`: "parts" is no offset
    assert r.status_code == 400 and error_code(r) == "INVALID_OFFSET"
    r = api.post(f"{spec}/snapshot/parts")  # a path of the route table, with a method it does not serve
    assert r.status_code == 405 and error_code(r) == "METHOD_NOT_ALLOWED"


def test_bootstrap_is_snapshot_then_updates(api, stream):
    _, spec = stream
    api.put(f"{spec}/snapshot/{off(1)}", content=b'{"n": 2}', headers={"content-type": "application/json"})
    r = api.get(f"{spec}/bootstrap")
    assert r.status_code == 200 and r.headers["content-type"].startswith("multipart/mixed")
    boundary = r.headers["content-type"].split("boundary=")[1].strip('"')
    parts = [p for p in r.content.split(f"--{boundary}".encode()) if p.strip() not in (b"", b"--")]
    assert len(parts) == 2
    snap_head, snap_body = parts[0].split(b"\r\n\r\n", 1)
    assert b"Stream-Snapshot-Offset: " + off(1).encode() in snap_head and snap_body.strip() == b'{"n": 2}'
    upd_head, upd_body = parts[1].split(b"\r\n\r\n", 1)
    assert b"application/x-ndjson" in upd_head and upd_body.strip() == b'{"c":"x y"}'
    assert r.headers["stream-next-offset"] == off(2) and r.headers["stream-snapshot-offset"] == off(1)


def test_retention_advances_and_old_offsets_are_gone(api, stream):
    path, spec = stream
    r = api.put(f"{spec}/retention/{off(1)}")
    assert r.status_code == 204 and r.headers["stream-retained-offset"] == off(1)
    gone = api.get(spec, params={"offset": off(0)})
    assert gone.status_code == 410 and error_code(gone) == "STREAM_GONE"
    assert gone.headers["stream-incarnation"]
    assert api.get(path, params={"offset": off(0)}).status_code == 410
    assert api.get(path).json() == [{"c": "x y"}]  # -1 starts at the retained offset
    assert api.put(f"{spec}/retention/{off(0)}").headers["stream-retained-offset"] == off(1)  # never moves back
    bad = api.put(f"{spec}/retention/{off(7)}")
    assert bad.status_code == 400 and error_code(bad) == "INVALID_RETENTION"


def test_cacheable_chunk_and_snapshot_urls(gateway, api, stream):
    path, spec = stream
    token = api.head(spec).headers["stream-incarnation"]
    r = api.get(f"{spec}/incarnation/{token}/chunk/{off(0)}")
    assert r.status_code == 200 and r.text.count("\n") == 3
    assert "stream-immutable" not in r.headers  # reaches the tail of an open stream: may still grow
    assert api.post(path, headers={"stream-closed": "true"}).status_code == 204
    r = api.get(f"{spec}/incarnation/{token}/chunk/{off(0)}")
    assert r.headers["stream-immutable"] == "true" and r.headers["cache-control"] == "no-store"  # credentialed
    stale = api.get(f"{spec}/incarnation/{'0' * 16}/chunk/{off(0)}")
    assert stale.status_code == 412
    assert api.get(f"{spec}/incarnation/{token}/chunk/{off(5)}").status_code == 416


def test_public_stream_readable_without_credential(gateway, api):
    name = f"pub-{uuid.uuid4().hex[:8]}"
    account = tenant_name(api.tenant.tenant_id)
    api.put(f"/v1/stream/{name}", content=b"hello", headers={"content-type": "text/plain", "postbox-public": "true"})
    api.put(f"/v1/stream/{name}-private", content=b"secret", headers={"content-type": "text/plain"})
    token = api.head(f"/{account}/s.{name}").headers["stream-incarnation"]
    api.post(f"/v1/stream/{name}", headers={"stream-closed": "true"})
    with client(gateway.url, None) as anon:
        r = anon.get(f"/{account}/s.{name}")
        assert r.status_code == 200 and r.text == "hello"
        chunk = anon.get(f"/{account}/s.{name}/incarnation/{token}/chunk/{off(0)}")
        assert chunk.headers["cache-control"] == "public, max-age=300, immutable"
        write = anon.post(f"/{account}/s.{name}", content=b"x", headers={"content-type": "text/plain"})
        assert write.status_code == 401
        private = anon.get(f"/{account}/s.{name}-private")
        assert private.status_code == 401 and error_code(private) == "INVALID_CREDENTIAL"
        assert anon.get(f"/v1/stream/{name}").status_code == 401  # the open form needs a key by default


def test_a_stream_of_html_is_sandboxed_on_the_apis_origin(gateway, api):
    """A public stream is served from the API's origin (the console's) with its writer's content
    type: a page of script there must not run as that origin for whoever opens its URL."""
    name = f"page-{uuid.uuid4().hex[:8]}"
    account = tenant_name(api.tenant.tenant_id)
    page = b"<script>fetch('/x?k=' + sessionStorage.getItem('postbox.key'))</script>"
    api.put(f"/v1/stream/{name}", content=page, headers={"content-type": "text/html", "postbox-public": "true"})
    api.put(f"/{account}/s.{name}/snapshot/{off(0)}", content=page, headers={"content-type": "image/svg+xml"})
    token = api.head(f"/{account}/s.{name}").headers["stream-incarnation"]
    with client(gateway.url, None) as anon:
        for path in (f"/{account}/s.{name}", f"/{account}/s.{name}/incarnation/{token}/chunk/{off(0)}",
                     f"/{account}/s.{name}/snapshot/{off(0)}", f"/{account}/s.{name}/bootstrap"):
            r = anon.get(path)
            assert r.status_code == 200 and page in r.content, (path, r.status_code)
            policy = [d.strip() for d in r.headers["content-security-policy"].split(";")]
            assert "sandbox" in policy and "default-src 'none'" in policy, path
    refused = api.get(f"/{account}/s.{name}-missing")
    assert refused.status_code == 404 and "sandbox" in refused.headers["content-security-policy"]


def test_creates_of_one_name_racing_each_other_end_as_one_after_another(gateway, api):
    """Many clients creating the same stream (or the same fork) at once: one creates it (201), every
    other finds it with the same configuration (200); none meets the name's unique index as a 500."""
    threads, rounds = 8, 6
    answers: Counter = Counter()

    def create(kind: str, path: str, headers: dict[str, str], barrier: threading.Barrier) -> None:
        with client(gateway.url, api.tenant.key) as c:
            barrier.wait()
            answers[kind, c.put(path, headers=headers).status_code] += 1

    for _ in range(rounds):
        name = f"race-{uuid.uuid4().hex[:8]}"
        for kind, path, headers in (
                ("stream", f"/v1/stream/{name}", {"content-type": "text/plain"}),
                ("fork", f"/v1/stream/{name}-fork", {"content-type": "text/plain", "stream-forked-from": name})):
            barrier = threading.Barrier(threads)
            workers = [threading.Thread(target=create, args=(kind, path, headers, barrier)) for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    assert answers == Counter({("stream", 201): rounds, ("stream", 200): rounds * (threads - 1),
                               ("fork", 201): rounds, ("fork", 200): rounds * (threads - 1)}), answers


def test_another_tenants_stream_is_404(gateway, api, stream, make_tenant):
    path, spec = stream
    other = make_tenant()
    with client(gateway.url, other.key) as them:
        r = them.get(spec)
        assert r.status_code == 404 and error_code(r) == "STREAM_NOT_FOUND"
        assert them.get(path).status_code == 404  # their /v1/stream namespace is their own
        assert them.post(spec, content=b"1", headers={"content-type": "application/json"}).status_code == 404
    with client(gateway.url, api.tenant.key) as me:
        assert me.get(f"/no-such-account-{uuid.uuid4().hex[:6]}/s.x").status_code == 404


def test_read_only_key_refused_on_writes(gateway, api, stream):
    path, spec = stream
    with client(gateway.url, api.tenant.key_for("read")) as reader:
        assert reader.get(spec).status_code == 200
        assert reader.get(path).status_code == 200
        r = reader.post(spec, content=b"1", headers={"content-type": "application/json"})
        assert r.status_code == 403 and error_code(r) == "FORBIDDEN"
        assert reader.post(path, content=b"1", headers={"content-type": "application/json"}).status_code == 403
        assert reader.put(f"{spec}/retention/{off(1)}").status_code == 403
        assert reader.delete(path).status_code == 403


def test_body_over_4_mib_is_413(api):
    path = f"/v1/stream/big-{uuid.uuid4().hex[:8]}"
    api.put(path, headers={"content-type": "application/octet-stream"})
    r = api.post(path, content=b"\0" * (4 * 1024 * 1024 + 1), headers={"content-type": "application/octet-stream"})
    assert r.status_code == 413 and error_code(r) == "REQUEST_TOO_LARGE"
    assert r.headers["ursula-max-request-bytes"] == str(4 * 1024 * 1024)
    assert api.post(path, content=b"\0" * (4 * 1024 * 1024), headers={"content-type": "application/octet-stream"}
                    ).status_code == 204  # the largest body fits in a Lambda event, base64 and all


def test_error_bodies_and_statuses(api, stream):
    path, spec = stream
    r = api.post(path, content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 400 and error_code(r) == "INVALID_REQUEST"
    r = api.post(path, content=b"1", headers={"content-type": "text/plain"})
    assert r.status_code == 409 and error_code(r) == "CONTENT_TYPE_MISMATCH"
    r = api.get(path, params={"offset": "abc"})
    assert r.status_code == 400 and error_code(r) == "INVALID_OFFSET"
    r = api.get(f"{spec}/nothing-here")
    assert r.status_code == 404 and error_code(r) == "NOT_FOUND"
    r = api.post(f"{spec}/bootstrap")
    assert r.status_code == 405 and error_code(r) == "METHOD_NOT_ALLOWED"
    r = api.get(f"/v1/stream/missing-{uuid.uuid4().hex[:6]}")
    assert r.status_code == 404 and error_code(r) == "STREAM_NOT_FOUND"
    r = api.post(path, content=b"1", headers={"content-type": "application/json", "producer-id": "p"})
    assert r.status_code == 400 and error_code(r) == "INVALID_PRODUCER"
    r = api.post(path, content=b"1", headers={"content-type": "application/json", "producer-id": "p",
                                              "producer-epoch": "0", "producer-seq": "3"})
    assert r.status_code == 409 and r.headers["producer-expected-seq"] == "0"
    assert r.headers["producer-outcome"] == "rejected"
    r = api.put("/v1/stream/" + "n" * 600, headers={"content-type": "text/plain"})
    assert r.status_code == 400 and error_code(r) == "INVALID_STREAM_ID"
    assert api.get("/v1/stream/bad%01name").status_code == 400
    r = api.post(path, content=b"1", headers={"content-type": "application/json", "producer-id": "p" * 300,
                                              "producer-epoch": "0", "producer-seq": "0"})
    assert r.status_code == 400 and error_code(r) == "INVALID_PRODUCER"
    deep = b"[" * 128 + b"]" * 128
    r = api.post(path, content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 400


def test_unknown_paths_answer_like_api_gateway(api):
    r = api.get("/v1/nothing-here")  # (an unknown /api/v1 route is the partitioned surface's: Queen's shape)
    assert r.status_code == 404 and r.json() == {"message": "Not Found"}


def _while_waiting(notify_only, request, write) -> httpx.Response:
    """Run `request` on a thread, do `write` once it sleeps waiting for a NOTIFY, return its answer."""
    import threading

    result = {}
    t = threading.Thread(target=lambda: result.update(r=request()))
    t.start()
    notify_only.wait_until_asleep()
    write()
    t.join(timeout=15)
    return result["r"]


def test_long_poll_wakes_on_append(api, stream, notify_only):
    path, _ = stream
    r = _while_waiting(notify_only, lambda: api.get(path, params={"offset": off(2), "live": "long-poll"}),
                       lambda: api.post(path, content=b'{"late": true}', headers={"content-type": "application/json"}))
    assert r.status_code == 200 and r.json() == [{"late": True}]
    assert r.headers["stream-cursor"].isdigit()
    assert notify_only.woken == [True]  # the append's NOTIFY woke it, not a re-check


def test_sse_wakes_on_append_on_its_open_answer(api, stream, notify_only):
    """Under `postbox dev` an SSE answer is streamed: the append's NOTIFY wakes it and its events come
    on the same, still open answer (chunked, no Content-Length, as the protocol asks)."""
    path, _ = stream
    with api.stream("GET", path, params={"offset": off(2), "live": "sse"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert "content-length" not in r.headers and r.headers["transfer-encoding"] == "chunked"
        lines = r.iter_lines()
        caught_up = [next(lines), next(lines), next(lines)]
        assert caught_up[0] == "event: control" and f'"streamNextOffset":"{off(2)}"' in caught_up[1]
        notify_only.wait_until_asleep()
        late = api.post(path, content=b'{"late": true}', headers={"content-type": "application/json"})
        assert late.status_code == 204
        events = [next(lines) for _ in range(6)]
    assert events[0] == "event: data" and events[1] == 'data:[{"late":true}]'
    assert events[3] == "event: control" and f'"streamNextOffset":"{off(3)}"' in events[4]
    assert notify_only.woken[0] is True  # the append's NOTIFY woke it, not a re-check


def test_the_lambda_sse_answer_is_a_whole_event_stream_without_framing_headers(api, stream):
    """What the function returns for SSE on AWS: the whole bounded window as one text body, and no
    Content-Length, Transfer-Encoding or Connection of its own (API Gateway buffers the answer and
    frames it; the local server frames it chunked)."""
    from functions.api.durable.app import handler
    from functions.local.lambda_context import LocalContext
    from support.events import api_event

    path, _ = stream
    assert api.post(path, headers={"stream-closed": "true"}).status_code == 204  # the window ends at once
    result = handler(api_event("GET", path, key=api.tenant.key, query="offset=-1&live=sse"), LocalContext("durable"))
    assert result["statusCode"] == 200 and not result.get("isBase64Encoded")
    headers = {k.lower(): v for k, v in result["headers"].items()}
    assert headers["content-type"] == "text/event-stream" and "no-cache" in headers["cache-control"]
    assert not {"content-length", "transfer-encoding", "connection"} & set(headers)
    assert result["body"].startswith("event: data\n") and '"streamClosed":true' in result["body"].rsplit("event:", 1)[1]


def test_producer_limit_is_429_with_retry_after(api, stream, monkeypatch):
    from postbox.durable import writes

    path, _ = stream
    monkeypatch.setattr(writes, "MAX_PRODUCERS", 1)
    ok = api.post(path, content=b"1", headers={"content-type": "application/json", "producer-id": "a",
                                               "producer-epoch": "0", "producer-seq": "0"})
    assert ok.status_code == 200 and ok.headers["stream-offset"] == off(2)
    r = api.post(path, content=b"2", headers={"content-type": "application/json", "producer-id": "b",
                                              "producer-epoch": "0", "producer-seq": "0"})
    assert r.status_code == 429 and error_code(r) == "PRODUCER_LIMIT" and r.headers["retry-after"] == "60"


def test_concurrent_requests_of_two_tenants_stay_apart(gateway, make_tenant):
    """The gateway runs requests on threads of one process: each must see its own event and tenant."""
    import threading

    tenants = [make_tenant(), make_tenant()]
    name = f"same-{uuid.uuid4().hex[:6]}"
    for t in tenants:
        with client(gateway.url, t.key) as c:
            assert c.put(f"/v1/stream/{name}", headers={"content-type": "text/plain"}).status_code == 201
    errors: list[str] = []

    def writer(w: int) -> None:
        t = tenants[w % 2]
        with client(gateway.url, t.key) as c:
            for i in range(15):
                r = c.post(f"/v1/stream/{name}", content=f"{t.tenant_id[:8]}:{w}:{i};".encode(),
                           headers={"content-type": "text/plain"})
                if r.status_code != 204:
                    errors.append(r.text)

    pool = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert errors == []
    for t in tenants:
        with client(gateway.url, t.key) as c:
            parts = [p for p in c.get(f"/v1/stream/{name}").text.split(";") if p]
        assert len(parts) == 60 and all(p.startswith(t.tenant_id[:8]) for p in parts)


def test_append_refusals_keep_their_bodies_and_headers(api, stream):
    """Each refusal `durable_append` raises reaches the client with its status, body and headers."""
    path, spec = stream
    text = {"content-type": "application/json"}

    def producer(epoch: int, seq: int) -> dict[str, str]:
        return {**text, "producer-id": "p", "producer-epoch": str(epoch), "producer-seq": str(seq)}

    assert api.post(path, content=b"1", headers=producer(1, 0)).status_code == 200
    stale = api.post(path, content=b"1", headers=producer(0, 1))
    assert (stale.status_code, stale.json()) == (403, {"error": {"code": "PRODUCER_EPOCH_STALE",
                                                                 "message": "Stale producer epoch."}})
    assert stale.headers["producer-epoch"] == "1" and stale.headers["producer-outcome"] == "rejected"
    gap = api.post(path, content=b"1", headers=producer(1, 7))
    assert gap.json()["error"] == {"code": "PRODUCER_SEQ_CONFLICT", "message": "Producer sequence gap."}
    assert (gap.headers["producer-expected-seq"], gap.headers["producer-received-seq"]) == ("1", "7")
    new_epoch = api.post(path, content=b"1", headers=producer(2, 3))
    assert (new_epoch.status_code, new_epoch.json()["error"]["message"]) == (
        400, "A new producer epoch starts at sequence 0.")
    assert api.post(path, content=b"1", headers={**text, "stream-seq": "b"}).status_code == 204
    seq = api.post(path, content=b"1", headers={**text, "stream-seq": "a"})
    assert (seq.status_code, seq.json()["error"]) == (409, {"code": "STREAM_SEQ_CONFLICT",
                                                           "message": "Stream-Seq must increase."})
    other = api.post(spec, content=b"1", headers={**text, "stream-incarnation": "0" * 16})
    assert other.status_code == 412 and other.json()["error"]["code"] == "INCARNATION_MISMATCH"
    assert other.headers["stream-incarnation"] == api.head(spec).headers["stream-incarnation"]
    invalid = api.post(path, content=b"{", headers=text)
    assert invalid.status_code == 400 and invalid.json()["error"]["message"].startswith("Invalid JSON: ")
    assert api.post(path, headers={"stream-closed": "true"}).status_code == 204
    closed = api.post(path, content=b"1", headers=text)
    assert (closed.status_code, closed.json()["error"]) == (409, {"code": "STREAM_CLOSED",
                                                                 "message": "The stream is closed."})
    assert closed.headers["stream-closed"] == "true" and closed.headers["stream-next-offset"] == off(4)
    assert api.delete(path).status_code == 204
    missing = api.post(path, content=b"1", headers=text)
    assert (missing.status_code, missing.json()["error"]) == (404, {"code": "STREAM_NOT_FOUND",
                                                                   "message": "Stream not found."})
