"""GDPR jobs of the work surface: erasure (`redact` or `delete`) and export of one actor's data.

A request makes a job row; the `work-gdpr` agent works through queued and running jobs in bounded
batches (`run`). Each batch is one step function call in the transaction that holds the job row
(FOR UPDATE SKIP LOCKED) and records the step's cursor and progress, so a job resumes where its
last batch committed and two agents at once never process the same rows twice.

The steps are data (`ERASURE`, `EXPORT`): each names a SQL function of one signature, (job, after,
limit) -> (n, next cursor or NULL when the step is done). A table joins erasure and export by one
more function and one more row here (the audit journal did).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from .. import db
from ..errors import NotFound
from ..tenancy import Principal
from . import audit, gdpr_files
from .common import MANAGE, VIEW, own_tenant
from .gate import require_tenant_wide

log = logging.getLogger("postbox.work.gdpr")

JOB_NOT_FOUND = "SCAIQUEUE_JOB_NOT_FOUND"
BATCH = 500  # rows a batch changes or exports at most
MAX_ATTEMPTS = 3  # failed batches of one job before it is `failed`


@dataclass(frozen=True)
class Step:
    name: str
    function: str  # work_gdpr_<erase|export>_<name>(job, after text, limit int) -> (n int, last text)
    walk: bool = False  # walks a table (messages by id, the tenant's journal in order): WALK_FACTOR x BATCH rows


WALK_FACTOR = 10
# The audit journal and events first: they are found through the messages they are about, before
# those change.
ERASURE: tuple[Step, ...] = (
    Step("audit", "work_gdpr_erase_audit", walk=True),
    Step("events", "work_gdpr_erase_events", walk=True),
    Step("messages", "work_gdpr_erase_messages"),
    Step("claims", "work_gdpr_erase_claims", walk=True),
    Step("deliveries", "work_gdpr_erase_deliveries"),
    Step("subscriptions", "work_gdpr_erase_subscriptions"),
)
EXPORT: tuple[Step, ...] = (
    Step("messages", "work_gdpr_export_messages"),
    Step("claims", "work_gdpr_export_claims", walk=True),
    Step("deliveries", "work_gdpr_export_deliveries"),
    Step("subscriptions", "work_gdpr_export_subscriptions"),
    Step("audit", "work_gdpr_export_audit", walk=True),
)
STEPS = {"erasure": ERASURE, "export": EXPORT}


def _job_missing() -> NotFound:
    return NotFound("Job not found.", code=JOB_NOT_FOUND)


_INSERT = """
INSERT INTO work_gdpr_jobs (tenant_id, kind, mode, format, compression, actor_type, actor_id,
                            requested_by_type, requested_by_id)
VALUES (%(tenant)s, %(kind)s, %(mode)s, %(format)s, %(compression)s, %(actor_type)s, %(actor_id)s,
        %(by_type)s, %(by_id)s)
RETURNING to_jsonb(work_gdpr_jobs.*)
"""


def submit(principal: Principal, tenant_id: str, kind: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A queued erasure or export job for the actor `fields` names; the agent does the work. It
    reaches every scope, so every scope's ACL must let the caller in (view for an export, manage
    for an erasure)."""
    tenant = own_tenant(principal, tenant_id)
    by_type, by_id = principal.actor
    params = {"tenant": tenant, "kind": kind, "mode": None, "format": None, "compression": None,
              "actor_type": fields["actor_type"], "actor_id": fields["actor_id"], "by_type": by_type, "by_id": by_id}
    if kind == "erasure":
        params["mode"] = fields.get("mode", "redact")
    else:
        params["format"] = fields.get("format", "jsonl")
        params["compression"] = fields.get("compression", "none")
    with db.transaction() as conn:
        require_tenant_wide(conn, principal, tenant, MANAGE if kind == "erasure" else VIEW)
        row = conn.execute(_INSERT, params).fetchone()[0]
        audit.record(conn, principal, f"scaiqueue.gdpr.{kind}_requested", "gdpr_job", row["id"],
                     details={"actor_type": fields["actor_type"], "mode": params["mode"]})
    return document(row)


def _row(conn, tenant: str, kind: str, job_id: str) -> dict[str, Any]:
    try:
        job_id = str(uuid.UUID(str(job_id)))
    except ValueError:
        raise _job_missing() from None
    row = conn.execute("SELECT to_jsonb(j) FROM work_gdpr_jobs j WHERE id = %s AND tenant_id = %s AND kind = %s",
                       (job_id, tenant, kind)).fetchone()
    if row is None:
        raise _job_missing()
    return row[0]


def status(principal: Principal, tenant_id: str, kind: str, job_id: str) -> dict[str, Any]:
    """The job's state and progress; a completed export says where to download it while it is kept."""
    tenant = own_tenant(principal, tenant_id)
    with db.connection() as conn:
        row = _row(conn, tenant, kind, job_id)
        doc = document(row)
        if kind == "export" and row["state"] == "completed":
            doc["download"] = gdpr_files.download(conn, row)
    return doc


def export_file(principal: Principal, tenant_id: str, job_id: str) -> gdpr_files.ExportFile:
    """The file of a completed export: its bytes (kept in the database) or a short-lived URL (S3)."""
    tenant = own_tenant(principal, tenant_id)
    with db.connection() as conn:
        require_tenant_wide(conn, principal, tenant, VIEW)
        row = _row(conn, tenant, "export", job_id)
        found = gdpr_files.fetch(conn, row) if row["state"] == "completed" else None
    if found is None:
        raise NotFound("The export is not ready, or has expired.", code=JOB_NOT_FOUND)
    return found


