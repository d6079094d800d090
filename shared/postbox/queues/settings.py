"""Queues: creating, changing and deleting a queue's settings within the plan's limits."""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db, limits, names
from ..errors import Conflict, Invalid, LimitExceeded, NotFound
from ..tenancy import Principal
from . import consumer_functions, engine, plans
from .catalog import find, one, require, scope

NAME = names.QUEUE.regex
DEFAULT_VT = 30
CONSUMER_DEFAULTS = {
    "function_name": None,
    "enabled": True,
    "batch_size": 10,
    "concurrency": 2,
    "visibility_timeout_sec": None,
    "ack": "archive",
}


# ---- settings ---------------------------------------------------------------------------------


def hold_dead_letter_links(conn: psycopg.Connection, principal: Principal) -> None:
    """Which queue of a project dead-letters into which changes one change at a time, each checking
    the links as the one before left them: two at once (A into B while B gets its own dead-letter
    queue, or A into B while B into A) would each pass the rule alone and together make the chain
    or loop it forbids. Taken before the transaction locks any queue row."""
    conn.execute("SELECT pg_advisory_xact_lock(x'444c'::int, hashtext(%(p)s))", scope(principal))  # "DL"


def _dead_letter_target(conn: psycopg.Connection, principal: Principal, name: str | None,
                        own_name: str) -> int | None:
    """The dead-letter queue named, held against deletion until the transaction ends (a deletion
    that came first is its 404). Call it under `hold_dead_letter_links`."""
    if not name:
        return None
    if name == own_name:
        raise Invalid("A queue cannot be its own dead-letter queue.", code="dead_letter_queue")
    row = conn.execute(
        "SELECT id, dead_letter_queue_id FROM queues WHERE tenant_id = %(t)s AND project_id = %(p)s"
        " AND name = %(n)s FOR KEY SHARE",
        scope(principal, n=name),
    ).fetchone()
    if row is None:
        raise NotFound(f"The dead-letter queue {name!r} doesn't exist.")
    if row[1] is not None:
        raise Invalid(f"The dead-letter queue {name!r} has its own dead-letter queue.",
                      code="dead_letter_queue")
    return row[0]


def _check_retention(plan: plans.Limits, days: int | None) -> None:
    if days is not None and days > plan.retention_days:
        raise LimitExceeded(
            f"retention_days {days} is over the plan's {plan.retention_days} (queues.retention_days).",
            code="retention_days",
        )


def _consumer(tenant_id: str, current: dict | None, change: dict | None) -> dict | None:
    """The consumer after `change`: its function must be one of the tenant's (`consumer_functions`)."""
    if change is None:
        return None
    merged = {**CONSUMER_DEFAULTS, **(current or {}), **change}
    if not merged.get("function_name"):
        raise Invalid("consumer.function_name is required for a consumer.", code="consumer")
    consumer_functions.check(tenant_id, merged["function_name"])
    return merged


def create_queue(principal: Principal, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Create a queue; `settings` holds only the fields the caller sent."""
    require(principal, "manage")
    names.QUEUE.check(name, code="name")
    with db.transaction() as conn:
        insert_queue(conn, principal, name, settings)
        return one(conn, principal, name, metrics=False)


def insert_queue(conn: psycopg.Connection, principal: Principal, name: str, settings: dict[str, Any]) -> int:
    """Create a queue in the caller's transaction (its name already held to the caller's rule: the
    SQS face also names FIFO queues `<name>.fifo`); its id."""
    limits.check(conn, principal.tenant_id, limits.QUEUES)
    plan, _ = plans.limits_and_usage(conn, principal.tenant_id)
    _check_retention(plan, settings.get("retention_days"))
    if settings.get("dead_letter_queue"):
        hold_dead_letter_links(conn, principal)
    dlq = _dead_letter_target(conn, principal, settings.get("dead_letter_queue"), name)
    vt = settings.get("visibility_timeout_sec")
    consumer = _consumer(principal.tenant_id, None, settings.get("consumer"))
    row = conn.execute(
        "INSERT INTO queues (tenant_id, project_id, name, description, visibility_timeout_sec, max_reads,"
        " dead_letter_queue_id, retention_days, app_send, consumer, created_by)"
        " SELECT %(t)s, %(p)s, %(n)s, %(description)s, %(vt)s, %(max_reads)s, %(dlq)s,"
        " %(retention)s, %(app_send)s, %(consumer)s, %(by)s"
        " ON CONFLICT (project_id, name) DO NOTHING RETURNING id",
        scope(
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
    return row[0]


def patch_queue(principal: Principal, name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Apply only the fields sent; a null clears a nullable setting (max_reads null = never)."""
    require(principal, "manage")
    with db.transaction() as conn:
        change_queue(conn, principal, name, changes)
        return one(conn, principal, name, metrics=True)


def change_queue(conn: psycopg.Connection, principal: Principal, name: str, changes: dict[str, Any]) -> int:
    """patch_queue's changes in the caller's transaction; the queue's id."""
    if "dead_letter_queue" in changes:
        hold_dead_letter_links(conn, principal)
    row = conn.execute(
        "SELECT id, consumer, EXISTS (SELECT 1 FROM queues o WHERE o.dead_letter_queue_id = q.id)"
        " FROM queues q WHERE tenant_id = %(t)s AND project_id = %(p)s AND name = %(n)s FOR UPDATE",
        scope(principal, n=name),
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
        plan, _ = plans.limits_and_usage(conn, principal.tenant_id)
        _check_retention(plan, changes["retention_days"])
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
        merged = _consumer(principal.tenant_id, consumer, changes["consumer"])
        sets["consumer"] = psycopg.types.json.Jsonb(merged) if merged else None
        if merged is None or merged.get("function_name") != (consumer or {}).get("function_name"):
            sets["consumer_last_error"] = ""
    if sets:
        assignments = ", ".join(f"{column} = %({column})s" for column in sets)
        conn.execute(
            f"UPDATE queues SET {assignments}, updated_at = clock_timestamp() WHERE id = %(qid)s",
            {**sets, "qid": qid},
        )
    return qid


def delete_queue(principal: Principal, name: str) -> dict[str, Any]:
    require(principal, "manage")
    with db.transaction() as conn:
        waiting = remove_queue(conn, principal, name)
    return {"deleted": True, "name": name, "messages_deleted": waiting}


def remove_queue(conn: psycopg.Connection, principal: Principal, name: str) -> int:
    """Delete a queue and its messages in the caller's transaction (the SQS face notes the deletion in
    the same one); how many messages were waiting. Refused while another queue dead-letters into it."""
    queue = find(conn, principal, name, lock=True)
    users = conn.execute(
        "SELECT name FROM queues WHERE dead_letter_queue_id = %s ORDER BY name", (queue.ref.id,)
    ).fetchall()
    if users:
        raise Conflict(f"Queue {users[0][0]!r} uses {name!r} as its dead-letter queue.")
    # What its counters hold back for the tenant's usage is folded in before they go.
    conn.execute("SELECT queue_usage_fold(%s, NULL, 0)", (queue.ref.id,))
    waiting = engine.purge(conn, queue.ref.id)
    conn.execute("DELETE FROM queue_archive WHERE queue_id = %s", (queue.ref.id,))
    conn.execute("DELETE FROM queue_counters WHERE queue_id = %s", (queue.ref.id,))
    conn.execute("DELETE FROM queues WHERE id = %s", (queue.ref.id,))
    return waiting
