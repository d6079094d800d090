"""Queues: settings, plan limits and messages for one project, on the message engine.

Every function is one unit of work (one transaction) for one principal. Another tenant's queue
is answered exactly like a missing one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg

from .. import config, db, jsoncodec, names, wakeup
from ..errors import Conflict, Forbidden, Invalid, LimitExceeded, NotFound, TooLarge, Unauthorized
from ..messages import engine
from ..tenancy import Principal
from . import plans

DEFAULT_VT = 30
RECHECK_SECONDS = 1.0  # long polls re-check this often for messages no send announces
MAX_HEADERS_BYTES = 4096
CONSUMER_DEFAULTS = {
    "function_name": None,
    "enabled": True,
    "batch_size": 10,
    "concurrency": 2,
    "visibility_timeout_sec": None,
    "ack": "archive",
}

_PROJECT = "coalesce(%(p)s::uuid, (SELECT id FROM projects WHERE tenant_id = %(t)s AND name = 'default'))"


@dataclass(frozen=True)
class Queue:
    ref: engine.QueueRef
    tenant_id: str
    app_send: bool


def _channel(queue_id: int) -> str:
    return f"queue_{queue_id}"


def _scope(principal: Principal, **extra: Any) -> dict[str, Any]:
    return {"t": principal.tenant_id, "p": principal.project_id, **extra}


def _require(principal: Principal, need: str) -> None:
    if principal.is_anonymous:
        raise Unauthorized("This key may only send to queues with app_send on.")
    if not principal.can(need):
        raise Forbidden(f"This key's role ({principal.role}) cannot do this; it needs {need}.")


def _find(conn: psycopg.Connection, principal: Principal, name: str, *, lock: bool = False) -> Queue:
    row = conn.execute(
        "SELECT id, visibility_timeout_sec, max_reads, dead_letter_queue_id, tenant_id, app_send"
        f" FROM queues WHERE tenant_id = %(t)s AND project_id = {_PROJECT} AND name = %(n)s"
        + (" FOR UPDATE" if lock else ""),
        _scope(principal, n=name),
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
        f" WHERE q.tenant_id = %(t)s AND q.project_id = {_PROJECT}"
        " AND (%(n)s::text IS NULL OR q.name = %(n)s) ORDER BY q.name",
        _scope(principal, n=name),
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


def _one(conn: psycopg.Connection, principal: Principal, name: str, *, metrics: bool) -> dict[str, Any]:
    docs = _documents(conn, principal, name)
    if not docs:
        raise NotFound("No such queue in this environment.")
    doc = docs[0]
    qid = doc.pop("_id")
    if metrics:
        doc["metrics"] = _metrics(conn, qid, name)
    return doc


def list_queues(principal: Principal) -> dict[str, Any]:
    _require(principal, "read")
    with db.transaction() as conn:
        docs = _documents(conn, principal, None)
        for doc in docs:
            oldest, _ = engine.ages(conn, doc.pop("_id"))
            doc["metrics"] = {"oldest_msg_age_sec": oldest}
        limits, usage = plans.limits_and_usage(conn, principal.tenant_id)
        project = conn.execute(f"SELECT {_PROJECT}", _scope(principal)).fetchone()[0]
    return {
        "project_id": str(project),
        "queues": docs,
        "limits": limits.as_dict(),
        "usage": {"queues": usage.queues, "stored_bytes": usage.stored_bytes},
    }


def get_queue(principal: Principal, name: str) -> dict[str, Any]:
    _require(principal, "read")
    with db.transaction() as conn:
        return _one(conn, principal, name, metrics=True)


def queue_metrics(principal: Principal, name: str) -> dict[str, Any]:
    _require(principal, "read")
    with db.transaction() as conn:
        queue = _find(conn, principal, name)
        return _metrics(conn, queue.ref.id, name)


# ---- settings ---------------------------------------------------------------------------------


def _dead_letter_target(conn: psycopg.Connection, principal: Principal, name: str | None,
                        own_name: str) -> int | None:
    if not name:
        return None
    if name == own_name:
        raise Invalid("A queue cannot be its own dead-letter queue.", code="dead_letter_queue")
    row = conn.execute(
        f"SELECT id, dead_letter_queue_id FROM queues WHERE tenant_id = %(t)s AND project_id = {_PROJECT}"
        " AND name = %(n)s",
        _scope(principal, n=name),
    ).fetchone()
    if row is None:
        raise NotFound(f"The dead-letter queue {name!r} doesn't exist.")
    if row[1] is not None:
        raise Invalid(f"The dead-letter queue {name!r} has its own dead-letter queue.",
                      code="dead_letter_queue")
    return row[0]


def _check_retention(limits: plans.Limits, days: int | None) -> None:
    if days is not None and days > limits.retention_days:
        raise LimitExceeded(
            f"retention_days {days} is over the plan's {limits.retention_days} (queues.retention_days).",
            code="retention_days",
        )


def _consumer(current: dict | None, change: dict | None) -> dict | None:
    if change is None:
        return None
    merged = {**CONSUMER_DEFAULTS, **(current or {}), **change}
    if not merged.get("function_name"):
        raise Invalid("consumer.function_name is required for a consumer.", code="consumer")
    return merged


def create_queue(principal: Principal, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Create a queue; `settings` holds only the fields the caller sent."""
    _require(principal, "manage")
    names.QUEUE.check(name, code="name")
    with db.transaction() as conn:
        limits, usage = plans.limits_and_usage(conn, principal.tenant_id)
        if usage.queues >= limits.max_queues:
            raise LimitExceeded(f"The plan allows {limits.max_queues} queues (queues.max_queues).",
                                code="max_queues")
        _check_retention(limits, settings.get("retention_days"))
        dlq = _dead_letter_target(conn, principal, settings.get("dead_letter_queue"), name)
        vt = settings.get("visibility_timeout_sec")
        consumer = _consumer(None, settings.get("consumer"))
        row = conn.execute(
            "INSERT INTO queues (tenant_id, project_id, name, description, visibility_timeout_sec, max_reads,"
            " dead_letter_queue_id, retention_days, app_send, consumer, created_by)"
            f" SELECT %(t)s, {_PROJECT}, %(n)s, %(description)s, %(vt)s, %(max_reads)s, %(dlq)s,"
            " %(retention)s, %(app_send)s, %(consumer)s, %(by)s"
            " ON CONFLICT (project_id, name) DO NOTHING RETURNING id",
            _scope(
                principal,
                n=name,
                description=settings.get("description"),
                vt=DEFAULT_VT if vt is None else vt,
                max_reads=settings.get("max_reads"),
                dlq=dlq,
                retention=settings.get("retention_days"),
                app_send=bool(settings.get("app_send") or False),
                consumer=psycopg.types.json.Jsonb(consumer) if consumer else None,
                by=principal.key_id,
            ),
        ).fetchone()
        if row is None:
            raise Conflict(f"A queue named {name!r} exists.")
        return _one(conn, principal, name, metrics=False)


