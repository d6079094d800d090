"""The work surface's ACL: scope grants, per-queue allow/deny entries, trusted scopes.

Every work route checks the caller with `work_acl_check` (SQL) in the same statement that loads
its scope: `guard(...)` builds its one parameter; the hot paths hand it over with `ENTER` (checked
by `work_scope_of`, free when the scope has no ACL rows), the others call it with `GATE`,
`GATE_NAMED` or `CHECKED` beside their loader. Rules (also in docs/work.md):

- tenant keys keep their tenant-wide rights; only `deny` entries can take something away;
- a scope with grants is closed to work keys: a work key's actor needs a grant whose role gives
  the operation (viewer: view; publisher: +publish; consumer: +consume; manager: all four), or
  `allow` entries giving it on the queues the request touches; its allowed_operations still cap it;
- a `deny` entry on a queue removes its role's operations there for its actor, over any grant.

Entries match the caller's actor (`Principal.actor`) or, with actor_type `api_key`, its key id; a
`deny` by key id also matches every key minted from that key (`Principal.lineage`), so minting an
equal key never sheds a deny, while grants and allows by key id give to that key alone.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db
from ..errors import Conflict, Forbidden, NotFound, Unprocessable
from ..tenancy import Principal, require
from . import audit
from .common import MANAGE, SCOPE_NOT_FOUND, as_json, parse_id
from .gate import CHECKED, ENTER, GATE, GATE_NAMED, guard, hold_scope, load_named_scope, load_scope  # noqa: F401  (the check, used as acl.*)

ENTRY_NOT_FOUND = "SCAIQUEUE_ACL_ENTRY_NOT_FOUND"
ACL_CONFLICT = "SCAIQUEUE_ACL_CONFLICT"


# ---- the ACL routes -----------------------------------------------------------------------------

_GRANT = """jsonb_build_object('id', g.id, 'scope_id', g.scope_id, 'actor_type', g.actor_type,
    'actor_id', g.actor_id, 'role', g.role, 'conditions', g.conditions, 'created_at', g.created_at)"""
_ENTRY = """jsonb_build_object('id', a.id, 'scope_id', a.scope_id,
    'queue_id', (SELECT queue_id FROM work_queues WHERE id = a.queue_id), 'actor_type', a.actor_type,
    'actor_id', a.actor_id, 'role', a.role, 'effect', a.effect, 'conditions', a.conditions,
    'created_at', a.created_at)"""
_TRUST = """jsonb_build_object('id', t.id, 'scope_id', t.scope_id, 'target_scope_id', t.target_scope_id,
    'direction', t.direction, 'allowed_types', t.allowed_types, 'allowed_queues', t.allowed_queues,
    'identity_mode', t.identity_mode, 'created_at', t.created_at)"""


def invalid_field(field: str, message: str) -> Unprocessable:
    return Unprocessable(f"{field}: {message}", fields=[{"field": field, "message": message}])


def _entry_missing(what: str) -> NotFound:
    return NotFound(f"{what} not found.", code=ENTRY_NOT_FOUND)


def _entry_id(value: str, what: str) -> str:
    try:
        return parse_id(value, SCOPE_NOT_FOUND)
    except NotFound:
        raise _entry_missing(what) from None


def get_acl(principal: Principal, scope_id: str) -> dict[str, Any]:
    """{grants, queue_acl, trusted_scopes} of the scope, oldest first."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.connection() as conn:
        load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        row = conn.execute(
            f"""SELECT
              (SELECT coalesce(jsonb_agg({_GRANT} ORDER BY g.created_at, g.id), '[]') FROM work_acl_grants g
               WHERE g.scope_id = %(s)s),
              (SELECT coalesce(jsonb_agg({_ENTRY} ORDER BY a.created_at, a.id), '[]') FROM work_queue_acl a
               WHERE a.scope_id = %(s)s),
              (SELECT coalesce(jsonb_agg({_TRUST} ORDER BY t.created_at, t.id), '[]') FROM work_trusted_scopes t
               WHERE t.scope_id = %(s)s)""", {"s": scope_id}).fetchone()
    return {"grants": row[0], "queue_acl": row[1], "trusted_scopes": row[2]}


