"""Routing rules of a scope: stored here, applied by the publish function (`work_route` in SQL).

A rule's `conditions` and `action` arrive already shaped (the handler's models refuse what does
not parse). Conditions written as expressions, or as a list, are translated here into the JSON
form (`expressions`), which is what is evaluated, and kept as written, which is what reads back
(`conditions_parsed` shows the JSON form). This module also resolves the queues they name inside
the rule's scope (or, for a route or copy with `target_scope_id`, in another scope a trust opens:
`acl.check_route_target`), refusing a rule whose target queue does not exist, and answers dry
runs with the same SQL the publish uses.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from .. import db
from ..errors import NotFound, Unprocessable
from ..tenancy import Principal, require
from . import acl, audit, expressions
from .common import MANAGE, SCOPE_NOT_FOUND, VIEW, as_json, parse_id

RULE_NOT_FOUND = "SCAIQUEUE_RULE_NOT_FOUND"
TRIGGERS = ("message_published", "message_completed", "message_failed", "message_dead_lettered")
# A message at a lifecycle moment cannot move: rules on those triggers act by publishing a child.
CHILD_ACTIONS = ("route", "copy")

_DOC = """jsonb_build_object(
    'id', r.id, 'scope_id', r.scope_id, 'name', r.name, 'description', r.description, 'priority', r.priority,
    'enabled', r.enabled, 'trigger', r.trigger, 'conditions', coalesce(r.conditions_written, r.conditions),
    'conditions_parsed', r.conditions, 'action', r.action,
    'source', CASE WHEN r.source_queue IS NULL THEN NULL
                   ELSE jsonb_build_object('queue_id', (SELECT queue_id FROM work_queues WHERE id = r.source_queue))
              END,
    'created_at', r.created_at, 'updated_at', r.updated_at)"""

_JSON_COLUMNS = ("conditions", "conditions_written", "action")
_ORDER = "ORDER BY r.priority, r.created_at, r.id"

_TEST = f"""
SELECT {_DOC} FROM work_routing_rules r
WHERE r.scope_id = %(s)s AND r.trigger = %(trigger)s AND r.enabled
  AND (r.source_queue IS NULL OR r.source_queue = %(queue)s)
  AND work_cond(r.conditions, work_rule_subject(%(msg)s::jsonb, %(slug)s))
{_ORDER}
"""


def _rule_missing() -> NotFound:
    return NotFound("Routing rule not found.", code=RULE_NOT_FOUND)


def _queue(conn: psycopg.Connection, scope_id: str, queue_id: str | None, field: str) -> tuple[int, str] | None:
    """(internal id, slug) of a queue of this scope that a rule names; a missing one is refused."""
    if queue_id is None:
        return None
    try:
        queue_id = str(uuid.UUID(queue_id))
    except ValueError:
        raise Unprocessable("Not a queue id.", fields=[{"field": field, "message": "not a queue id"}]) from None
    row = conn.execute("SELECT id, slug FROM work_queues WHERE queue_id = %s AND scope_id = %s"
                       " FOR KEY SHARE", (queue_id, scope_id)).fetchone()  # held: the rule naming it is made first
    if row is None:
        raise Unprocessable("The queue a rule names does not exist in this scope.",
                            fields=[{"field": field, "message": "no such queue in this scope"}])
    return row[0], row[1]


def _target(conn: psycopg.Connection, tenant_id: str, scope_id: str, action: dict[str, Any]) -> tuple[int, str] | None:
    """The queue a route or copy sends to: in this scope, or in `target_scope_id` when a trust lets
    this scope route there (refused 403 otherwise; checked again at every routing)."""
    other = action.get("target_scope_id")
    if other is None or (action.get("queue_id") and str(uuid.UUID(other)) == scope_id):
        return _queue(conn, scope_id, action.get("queue_id"), "action.queue_id")
    return acl.check_route_target(conn, tenant_id, scope_id, other, action["queue_id"], "action.queue_id")


def _columns(conn: psycopg.Connection, tenant_id: str, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """The table's columns for the fields a request gives (queues resolved to internal ids)."""
    out = {k: fields[k] for k in ("name", "description", "priority", "enabled", "trigger") if k in fields}
    if "conditions" in fields:
        written = expressions.written_form(fields["conditions"])
        out["conditions"] = as_json(expressions.condition_of(fields["conditions"]))
        out["conditions_written"] = None if written is None else as_json(written)
    if "action" in fields:
        action = fields["action"]
        target = _target(conn, tenant_id, scope_id, action)
        out["action"] = as_json(action)
        out["target_queue"] = target[0] if target else None
    if "source" in fields:
        source = fields["source"] or {}
        found = _queue(conn, scope_id, source.get("queue_id"), "source.queue_id")
        out["source_queue"] = found[0] if found else None
    return out


