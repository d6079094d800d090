"""GDPR routes of the work surface over HTTP: every route, status and error code, and an export's
download through the gateway (the agent's runs are called directly, as the scheduler would)."""

from __future__ import annotations

import uuid

import pytest
import zstandard

from functions.agents import work_gdpr as agent
from functions.local.lambda_context import LocalContext
from postbox import agents, db, jsoncodec
from support.http import client
from support.tenants import new_tenant
from support.work_api import W
from support.work_api import error as _error
from support.work_api import ok as _ok


def _drain(job_id: str) -> None:
    """Run the agent (as the scheduler does) until the job ended."""
    for _ in range(1000):
        with db.connection() as conn:
            state = conn.execute("SELECT state FROM work_gdpr_jobs WHERE id = %s", (job_id,)).fetchone()[0]
        if state in ("completed", "failed"):
            return
        agent.handler({"source": "aws.scheduler"}, LocalContext("work-gdpr", 60))
    raise AssertionError("the job never ended")


def _publish(api, body, **fields):
    scope = _ok(api.post(f"{W}/scopes", json={"slug": f"s-{uuid.uuid4().hex[:8]}"}), 201)
    queue = _ok(api.post(f"{W}/scopes/{scope['id']}/queues", json={"slug": "jobs"}), 201)
    return scope, queue, _ok(api.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages",
                                      json={"body": body, **fields}), 201)


def test_erasure_routes(gateway, api):
    tenant = api.tenant
    base = f"{W}/tenants/{tenant.tenant_id}"
    with client(gateway.url, tenant.key_for("write")) as writer:
        scope, queue, mine = _publish(api, {"secret": "mine"})
        theirs = _ok(writer.post(f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages",
                                 json={"body": {"secret": "theirs"}}), 201)
    job = _ok(api.post(f"{base}/data-erasure", json={"actor_type": "api_key", "actor_id": tenant.principal.key_id}),
              202)
    assert job["state"] == "queued" and job["mode"] == "redact" and job["kind"] == "erasure"
    assert job["requested_by"] == {"actor_type": "api_key", "actor_id": tenant.principal.key_id}
    assert [s["state"] for s in job["progress"]["steps"]] == ["pending"] * 6
    _drain(job["job_id"])
    done = _ok(api.get(f"{base}/data-erasure/jobs/{job['job_id']}"))
    assert done["state"] == "completed" and done["progress"]["processed"] >= 1
    steps = {s["name"]: s["processed"] for s in done["progress"]["steps"]}
    assert steps["messages"] == 1
    msg = f"{W}/scopes/{scope['id']}/queues/{queue['id']}/messages"
    assert _ok(api.get(f"{msg}/{mine['id']}"))["body"] == {"redacted": True}
    assert _ok(api.get(f"{msg}/{theirs['id']}"))["body"] == {"secret": "theirs"}
    assert "work-gdpr" in {a["name"] for a in _ok(api.get(f"{W}/system-agents"))}
    assert [a for a in agents.status(["work-gdpr"])][0]["total_runs"] >= 1

    deleted = _ok(api.post(f"{base}/data-erasure", json={"mode": "delete", "actor_type": "user",
                                                         "actor_id": "nobody"}), 202)
    assert deleted["mode"] == "delete"
    _drain(deleted["job_id"])
    assert _ok(api.get(f"{base}/data-erasure/jobs/{deleted['job_id']}"))["progress"]["processed"] == 0


@pytest.mark.parametrize("body, field", [
    ({"actor_type": "user", "actor_id": "u", "extra": 1}, "extra"),
    ({"actor_type": "user", "actor_id": "u", "mode": "shred"}, "mode"),
    ({"actor_type": "user"}, "actor_id"),
    ({"actor_type": "user", "actor_id": ""}, "actor_id"),
    ({"actor_type": "User!", "actor_id": "u"}, "actor_type"),
    ({"actor_type": "system", "actor_id": "scaiqueue"}, "actor_type"),
    ({"actor_type": "user", "actor_id": 7}, "actor_id"),
])
def test_erasure_refuses_bad_bodies_by_field(api, body, field):
    err = _error(api.post(f"{W}/tenants/{api.tenant.tenant_id}/data-erasure", json=body), 422, "VALIDATION_ERROR")
    assert field in [d["field"] for d in err["details"]], err