def add_grant(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        grant = conn.execute(
            f"INSERT INTO work_acl_grants AS g (scope_id, actor_type, actor_id, role, conditions)"
            f" VALUES (%s, %s, %s, %s, %s::jsonb) RETURNING {_GRANT}",
            (scope_id, fields["actor_type"], fields["actor_id"], fields["role"], _conditions(fields)),
        ).fetchone()[0]
        _audit(conn, principal, "grant.added", grant, scope_id)
        return grant


def _audit(conn: psycopg.Connection, principal: Principal, action: str, entry: dict[str, Any],
           scope_id: str) -> None:
    """The audit event of an ACL entry added (its fields as the details)."""
    kind = action.split(".")[0]
    audit.record(conn, principal, f"scaiqueue.acl.{action}", "acl_" + kind, entry["id"], scope_id=scope_id,
                 details={k: v for k, v in entry.items() if k not in ("id", "scope_id", "created_at")})


def _conditions(fields: dict[str, Any]) -> str | None:
    found = fields.get("conditions")
    return as_json(found) if found else None


def _queue(conn: psycopg.Connection, scope_ids: tuple[str, ...], queue_id: str, field: str) -> int:
    """The internal id of a queue of one of these scopes named by a body field (422 naming it if none),
    held against deletion until the transaction ends (the row naming it is made first)."""
    row = conn.execute("SELECT id FROM work_queues WHERE queue_id = %s AND scope_id = ANY(%s::uuid[]) FOR KEY SHARE",
                       (parse_body_id(queue_id, field), list(scope_ids))).fetchone()
    if row is None:
        raise invalid_field(field, "no such queue in this scope" if len(scope_ids) == 1 else "no such queue")
    return row[0]


def parse_body_id(value: str, field: str) -> str:
    try:
        return parse_id(value, SCOPE_NOT_FOUND)
    except NotFound:
        raise invalid_field(field, "not an id") from None


def add_queue_entry(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    with db.transaction() as conn:
        load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        queue = _queue(conn, (scope_id,), fields["queue_id"], "queue_id")
        entry = conn.execute(
            f"INSERT INTO work_queue_acl AS a (scope_id, queue_id, actor_type, actor_id, role, effect, conditions)"
            f" VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb) RETURNING {_ENTRY}",
            (scope_id, queue, fields["actor_type"], fields["actor_id"], fields["role"],
             fields.get("effect") or "allow", _conditions(fields)),
        ).fetchone()[0]
        _audit(conn, principal, "queue_acl.added", entry, scope_id)
        return entry


def add_trust(principal: Principal, scope_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """Trust another scope of the tenant. `allowed_queues` name queues of the receiving side: the
    target's for `outbound`, this scope's for `inbound`, either's for `both`. A trust that opens the
    target (`outbound`, `both`) lets this scope's rules publish there, so it needs a caller who may
    manage the target too: a key limited to some scopes, or kept out of the target by its ACL,
    cannot open a way into it from a scope it manages (403)."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    target = parse_body_id(fields["target_scope_id"], "target_scope_id")
    direction = fields.get("direction") or "outbound"
    with db.transaction() as conn:
        load_scope(conn, principal, tenant_id, scope_id, MANAGE, hold=True)
        if target == scope_id:
            raise invalid_field("target_scope_id", "a scope needs no trust to route into itself")
        if not hold_scope(conn, tenant_id, target):
            raise invalid_field("target_scope_id", "no such scope")
        if direction != "inbound":
            load_named_scope(conn, principal, tenant_id, target, MANAGE)
        receivers = {"outbound": (target,), "inbound": (scope_id,), "both": (scope_id, target)}[direction]
        queues = fields.get("allowed_queues")
        for i, queue_id in enumerate(queues or ()):
            _queue(conn, receivers, queue_id, f"allowed_queues.{i}")
        row = conn.execute(
            "INSERT INTO work_trusted_scopes AS t (scope_id, target_scope_id, direction, allowed_types, allowed_queues,"
            " identity_mode) VALUES (%s, %s, %s, %s, %s::uuid[], %s)"
            f" ON CONFLICT (scope_id, target_scope_id) DO NOTHING RETURNING {_TRUST}",
            (scope_id, target, direction, fields.get("allowed_types"),
             None if queues is None else [parse_body_id(q, "allowed_queues") for q in queues],
             fields.get("identity_mode") or "source"),
        ).fetchone()
        if row is None:
            raise Conflict("This scope already trusts that scope; revoke that trust first.", code=ACL_CONFLICT)
        _audit(conn, principal, "trust.added", row[0], scope_id)
        return row[0]


_TABLES = {"grant": ("work_acl_grants", "Grant"), "queue_acl": ("work_queue_acl", "ACL entry"),
           "trust": ("work_trusted_scopes", "Trust")}


def delete_entry(principal: Principal, scope_id: str, kind: str, entry_id: str) -> None:
    """Delete a grant, queue entry or trust of the scope (404 ACL_ENTRY_NOT_FOUND when it has none)."""
    tenant_id = require(principal, MANAGE)
    scope_id = parse_id(scope_id, SCOPE_NOT_FOUND)
    table, what = _TABLES[kind]
    entry_id = _entry_id(entry_id, what)
    with db.transaction() as conn:
        load_scope(conn, principal, tenant_id, scope_id, MANAGE)
        found = conn.execute(f"DELETE FROM {table} WHERE id = %s AND scope_id = %s RETURNING id",  # noqa: S608
                             (entry_id, scope_id)).fetchone()
        if found is None:
            raise _entry_missing(what)
        audit.record(conn, principal, f"scaiqueue.acl.{kind}.removed", "acl_" + kind, entry_id, scope_id=scope_id)


# What a rotation would hand its caller beyond its own standing in the ACL (see `rotation_beyond`):
# a deny by key id that binds the caller (its key or one it descends from) but not the key rotated,
# and, for a work caller, a grant or allow that names the key rotated by its id.
_ROTATION = """
SELECT k.id = %(caller)s::uuid OR %(caller)s::uuid = ANY(k.lineage),
  (SELECT a.actor_id FROM work_queue_acl a JOIN work_scopes s ON s.id = a.scope_id
   WHERE s.tenant_id = %(tenant)s AND a.effect = 'deny' AND a.actor_type = 'api_key'
     AND a.actor_id = ANY(%(mine)s::text[]) AND a.actor_id <> ALL((k.id || k.lineage)::text[])
   ORDER BY a.created_at LIMIT 1),
  %(work)s AND (
    EXISTS (SELECT 1 FROM work_acl_grants g JOIN work_scopes s ON s.id = g.scope_id
            WHERE s.tenant_id = %(tenant)s AND g.actor_type = 'api_key' AND g.actor_id = k.id::text)
    OR EXISTS (SELECT 1 FROM work_queue_acl a JOIN work_scopes s ON s.id = a.scope_id
               WHERE s.tenant_id = %(tenant)s AND a.effect = 'allow' AND a.actor_type = 'api_key'
                 AND a.actor_id = k.id::text))
FROM api_keys k WHERE k.id = %(key)s AND k.tenant_id = %(tenant)s"""


def rotation_beyond(conn: psycopg.Connection, caller: Principal, tenant_id: str, key_id: str) -> str | None:
    """Why handing `caller` the new secret of key `key_id` would give it more than the ACL gives
    it (None: it would not). The key itself, or a key minted from it (whose secret it was shown, and
    which every deny binding it binds), gives it nothing; any other key would shed a deny by key id
    that binds the caller but not that key, or (to a work key) give a grant or allow made for that
    key by its id alone."""
    mine = [caller.key_id, *caller.lineage]
    row = conn.execute(_ROTATION, {"caller": caller.key_id, "tenant": tenant_id, "key": key_id, "mine": mine,
                                   "work": caller.is_work_key}).fetchone()
    if row is None or row[0]:
        return None
    if row[1] is not None:
        return f"leaves out the deny on api_key {row[1]}, which binds this key"
    if row[2]:
        return "gives that key grants or allow entries by its id, which this key does not hold"
    return None


def check_route_target(conn: psycopg.Connection, tenant_id: str, scope_id: str, target_scope: str,
                       queue_id: str, field: str) -> tuple[int, str]:
    """(internal id, slug) of a queue in another scope a routing rule names: it must exist in the
    tenant and a trust must let `scope_id` route into it (403 AUTHZ_PERMISSION_DENIED otherwise)."""
    target_scope = parse_body_id(target_scope, "action.target_scope_id")
    row = conn.execute(
        "SELECT q.id, q.slug, work_trust_of(%s, q.scope_id, q.queue_id, NULL) FROM work_queues q"
        " JOIN work_scopes s ON s.id = q.scope_id WHERE q.queue_id = %s AND q.scope_id = %s AND s.tenant_id = %s"
        " FOR KEY SHARE OF q",  # held: the rule naming it is made first
        (scope_id, parse_body_id(queue_id, field), target_scope, tenant_id)).fetchone()
    if row is None:
        raise invalid_field(field, "no such queue in the target scope")
    if row[2] is None:
        raise Forbidden("No trust lets this scope route into that queue of the target scope.",
                        code="AUTHZ_PERMISSION_DENIED")
    return row[0], row[1]