def create_rule(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        cols = {"priority": 100, "enabled": True, "trigger": "message_published", "conditions": None,
                **_columns(conn, tenant_id, scope_id, fields)}
        names = ", ".join(cols)
        values = ", ".join(f"%({k})s" + ("::jsonb" if k in _JSON_COLUMNS else "") for k in cols)
        rule_id = conn.execute(f"INSERT INTO work_routing_rules (scope_id, {names}) VALUES (%(scope)s, {values})"
                               " RETURNING id", {"scope": scope_id, **cols}).fetchone()[0]
        audit.record(conn, principal, "scaiqueue.routing_rule.created", "routing_rule", rule_id, scope_id=scope_id,
                     details={"name": fields.get("name")})
        return _fits_trigger(_one(conn, scope_id, str(rule_id)))


def _one(conn: psycopg.Connection, scope_id: str, rule_id: str) -> dict[str, Any]:
    row = conn.execute(f"SELECT {_DOC} FROM work_routing_rules r WHERE r.id = %s AND r.scope_id = %s",
                       (rule_id, scope_id)).fetchone()
    if row is None:
        raise _rule_missing()
    return row[0]


def _fits_trigger(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule on a lifecycle trigger publishes a child: its action must be route or copy."""
    if rule["trigger"] != "message_published" and rule["action"]["type"] not in CHILD_ACTIONS:
        raise Unprocessable(f"A {rule['trigger']} rule acts by publishing a child: its action is route or copy.",
                            fields=[{"field": "action.type", "message": "route or copy on this trigger"}])
    return rule


def _rule_id(rule_id: str) -> str:
    try:
        return parse_id(rule_id, SCOPE_NOT_FOUND)
    except NotFound:
        raise _rule_missing() from None


def list_rules(principal: Principal, scope_id: str) -> list[dict[str, Any]]:
    """Every rule of the scope, in the order they are tried (priority ascending, then age)."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        rows = conn.execute(f"SELECT {_DOC} FROM work_routing_rules r WHERE r.scope_id = %s {_ORDER}",
                            (scope_id,)).fetchall()
    return [r[0] for r in rows]


def get_rule(principal: Principal, scope_id: str, rule_id: str) -> dict[str, Any]:
    tenant_id = require(principal, VIEW)
    scope_id, rule_id = parse_id(scope_id, SCOPE_NOT_FOUND), _rule_id(rule_id)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        return _one(conn, scope_id, rule_id)


def update_rule(principal: Principal, scope_id: str, rule_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """PATCH: the fields given change, the others stay; enable and disable are this with `enabled`."""
    tenant_id = require(principal, MANAGE)
    scope_id, rule_id = parse_id(scope_id, SCOPE_NOT_FOUND), _rule_id(rule_id)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        cols = _columns(conn, tenant_id, scope_id, fields)
        sets = ", ".join(f"{k} = %({k})s" + ("::jsonb" if k in _JSON_COLUMNS else "") for k in cols)
        found = conn.execute(
            f"UPDATE work_routing_rules SET {sets + ', ' if sets else ''}updated_at = clock_timestamp()"
            " WHERE id = %(id)s AND scope_id = %(scope)s RETURNING id", {"id": rule_id, "scope": scope_id, **cols},
        ).fetchone()
        if found is None:
            raise _rule_missing()
        action = {True: "enabled", False: "disabled"}.get(fields.get("enabled")) if list(fields) == ["enabled"] \
            else "updated"
        audit.record(conn, principal, "scaiqueue.routing_rule." + action, "routing_rule", rule_id, scope_id=scope_id,
                     details={"fields": sorted(fields)})
        return _fits_trigger(_one(conn, scope_id, rule_id))


def delete_rule(principal: Principal, scope_id: str, rule_id: str) -> None:
    tenant_id = require(principal, MANAGE)
    scope_id, rule_id = parse_id(scope_id, SCOPE_NOT_FOUND), _rule_id(rule_id)
    with db.transaction() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        if conn.execute("DELETE FROM work_routing_rules WHERE id = %s AND scope_id = %s RETURNING id",
                        (rule_id, scope_id)).fetchone() is None:
            raise _rule_missing()
        audit.record(conn, principal, "scaiqueue.routing_rule.deleted", "routing_rule", rule_id, scope_id=scope_id)


def dry_run(principal: Principal, scope_id: str, trigger: str, message: dict[str, Any]) -> dict[str, Any]:
    """Dry run: the enabled rules of `trigger` that match a hypothetical message, in the order they
    are tried, and the one a publish would apply (the first). A rule bound to a source queue
    matches only when the message names that queue (`queue_id`)."""
    tenant_id = require(principal, VIEW)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        acl.load_scope(conn, principal, tenant_id, scope_id, VIEW)
        queue = _queue(conn, scope_id, message.get("queue_id"), "message.queue_id")
        rows = conn.execute(_TEST, {"s": scope_id, "trigger": trigger, "msg": as_json(message),
                                    "queue": queue[0] if queue else None,
                                    "slug": queue[1] if queue else None}).fetchall()
    matches = [r[0] for r in rows]
    return {"matches": matches, "applied": matches[0] if matches else None}
