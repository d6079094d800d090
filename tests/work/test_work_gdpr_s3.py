"""GDPR exports with an export bucket (as on AWS), under moto: the agent puts the file in the bucket,
the job's status answers a presigned URL that expires, the download route redirects to it, and
nothing of the file stays in the database."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import boto3
import pytest
from moto import mock_aws

from postbox import config, db, jsoncodec
from postbox.work import gdpr, gdpr_files, messages, queues, scopes
from support.http import client
from support.work_api import W
from support.work_api import ok as _ok

BUCKET = "postbox-test-exports"


@pytest.fixture
def bucket(monkeypatch):
    monkeypatch.setenv("POSTBOX_EXPORT_BUCKET", BUCKET)
    monkeypatch.setenv("POSTBOX_EXPORT_URL_SECONDS", "120")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    config.reset()
    gdpr_files.reset()
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        yield s3
    monkeypatch.delenv("POSTBOX_EXPORT_BUCKET")
    config.reset()
    gdpr_files.reset()


def _finish(job_id: str) -> None:
    for _ in range(1000):
        with db.connection() as conn:
            state = conn.execute("SELECT state FROM work_gdpr_jobs WHERE id = %s", (job_id,)).fetchone()[0]
        if state in ("completed", "failed"):
            assert state == "completed"
            return
        gdpr.run_batch()
    raise AssertionError("the job never ended")


def test_export_goes_to_the_bucket_behind_a_presigned_url(bucket, tenant, gateway):
    p = tenant.principal
    scope = scopes.create_scope(p, {"slug": "s3"})
    queue = queues.create_queue(p, scope["id"], {"slug": "jobs"})
    published = messages.publish(p, scope["id"], queue["id"], {"body": {"secret": "mine"}})[0]
    job = gdpr.submit(p, tenant.tenant_id, "export", {"actor_type": "api_key", "actor_id": p.key_id})
    _finish(job["job_id"])

    doc = gdpr.status(p, tenant.tenant_id, "export", job["job_id"])
    download = doc["download"]
    assert download["store"] == "s3" and doc["records"] == 5  # the message; scope, queue, publish, export audited
    url = urlparse(download["url"])
    key = f"exports/{tenant.tenant_id}/{job['job_id']}/export-{job['job_id']}.jsonl"
    assert BUCKET in url.netloc + url.path and url.path.endswith(key)
    query = parse_qs(url.query)
    assert query["X-Amz-Expires"] == ["120"] and "X-Amz-Signature" in query

    stored = bucket.get_object(Bucket=BUCKET, Key=key)
    assert stored["ContentType"] == "application/x-ndjson"
    content = stored["Body"].read()
    assert len(content) == doc["bytes"]
    header, *records = [jsoncodec.loads(x) for x in content.decode().splitlines()]
    [record] = [r for r in records if r["record"] == "message"]
    assert header["actor_id"] == p.key_id and record["id"] == published["id"]
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM work_gdpr_export_files WHERE job_id = %s",
                            (job["job_id"],)).fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM work_gdpr_export_parts WHERE job_id = %s",
                            (job["job_id"],)).fetchone()[0] == 0

    with client(gateway.url, tenant.key) as api:
        base = f"{W}/tenants/{tenant.tenant_id}/data-export/jobs/{job['job_id']}"
        answered = _ok(api.get(base))
        assert answered["download"]["store"] == "s3" and key in answered["download"]["url"]
        r = api.get(base + "/download", follow_redirects=False)
        assert r.status_code == 302 and key in r.headers["location"]


def test_a_failing_put_is_retried_then_fails_the_job(bucket, tenant):
    bucket.delete_bucket(Bucket=BUCKET)  # every put fails: NoSuchBucket
    p = tenant.principal
    scope = scopes.create_scope(p, {"slug": "s3"})
    queue = queues.create_queue(p, scope["id"], {"slug": "jobs"})
    messages.publish(p, scope["id"], queue["id"], {"body": "gathered"})
    job = gdpr.submit(p, tenant.tenant_id, "export", {"actor_type": "api_key", "actor_id": p.key_id})
    for _ in range(1000):
        doc = gdpr.status(p, tenant.tenant_id, "export", job["job_id"])
        if doc["state"] == "failed":
            break
        gdpr.run_batch()
    assert doc["state"] == "failed" and "NoSuchBucket" in doc["error"] and doc["completed_at"]
    with db.connection() as conn:  # three tries; a failed export's gathered records are not kept
        assert conn.execute("SELECT attempts FROM work_gdpr_jobs WHERE id = %s",
                            (job["job_id"],)).fetchone()[0] == gdpr.MAX_ATTEMPTS
        assert conn.execute("SELECT count(*) FROM work_gdpr_export_parts WHERE job_id = %s",
                            (job["job_id"],)).fetchone()[0] == 0
