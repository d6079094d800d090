"""The files of GDPR exports: built from a job's gathered parts, kept where configuration says.

Without an export bucket (`postbox dev`, tests) the file's bytes stay in the database and the
download route serves them. With one (`POSTBOX_EXPORT_BUCKET`, on AWS) the agent puts the file in
the bucket and a job's status answers a presigned GET URL that works for `export_url_seconds`.
Either way an export is kept `export_retention_days` after it completed (on S3, the bucket's
lifecycle rule deletes it; in the database, the agent's run does).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import zstandard

from .. import aws, db, jsoncodec
from ..config import settings

CONTENT_TYPES = {"jsonl": "application/x-ndjson", "json": "application/json"}


@dataclass(frozen=True)
class ExportFile:
    """An export to hand out: its bytes (database) or a short-lived URL to them (S3)."""

    filename: str
    content_type: str
    content: bytes | None = None
    url: str | None = None


def filename(job: dict[str, Any]) -> str:
    return f"export-{job['id']}.{job['format']}" + (".zst" if job["compression"] == "zstd" else "")


def content_type(job: dict[str, Any]) -> str:
    return "application/zstd" if job["compression"] == "zstd" else CONTENT_TYPES[job["format"]]


def build(conn: psycopg.Connection, job: dict[str, Any]) -> tuple[bytes, int]:
    """(the file, its records): a header record, then every record gathered, in step order."""
    header = {"record": "export", "job_id": job["id"], "tenant_id": job["tenant_id"],
              "actor_type": job["actor_type"], "actor_id": job["actor_id"],
              "exported_at": datetime.now(UTC).isoformat()}
    parts = conn.execute("SELECT records, lines FROM work_gdpr_export_parts WHERE job_id = %s ORDER BY part",
                         (job["id"],)).fetchall()
    records = sum(p[0] for p in parts)
    head = jsoncodec.dumps(header)
    if job["format"] == "jsonl":
        data = head + b"\n" + "".join(p[1] for p in parts).encode()
    else:  # one JSON document: {"export": header, "records": [...]}
        items = ",".join(line for p in parts for line in p[1].split("\n") if line)
        data = b'{"export":' + head + b',"records":[' + items.encode() + b"]}"
    if job["compression"] == "zstd":
        data = zstandard.ZstdCompressor(level=3).compress(data)
    return data, records


def write(conn: psycopg.Connection, job: dict[str, Any]) -> None:
    """Write a job's file where exports go, drop its parts and complete the job (in the caller's
    transaction: a failure leaves the parts for the next try, and a retried S3 put overwrites)."""
    data, records = build(conn, job)
    result = {"records": records, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
              "content_type": content_type(job), "filename": filename(job)}
    bucket = settings().export_bucket
    if bucket:
        key = f"exports/{job['tenant_id']}/{job['id']}/{filename(job)}"
        _s3().put_object(Bucket=bucket, Key=key, Body=data, ContentType=content_type(job),
                         ContentDisposition=f'attachment; filename="{filename(job)}"')
        result.update(store="s3", bucket=bucket, key=key)
    else:
        conn.execute("INSERT INTO work_gdpr_export_files (job_id, content) VALUES (%s, %s)"
                     " ON CONFLICT (job_id) DO UPDATE SET content = excluded.content", (job["id"], data))
        result.update(store="database")
    conn.execute("DELETE FROM work_gdpr_export_parts WHERE job_id = %s", (job["id"],))
    conn.execute("UPDATE work_gdpr_jobs SET state = 'completed', completed_at = clock_timestamp(),"
                 " updated_at = clock_timestamp(), result = %s::jsonb WHERE id = %s",
                 (jsoncodec.dumps(result).decode(), job["id"]))


def kept_until(job: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(job["completed_at"]) + timedelta(days=settings().export_retention_days)


def download(conn: psycopg.Connection, job: dict[str, Any]) -> dict[str, Any] | None:
    """Where a completed export is: {store, url, expires_at}, or None once it is no longer kept.
    (The database store's url is the download route, which the surface fills in.)"""
    result = job.get("result") or {}
    if kept_until(job) <= datetime.now(UTC):
        return None
    if result.get("store") == "s3":
        seconds = settings().export_url_seconds
        expires = min(kept_until(job), datetime.now(UTC) + timedelta(seconds=seconds))
        return {"store": "s3", "url": _presign(result, seconds), "expires_at": expires.isoformat()}
    if conn.execute("SELECT 1 FROM work_gdpr_export_files WHERE job_id = %s", (job["id"],)).fetchone() is None:
        return None
    return {"store": "database", "url": None, "expires_at": kept_until(job).isoformat()}


def fetch(conn: psycopg.Connection, job: dict[str, Any]) -> ExportFile | None:
    """The export to hand out, or None when it is no longer kept."""
    result = job.get("result") or {}
    if kept_until(job) <= datetime.now(UTC):
        return None
    if result.get("store") == "s3":
        return ExportFile(filename(job), content_type(job), url=_presign(result, settings().export_url_seconds))
    row = conn.execute("SELECT content FROM work_gdpr_export_files WHERE job_id = %s", (job["id"],)).fetchone()
    return ExportFile(filename(job), content_type(job), content=bytes(row[0])) if row else None


def purge() -> int:
    """Remove exports kept in the database past their retention."""
    with db.connection() as conn:
        cur = conn.execute("DELETE FROM work_gdpr_export_files f USING work_gdpr_jobs j WHERE j.id = f.job_id"
                           " AND j.completed_at < clock_timestamp() - make_interval(days => %s)",
                           (settings().export_retention_days,))
        return cur.rowcount


def _presign(result: dict[str, Any], seconds: int) -> str:
    return _s3().generate_presigned_url("get_object", Params={"Bucket": result["bucket"], "Key": result["key"]},
                                        ExpiresIn=seconds)


def _s3():
    """The S3 client, made on first use (never at import: it would slow every cold start)."""
    return aws.client("s3", signature_version="s3v4")


def reset() -> None:
    """Forget the S3 client (tests change the environment)."""
    aws.reset()