@pytest.mark.parametrize("body, field", [
    ({"actor_type": "user", "actor_id": "u", "format": "csv"}, "format"),
    ({"actor_type": "user", "actor_id": "u", "compression": "gzip"}, "compression"),
    ({"actor_type": "user", "actor_id": "u", "mode": "redact"}, "mode"),
])
def test_export_refuses_bad_bodies_by_field(api, body, field):
    err = _error(api.post(f"{W}/tenants/{api.tenant.tenant_id}/data-export", json=body), 422, "VALIDATION_ERROR")
    assert field in [d["field"] for d in err["details"]], err


def test_other_tenants_missing_jobs_and_permissions(gateway, api):
    other = new_tenant()
    mine = f"{W}/tenants/{api.tenant.tenant_id}"
    body = {"actor_type": "user", "actor_id": "u"}
    job = _ok(api.post(f"{mine}/data-export", json=body), 202)
    for path in (f"{W}/tenants/{other.tenant_id}", f"{W}/tenants/{uuid.uuid4()}", f"{W}/tenants/not-a-uuid"):
        _error(api.post(f"{path}/data-erasure", json=body), 404, "NOT_FOUND")
        _error(api.post(f"{path}/data-export", json=body), 404, "NOT_FOUND")
        _error(api.get(f"{path}/data-export/jobs/{job['job_id']}"), 404, "NOT_FOUND")
        _error(api.get(f"{path}/data-erasure/jobs/{job['job_id']}"), 404, "NOT_FOUND")
        _error(api.get(f"{path}/data-export/jobs/{job['job_id']}/download"), 404, "NOT_FOUND")
    with client(gateway.url, other.key) as stranger:  # the other tenant's key cannot see this tenant's job
        _error(stranger.get(f"{mine}/data-export/jobs/{job['job_id']}"), 404, "NOT_FOUND")
        _error(stranger.get(f"{W}/tenants/{other.tenant_id}/data-export/jobs/{job['job_id']}"), 404,
               "SCAIQUEUE_JOB_NOT_FOUND")
    _error(api.get(f"{mine}/data-erasure/jobs/{job['job_id']}"), 404, "SCAIQUEUE_JOB_NOT_FOUND")  # an export
    _error(api.get(f"{mine}/data-export/jobs/{uuid.uuid4()}"), 404, "SCAIQUEUE_JOB_NOT_FOUND")
    _error(api.get(f"{mine}/data-export/jobs/nope"), 404, "SCAIQUEUE_JOB_NOT_FOUND")
    _error(api.get(f"{mine}/data-export/jobs/{job['job_id']}/download"), 404, "SCAIQUEUE_JOB_NOT_FOUND")  # not yet
    for role in ("write", "read"):
        with client(gateway.url, api.tenant.key_for(role)) as c:
            _error(c.post(f"{mine}/data-erasure", json=body), 403, "AUTHZ_PERMISSION_DENIED")
            _error(c.post(f"{mine}/data-export", json=body), 403, "AUTHZ_PERMISSION_DENIED")
            _error(c.get(f"{mine}/data-export/jobs/{job['job_id']}"), 403, "AUTHZ_PERMISSION_DENIED")
    with client(gateway.url, None) as anonymous:
        _error(anonymous.post(f"{mine}/data-erasure", json=body), 401, "AUTH_TOKEN_MISSING")