def patch_queue(principal: Principal, name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Apply only the fields sent; a null clears a nullable setting (max_reads null = never)."""
    _require(principal, "manage")
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT id, consumer, EXISTS (SELECT 1 FROM queues o WHERE o.dead_letter_queue_id = q.id)"
            f" FROM queues q WHERE tenant_id = %(t)s AND project_id = {_PROJECT} AND name = %(n)s FOR UPDATE",
            _scope(principal, n=name),
        ).fetchone()
        if row is None:
            raise NotFound("No such queue in this environment.")
        qid, consumer, is_dead_letter_queue = row
        sets: dict[str, Any] = {}
        if "description" in changes:
            sets["description"] = changes["description"]
        if "visibility_timeout_sec" in changes:
            vt = changes["visibility_timeout_sec"]
            sets["visibility_timeout_sec"] = DEFAULT_VT if vt is None else vt
        if "max_reads" in changes:
            sets["max_reads"] = changes["max_reads"]
        if "retention_days" in changes:
            limits, _ = plans.limits_and_usage(conn, principal.tenant_id)
            _check_retention(limits, changes["retention_days"])
            sets["retention_days"] = changes["retention_days"]
        if "app_send" in changes:
            sets["app_send"] = bool(changes["app_send"])
        if "dead_letter_queue" in changes:
            target = _dead_letter_target(conn, principal, changes["dead_letter_queue"], name)
            if target is not None and is_dead_letter_queue:
                raise Invalid("This queue is another queue's dead-letter queue; it cannot have its own.",
                              code="dead_letter_queue")
            sets["dead_letter_queue_id"] = target
        if "consumer" in changes:
            merged = _consumer(consumer, changes["consumer"])
            sets["consumer"] = psycopg.types.json.Jsonb(merged) if merged else None
            if merged is None or merged.get("function_name") != (consumer or {}).get("function_name"):
                sets["consumer_last_error"] = ""
        if sets:
            assignments = ", ".join(f"{column} = %({column})s" for column in sets)
            conn.execute(
                f"UPDATE queues SET {assignments}, updated_at = clock_timestamp() WHERE id = %(qid)s",
                {**sets, "qid": qid},
            )
        return _one(conn, principal, name, metrics=True)


def delete_queue(principal: Principal, name: str) -> dict[str, Any]:
    _require(principal, "manage")
    with db.transaction() as conn:
        queue = _find(conn, principal, name, lock=True)
        users = conn.execute(
            "SELECT name FROM queues WHERE dead_letter_queue_id = %s ORDER BY name", (queue.ref.id,)
        ).fetchall()
        if users:
            raise Conflict(f"Queue {users[0][0]!r} uses {name!r} as its dead-letter queue.")
        waiting = engine.purge(conn, queue.ref.id)
        conn.execute("DELETE FROM queue_archive WHERE queue_id = %s", (queue.ref.id,))
        conn.execute("DELETE FROM queue_counters WHERE queue_id = %s", (queue.ref.id,))
        conn.execute("DELETE FROM queues WHERE id = %s", (queue.ref.id,))
    return {"deleted": True, "name": name, "messages_deleted": waiting}


# ---- messages ---------------------------------------------------------------------------------


def _principal_args(principal: Principal) -> tuple[str, str | None]:
    return principal.tenant_id, principal.project_id


def send_messages(
    principal: Principal, name: str, messages: list[Any], *, delay: float = 0, headers: Any = None
) -> list[int]:
    """Send messages in order, within the plan's size, monthly and storage limits (SQL: queue_send,
    one round trip: lookup, limits, insert, monthly count and the long-poll wake-up together)."""
    if not principal.is_anonymous:
        _require(principal, "write")
    try:
        encoded = [jsoncodec.dumps(m, strict=True) for m in messages]
        header_raw = jsoncodec.dumps(headers, strict=True) if headers is not None else b""
    except ValueError as error:  # NaN or an infinity: no JSON form, and jsonb refuses them
        raise Invalid(f"Messages and headers must be JSON: {error}.") from None
    if len(header_raw) > MAX_HEADERS_BYTES:
        raise TooLarge(f"headers are over {MAX_HEADERS_BYTES} bytes.")
    sizes = [len(m) + len(header_raw) for m in encoded]
    with db.connection() as conn, db.domain_errors():
        rows = conn.execute(
            "SELECT queue_send(%s, %s, %s, %s, %b::text[], %s::int[], %s, %s, %s::jsonb)",
            (*_principal_args(principal), name, principal.is_anonymous, [m.decode() for m in encoded],
             engine.int_array(sizes), max(sizes) - len(header_raw), delay,
             header_raw.decode() if headers is not None else None),
        ).fetchall()
    return [r[0] for r in rows]


def _queue_id(principal: Principal, name: str) -> int:
    with db.connection() as conn, db.domain_errors():
        return conn.execute("SELECT (queue_find(%s, %s, %s)).id", (*_principal_args(principal), name)).fetchone()[0]


def read_messages(
    principal: Principal, name: str, qty: int, vt: float | None, wait_seconds: float = 0
) -> list[dict[str, Any]]:
    """Claim up to `qty` messages (SQL: queue_read, one round trip answering a JSON array); with
    `wait_seconds`, long-poll until one arrives (as SQS does)."""
    _require(principal, "write")
    deadline = time.monotonic() + min(wait_seconds, config.settings().long_poll_ms / 1000)
    queue_id = None
    while True:
        with db.connection() as conn, db.domain_errors():
            found = conn.execute("SELECT queue_read(%s, %s, %s, %s, %s)",
                                 (*_principal_args(principal), name, qty, vt), binary=True).fetchone()[0]
        remaining = deadline - time.monotonic()
        if found or remaining <= 0:
            return found
        queue_id = queue_id or _queue_id(principal, name)
        wakeup.wait([_channel(queue_id)], min(remaining, RECHECK_SECONDS))


def pop_messages(principal: Principal, name: str, qty: int) -> list[dict[str, Any]]:
    _require(principal, "write")
    with db.transaction() as conn:
        queue = _find(conn, principal, name)
        return [m.as_dict() for m in engine.pop(conn, queue.ref.id, qty)]


def archive_messages(principal: Principal, name: str, ids: list[int]) -> list[int]:
    """Archive waiting messages; returns their ids in order (SQL: queue_archive, one round trip)."""
    _require(principal, "write")
    with db.connection() as conn, db.domain_errors():
        return conn.execute("SELECT queue_archive(%s, %s, %s, %s::bigint[])",
                            (*_principal_args(principal), name, engine.id_array(ids))).fetchone()[0]


def delete_messages(principal: Principal, name: str, ids: list[int]) -> list[int]:
    _require(principal, "write")
    with db.transaction() as conn:
        return engine.delete(conn, _find(conn, principal, name).ref.id, ids)


def delete_message(principal: Principal, name: str, msg_id: int) -> list[int]:
    deleted = delete_messages(principal, name, [msg_id])
    if not deleted:
        raise NotFound("No such message.")
    return deleted


def set_visibility(principal: Principal, name: str, msg_id: int, vt: float) -> dict[str, Any]:
    _require(principal, "write")
    with db.transaction() as conn:
        message = engine.set_vt(conn, _find(conn, principal, name).ref.id, msg_id, vt)
        if message is None:
            raise NotFound("The message isn't waiting in this queue.")
        return message.as_dict()


def purge_queue(principal: Principal, name: str, include_archived: bool) -> int:
    _require(principal, "write")
    with db.transaction() as conn:
        return engine.purge(conn, _find(conn, principal, name).ref.id, include_archived)


def browse_messages(
    principal: Principal, name: str, state: str, limit: int, before: int | None
) -> dict[str, Any]:
    _require(principal, "read")
    with db.transaction() as conn:
        items = engine.browse(conn, _find(conn, principal, name).ref.id, state, limit, before)
    next_before = items[-1]["msg_id"] if len(items) == limit else None
    return {"messages": items, "next_before": next_before}
