"""The durable surface answers every request: inputs that used to crash a request after or before
writing (a name outside Latin-1 in `Location`, numbers beyond the columns) are answered in the
surface's envelope, and "private" holds for callers without a key and for `anon` keys alike."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest

from postbox import db
from support.http import client


def tenant_name(tenant_id: str) -> str:
    with db.transaction() as conn:
        return conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()[0]


def error_code(r) -> str:
    return r.json()["error"]["code"]


def test_a_name_outside_latin_1_gets_an_encoded_location(gateway, api):
    name = f"日本-ü-{uuid.uuid4().hex[:6]}"
    r = api.put(f"/v1/stream/{name}", content=b"hi", headers={"content-type": "text/plain"})
    assert r.status_code == 201, r.text
    assert r.headers["location"].endswith(f"/v1/stream/{quote(name)}")
    assert r.headers["location"].isascii()
    assert api.get(r.headers["location"]).text == "hi"  # the header names the stream just created
    again = api.put(f"/v1/stream/{name}", headers={"content-type": "text/plain"})
    assert again.status_code == 200 and "location" not in again.headers


@pytest.mark.parametrize("ttl", ["10000000000000", "1" + "0" * 5000])
def test_a_stream_ttl_beyond_the_limit_is_400_and_creates_nothing(api, ttl):
    path = f"/v1/stream/ttl-{uuid.uuid4().hex[:8]}"
    r = api.put(path, headers={"content-type": "text/plain", "stream-ttl": ttl})
    assert r.status_code == 400 and error_code(r) == "INVALID_HEADER"
    assert api.head(path).status_code == 404


def test_the_largest_stream_ttl_is_accepted(api):
    path = f"/v1/stream/ttl-{uuid.uuid4().hex[:8]}"
    r = api.put(path, headers={"content-type": "text/plain", "stream-ttl": "1000000000000"})
    assert r.status_code == 201
    assert api.head(path).headers["stream-ttl"] == "1000000000000"


def test_huge_producer_numbers_and_sub_offsets_are_400(api):
    path = f"/v1/stream/big-{uuid.uuid4().hex[:8]}"
    api.put(path, content=b"abc", headers={"content-type": "text/plain"})
    r = api.post(path, content=b"x", headers={"content-type": "text/plain", "producer-id": "p",
                                              "producer-epoch": "0", "producer-seq": "9" * 5000})
    assert r.status_code == 400 and error_code(r) == "INVALID_PRODUCER"
    fork = f"{path}-fork"
    r = api.put(fork, headers={"content-type": "text/plain", "stream-forked-from": path,
                               "stream-fork-offset": "0000000000000000_0000000000000000",
                               "stream-fork-sub-offset": str(2**63)})
    assert r.status_code == 400 and error_code(r) == "INVALID_HEADER"
    assert api.head(fork).status_code == 404


@pytest.fixture
def streams(api):
    """(account, public stream, private stream) with one append each."""
    name = f"vis-{uuid.uuid4().hex[:8]}"
    for suffix, public in (("pub", "true"), ("priv", "false")):
        r = api.put(f"/v1/stream/{name}-{suffix}", content=b"data",
                    headers={"content-type": "text/plain", "postbox-public": public})
        assert r.status_code == 201
    return tenant_name(api.tenant.tenant_id), f"{name}-pub", f"{name}-priv"


def test_an_anon_key_reads_only_public_streams_and_writes_nothing(gateway, api, streams):
    account, public, private = streams
    with client(gateway.url, api.tenant.key_for("anon")) as anon:
        for path in (f"/v1/stream/{private}", f"/{account}/s.{private}"):
            r = anon.get(path)
            assert r.status_code == 401 and error_code(r) == "INVALID_CREDENTIAL", path
            assert anon.head(path).status_code == 401, path
        for path in (f"/v1/stream/{public}", f"/{account}/s.{public}"):
            assert anon.get(path).text == "data", path
            assert anon.head(path).status_code == 200, path
        r = anon.post(f"/v1/stream/{public}", content=b"x", headers={"content-type": "text/plain"})
        assert r.status_code == 401 and error_code(r) == "INVALID_CREDENTIAL"
        hosted = anon.post(f"/{account}/s.{public}", content=b"x", headers={"content-type": "text/plain"})
        assert hosted.status_code == 401
        assert anon.put(f"/v1/stream/{public}-new", headers={"content-type": "text/plain"}).status_code == 401
        assert anon.delete(f"/v1/stream/{public}").status_code == 401
    assert api.get(f"/v1/stream/{public}").text == "data"  # nothing was written


def test_without_a_key_a_private_stream_and_a_missing_one_answer_alike(gateway, api, streams):
    account, _, private = streams
    paths = (f"/{account}/s.{private}", f"/{account}/s.missing-{uuid.uuid4().hex[:6]}",
             f"/no-such-account-{uuid.uuid4().hex[:6]}/s.{private}")
    with client(gateway.url, None) as nobody:
        gets = [nobody.get(p) for p in paths]
        heads = [nobody.head(p) for p in paths]
        snapshots = [nobody.get(p + "/bootstrap") for p in paths]
    for answers in (gets, snapshots):
        assert {(r.status_code, r.content) for r in answers} == {(gets[0].status_code, gets[0].content)}
    assert gets[0].status_code == 401 and error_code(gets[0]) == "INVALID_CREDENTIAL"
    assert {r.status_code for r in heads} == {401}


@pytest.mark.parametrize("mount", ["open", "hosted"])
@pytest.mark.parametrize("body", [b"[" * 10_000 + b"]" * 10_000, b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
                                  b"[" * 128 + b"]" * 128], ids=["array-10000", "object-10000", "array-128"])
def test_a_json_append_nested_past_the_depth_rule_is_400_in_the_protocol_shape(api, mount, body):
    """JSON mode parses the body: a nesting the parser could not survive (or past the 127 levels of
    docs/limits.md) is the protocol's 400 and appends nothing, on both mounts."""
    name = f"deep-{uuid.uuid4().hex[:8]}"
    path = f"/v1/stream/{name}" if mount == "open" else f"/{tenant_name(api.tenant.tenant_id)}/s.{name}"
    json_type = {"content-type": "application/json"}
    assert api.put(f"/v1/stream/{name}", headers=json_type).status_code == 201  # one stream, two mounts
    r = api.post(path, content=body, headers=json_type)
    assert r.status_code == 400, r.text
    assert error_code(r) == "INVALID_REQUEST" and "127" in r.json()["error"]["message"]
    assert api.post(path, content=b"[[" + b"[" * 125 + b"]" * 125 + b"]]", headers=json_type).status_code in (200, 204)
    read = api.get(f"{path}?offset=-1")
    assert read.status_code == 200, read.text
    messages = read.json() if mount == "open" else [line for line in read.text.splitlines() if line]
    assert len(messages) == 1  # the refused append left nothing behind; the 127-deep one is there
