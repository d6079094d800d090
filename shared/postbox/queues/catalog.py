"""Queues: who may do what, finding a queue, and the documents and metrics that describe queues.

Another tenant's queue is answered exactly like a missing one.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import psycopg

from .. import db, history, tenancy
from ..errors import NotFound
from ..tenancy import Principal
from . import engine, plans


class Queue(NamedTuple):
    ref: engine.QueueRef
    tenant_id: str
    app_send: bool


def require(principal: Principal, need: str) -> None:
    """The shared check; an anonymous key may only send, to queues with `app_send` on."""
    tenancy.require(principal, need, what="queues beyond sending to app_send queues")


def scope(principal: Principal, **extra: Any) -> dict[str, Any]:
    """Query parameters naming the caller's tenant (t) and project (p)."""
    return {"t": principal.tenant_id, "p": tenancy.project_id(principal), **extra}


def find(conn: psycopg.Connection, principal: Principal, name: str, *, lock: bool = False) -> Queue:
    row = conn.execute(
        "SELECT id, visibility_timeout_sec, max_reads, dead_letter_queue_id, tenant_id, app_send"
        " FROM queues WHERE tenant_id = %(t)s AND project_id = %(p)s AND name = %(n)s"
        + (" FOR UPDATE" if lock else ""),
        scope(principal, n=name),
    ).fetchone()
    if row is None or (principal.is_anonymous and not row[5]):
        raise NotFound("No such queue in this environment.")
    return Queue(engine.QueueRef(*row[:4]), str(row[4]), row[5])


# ---- queue documents -------------------------------------------------------------------------

_QUEUE_COLUMNS = """
q.id, q.queue_id, q.tenant_id, q.project_id, q.name, q.description, q.visibility_timeout_sec, q.max_reads,
d.name, q.retention_days, q.app_send, q.consumer, q.consumer_last_error, q.created_by,
extract(epoch FROM q.created_at)::float8, extract(epoch FROM q.updated_at)::float8
"""


def _documents(conn: psycopg.Connection, principal: Principal, name: str | None) -> list[dict[str, Any]]:
    rows = conn.execute(
        f"SELECT {_QUEUE_COLUMNS} FROM queues q LEFT JOIN queues d ON d.id = q.dead_letter_queue_id"
        " WHERE q.tenant_id = %(t)s AND q.project_id = %(p)s"
        " AND (%(n)s::text IS NULL OR q.name = %(n)s) ORDER BY q.name",
        scope(principal, n=name),
    ).fetchall()
    counts = engine.counters(conn, [r[0] for r in rows])
    docs = []
    for (qid, queue_id, tenant_id, project_id, qname, description, vt, max_reads, dlq, retention, app_send,
         consumer, last_error, created_by, created_at, updated_at) in rows:
        c = counts[qid]
        docs.append({
            "queue_id": queue_id.hex,
            "org_id": str(tenant_id),
            "project_id": str(project_id),
            "env_id": "",
            "name": qname,
            "description": description,
            "visibility_timeout_sec": vt,
            "max_reads": max_reads,
            "dead_letter_queue": dlq,
            "retention_days": retention,
            "app_send": app_send,
            "consumer": {**consumer, "last_error": last_error} if consumer is not None else None,
            "queue_length": c.queue_length,
            "stored_bytes": c.stored_bytes,
            "sent_total": c.sent,
            "dead_total": c.dead_total,
            "created_by": created_by,
            "created_at": created_at,
            "updated_at": updated_at,
            "_id": qid,
        })
    return docs


def _metrics(conn: psycopg.Connection, qid: int, name: str) -> dict[str, Any]:
    c = engine.counters(conn, [qid])[qid]
    visible, in_flight, delayed = engine.state_counts(conn, qid)
    oldest, newest = engine.ages(conn, qid)
    scrape = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()[0]
    return {
        "queue_name": name,
        "queue_length": c.queue_length,
        "visible": visible,
        "in_flight": in_flight,
        "delayed": delayed,
        "oldest_msg_age_sec": oldest,
        "newest_msg_age_sec": newest,
        "total_messages": c.sent,
        "archived": c.archive_rows,
        "dead_lettered": c.dead_total,
        "stored_bytes": c.stored_bytes,
        "scrape_time": scrape,
    }


def one(conn: psycopg.Connection, principal: Principal, name: str, *, metrics: bool) -> dict[str, Any]:
    docs = _documents(conn, principal, name)
    if not docs:
        raise NotFound("No such queue in this environment.")
    doc = docs[0]
    qid = doc.pop("_id")
    if metrics:
        doc["metrics"] = _metrics(conn, qid, name)
    return doc


def list_queues(principal: Principal) -> dict[str, Any]:
    require(principal, "read")
    with db.transaction() as conn:
        docs = _documents(conn, principal, None)
        for doc in docs:
            oldest, _ = engine.ages(conn, doc.pop("_id"))
            doc["metrics"] = {"oldest_msg_age_sec": oldest}
        limits, usage = plans.limits_and_usage(conn, principal.tenant_id)
    return {
        "project_id": tenancy.project_id(principal),
        "queues": docs,
        "limits": limits.as_dict(),
        "usage": {"queues": usage.queues, "stored_bytes": usage.stored_bytes},
    }


def get_queue(principal: Principal, name: str) -> dict[str, Any]:
    require(principal, "read")
    with db.transaction() as conn:
        return one(conn, principal, name, metrics=True)


def queue_metrics(principal: Principal, name: str) -> dict[str, Any]:
    require(principal, "read")
    with db.transaction() as conn:
        queue = find(conn, principal, name)
        return _metrics(conn, queue.ref.id, name)


def queue_history(principal: Principal, name: str, window: str) -> dict[str, Any]:
    """The queue's depth, oldest age and messages in and out per minute over `window` (charts)."""
    require(principal, "read")
    with db.transaction() as conn:
        return history.series(conn, "queue", find(conn, principal, name).ref.id, window)