def document(row: dict[str, Any]) -> dict[str, Any]:
    """A job as the routes answer it: its steps in order, each pending, running or done."""
    steps, progress = STEPS[row["kind"]], row["progress"] or {}
    listed = []
    for i, step in enumerate(steps):
        if i < row["step"] or row["state"] == "completed":
            state = "done"
        elif i == row["step"] and row["state"] == "running":
            state = "running"
        else:
            state = "pending"
        listed.append({"name": step.name, "state": state, "processed": int(progress.get(step.name, 0))})
    doc: dict[str, Any] = {
        "job_id": row["id"], "tenant_id": row["tenant_id"], "kind": row["kind"],
        "actor_type": row["actor_type"], "actor_id": row["actor_id"], "state": row["state"],
        "progress": {"processed": sum(s["processed"] for s in listed), "steps": listed},
        "error": row["error"], "requested_by": {"actor_type": row["requested_by_type"],
                                                "actor_id": row["requested_by_id"]},
        "created_at": row["created_at"], "started_at": row["started_at"], "updated_at": row["updated_at"],
        "completed_at": row["completed_at"],
    }
    if row["kind"] == "erasure":
        doc["mode"] = row["mode"]
    else:
        result = row.get("result") or {}
        doc.update(format=row["format"], compression=row["compression"], records=result.get("records"),
                   bytes=result.get("bytes"), sha256=result.get("sha256"), download=None)
    return doc


# ---- the agent ----------------------------------------------------------------------------------

_NEXT = """
SELECT to_jsonb(j) FROM work_gdpr_jobs j WHERE state IN ('queued', 'running')
ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED
"""

_ADVANCE = """
UPDATE work_gdpr_jobs SET
    state = CASE WHEN %(finished)s THEN 'completed' ELSE 'running' END,
    started_at = coalesce(started_at, clock_timestamp()),
    completed_at = CASE WHEN %(finished)s THEN clock_timestamp() END,
    progress = progress || jsonb_build_object(%(name)s::text, coalesce((progress->>%(name)s)::bigint, 0) + %(n)s),
    cursor = %(last)s, step = step + CASE WHEN %(last)s::text IS NULL THEN 1 ELSE 0 END,
    updated_at = clock_timestamp()
WHERE id = %(id)s
"""

_FAILED = """
UPDATE work_gdpr_jobs SET attempts = attempts + 1, error = %(error)s, updated_at = clock_timestamp(),
    state = CASE WHEN attempts + 1 >= %(max)s THEN 'failed' ELSE state END,
    completed_at = CASE WHEN attempts + 1 >= %(max)s THEN clock_timestamp() END
WHERE id = %(id)s
"""


def _bring_in_events(conn, tenant_id: str) -> None:
    """The tenant's `_events` materialised from the work journal (each call brings at most 10,000 a
    scope), so an erasure finds every event recorded before it started."""
    while conn.execute("SELECT coalesce(max(work_events_sync(s.id)), 0) FROM work_scopes s WHERE s.tenant_id = %s",
                       (tenant_id,)).fetchone()[0] >= 10_000:
        pass


def run_batch(batch: int = BATCH) -> int | None:
    """One batch of the oldest job no other run holds: rows processed, or None when no job waits."""
    job_id = None
    try:
        with db.transaction() as conn:
            found = conn.execute(_NEXT).fetchone()
            if found is None:
                return None
            job = found[0]
            job_id = job["id"]
            steps = STEPS[job["kind"]]
            if job["step"] >= len(steps):  # an export whose records are all gathered: write its file
                gdpr_files.write(conn, job)
                return 0
            step = steps[job["step"]]
            if step.name == "events" and job["cursor"] is None:  # first: every event journalled so far is
                _bring_in_events(conn, job["tenant_id"])        # in `_events`, where this step finds them
            limit = batch * (WALK_FACTOR if step.walk else 1)
            n, last = conn.execute(
                sql.SQL("SELECT s.n, s.last FROM work_gdpr_jobs j, LATERAL {}(j, %s, %s) s WHERE j.id = %s")
                .format(sql.Identifier(step.function)), (job["cursor"], limit, job_id)).fetchone()
            finished = last is None and job["kind"] == "erasure" and job["step"] == len(steps) - 1
            conn.execute(_ADVANCE, {"id": job_id, "name": step.name, "n": n, "last": last, "finished": finished})
            return n
    except Exception as e:
        if job_id is None:
            raise
        log.exception("GDPR job %s: a batch failed", job_id)
        with db.transaction() as conn:
            conn.execute(_FAILED, {"id": job_id, "error": f"{type(e).__name__}: {e}"[:1000], "max": MAX_ATTEMPTS})
            conn.execute("DELETE FROM work_gdpr_export_parts WHERE job_id = %(id)s AND EXISTS"
                         " (SELECT 1 FROM work_gdpr_jobs WHERE id = %(id)s AND state = 'failed')", {"id": job_id})
        return 0


def run(budget_s: float = 20.0, batch: int = BATCH, max_batches: int = 1000) -> dict[str, int]:
    """The agent's run: batches until no job waits, the budget is spent or max_batches ran; then
    exports kept in the database past their retention are removed."""
    processed, batches, deadline = 0, 0, time.monotonic() + budget_s
    while batches < max_batches and time.monotonic() < deadline:
        n = run_batch(batch)
        if n is None:
            break
        processed += n
        batches += 1
    return {"processed": processed, "batches": batches, "expired_files": gdpr_files.purge()}