@pytest.mark.parametrize("fmt, compression", [("jsonl", "none"), ("json", "zstd")])
def test_export_download(gateway, api, fmt, compression):
    tenant = api.tenant
    base = f"{W}/tenants/{tenant.tenant_id}"
    _, _, mine = _publish(api, {"secret": "mine"}, labels={"k": "v"})
    job = _ok(api.post(f"{base}/data-export", json={"actor_type": "api_key", "actor_id": tenant.principal.key_id,
                                                    "format": fmt, "compression": compression}), 202)
    assert job["format"] == fmt and job["compression"] == compression and job["download"] is None
    _drain(job["job_id"])
    done = _ok(api.get(f"{base}/data-export/jobs/{job['job_id']}"))
    assert done["state"] == "completed" and done["records"] == 5  # message, scope, queue, publish, export
    url = done["download"]["url"]
    assert url == f"{base}/data-export/jobs/{job['job_id']}/download" and done["download"]["expires_at"]
    r = api.get(url)
    assert r.status_code == 200 and len(r.content) == done["bytes"]
    assert f'export-{job["job_id"]}.{fmt}' in r.headers["content-disposition"]
    raw = r.content
    if compression == "zstd":
        assert r.headers["content-type"] == "application/zstd"
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    if fmt == "jsonl":
        assert r.headers["content-type"] in ("application/x-ndjson", "application/zstd")
        header, *records = [jsoncodec.loads(line) for line in raw.decode().splitlines()]
    else:
        doc = jsoncodec.loads(raw)
        header, records = doc["export"], doc["records"]
    assert header["actor_id"] == tenant.principal.key_id and header["job_id"] == job["job_id"]
    [record] = [r for r in records if r["record"] == "message"]
    assert record["record"] == "message" and record["id"] == mine["id"] and record["body"] == {"secret": "mine"}
    assert sorted(r["event_type"] for r in records if r["record"] == "audit") == [
        "scaiqueue.gdpr.export_requested", "scaiqueue.message.published", "scaiqueue.queue.created",
        "scaiqueue.scope.created"]
    with client(gateway.url, tenant.key_for("read")) as reader:
        _error(reader.get(url), 403, "AUTHZ_PERMISSION_DENIED")


def test_a_key_the_acl_keeps_from_a_scope_runs_no_tenant_wide_job(gateway, api):
    """An export or erasure reaches every scope: a work key with manage that a scope's grants close
    out (or a deny binds) would read or redact that scope's messages through it."""
    base = f"{W}/tenants/{api.tenant.tenant_id}"
    scope, _, _ = _publish(api, {"ssn": "123-45-6789"})
    made = _ok(api.post(f"{base}/api-keys", json={
        "subject_type": "agent", "subject_id": "outsider",
        "allowed_operations": ["scaiqueue:view", "scaiqueue:publish", "scaiqueue:consume", "scaiqueue:manage"]}),
        201)
    _ok(api.post(f"{W}/scopes/{scope['id']}/acl/grants",  # closed to every work key but boss
                 json={"actor_type": "agent", "actor_id": "boss", "role": "manager"}), 201)
    tenant_key = {"actor_type": "api_key", "actor_id": api.tenant.principal.key_id}
    job = _ok(api.post(f"{base}/data-export", json=tenant_key), 202)  # the tenant key's own export
    _drain(job["job_id"])
    with client(gateway.url, made["key"]) as outsider:
        _error(outsider.get(f"{W}/scopes/{scope['id']}"), 403, "AUTHZ_PERMISSION_DENIED")
        for kind in ("data-export", "data-erasure"):
            refused = _error(outsider.post(f"{base}/{kind}", json=tenant_key), 403, "AUTHZ_PERMISSION_DENIED")
            assert scope["slug"] in refused["message"], refused
        _error(outsider.get(f"{base}/data-export/jobs/{job['job_id']}/download"), 403, "AUTHZ_PERMISSION_DENIED")
        _ok(api.post(f"{W}/scopes/{scope['id']}/acl/grants",
                     json={"actor_type": "agent", "actor_id": "outsider", "role": "viewer"}), 201)
        assert b"123-45-6789" in outsider.get(f"{base}/data-export/jobs/{job['job_id']}/download").content
        _ok(outsider.post(f"{base}/data-export", json=tenant_key), 202)  # viewer: an export, not an erasure
        _error(outsider.post(f"{base}/data-erasure", json=tenant_key), 403, "AUTHZ_PERMISSION_DENIED")
