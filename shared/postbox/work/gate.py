"""The check every work route makes, in the statement that loads its scope (`work_acl_check` in
SQL): the caller and what the request touches as the one parameter it reads (`guard`), and the SQL
fragments that run it. The ACL's routes (`acl`) and the audit log (`audit`) both use it, so it lives
apart from either.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import db
from ..errors import Forbidden
from ..tenancy import Principal
from .common import as_json

# Hot paths: the caller as a transaction-local setting, set in the FROM of the statement whose
# function loads the scope through work_scope_of, which checks it when the scope has ACL rows.
ENTER = "set_config('postbox.acl', %s, true)"
# Elsewhere: the check itself, in the FROM beside the statement that loads the scope.
GATE = "work_acl_check(%s::jsonb)"
GATE_NAMED = "work_acl_check(%(acl)s::jsonb)"
# The same check as a one-time filter for a WHERE clause (runs before the scan, whatever the plan).
CHECKED = "(SELECT true FROM work_acl_check(%s::jsonb) _)"


def guard(principal: Principal, tenant_id: str, scope_id: str | None, op: str, *, queue: str | None = None,
          messages: list[str] | None = None, subscription: str | None = None) -> str:
    """The caller and what the request touches, as `work_acl_check` reads them (JSON text). Without a
    scope, the subscription's scope is checked."""
    actor_type, actor_id = principal.actor
    return as_json({
        "tenant": tenant_id, "scope": scope_id, "op": op, "actor_type": actor_type, "actor_id": actor_id,
        "key_id": principal.key_id, "lineage": list(principal.lineage), "work_key": principal.is_work_key,
        "queue": queue,
        "messages": [m for m in (messages or []) if m], "subscription": subscription,
    })


def load_scope(conn: psycopg.Connection, principal: Principal, tenant_id: str, scope_id: str, op: str, *,
               hold: bool = False, **touches: Any) -> None:
    """The scope loaded (404 when missing) and the caller checked, in one statement. With `hold` (a
    request that makes a row of the scope), the scope is first held against deletion until the
    transaction ends: a deletion that came first is the 404; one that comes later waits, then takes
    the new row with the scope (the row's foreign key failed, a 503, when the deletion came between)."""
    with db.domain_errors():
        if hold:
            hold_scope(conn, tenant_id, scope_id)
        conn.execute(f"SELECT (work_scope_of(%s, %s)).id FROM {GATE} _",
                     (tenant_id, scope_id, guard(principal, tenant_id, scope_id, op, **touches)))


def hold_scope(conn: psycopg.Connection, tenant_id: str, scope_id: str) -> bool:
    """Hold the tenant's scope against deletion until the transaction ends (a row that names it is
    about to be made); whether it exists."""
    return conn.execute("SELECT 1 FROM work_scopes WHERE id = %s AND tenant_id = %s FOR KEY SHARE",
                        (scope_id, tenant_id)).fetchone() is not None


def load_named_scope(conn: psycopg.Connection, principal: Principal, tenant_id: str, scope_id: str, op: str, *,
                     hold: bool = False) -> None:
    """A scope a request names in its body rather than in its path (a trust's target), held to what
    a path's scope is held to: the key's `allowed_scopes` (the authorizer sees only the path) and
    the scope's ACL for `op`."""
    if not principal.allows_scope(scope_id):
        raise Forbidden("This key is not allowed in the scope it names.", code="AUTHZ_PERMISSION_DENIED")
    load_scope(conn, principal, tenant_id, scope_id, op, hold=hold)


# The first scope of the tenant the ACL keeps, in part, from the caller for `op`: one closed by
# grants where a work key's actor (or key) holds no grant giving `op`, or one with a deny entry
# binding the caller (its actor, its key or a key it descends from) that takes `op`.
_KEPT_OUT = """
SELECT s.slug FROM work_scopes s
WHERE s.tenant_id = %(tenant)s AND (
    (%(work)s AND s.acl_grants > 0 AND NOT EXISTS (
        SELECT 1 FROM work_acl_grants g
        WHERE g.scope_id = s.id
          AND ((g.actor_type = %(type)s AND g.actor_id = %(id)s) OR (g.actor_type = 'api_key' AND g.actor_id = %(key)s))
          AND %(op)s = ANY(work_acl_role_ops(g.role)) AND work_acl_active(g.conditions)))
    OR (s.acl_queue_entries > 0 AND EXISTS (
        SELECT 1 FROM work_queue_acl a
        WHERE a.scope_id = s.id AND a.effect = 'deny'
          AND ((a.actor_type = %(type)s AND a.actor_id = %(id)s)
               OR (a.actor_type = 'api_key' AND a.actor_id = ANY(%(keys)s::text[])))
          AND %(op)s = ANY(work_acl_role_ops(a.role)) AND work_acl_active(a.conditions))))
ORDER BY s.created_at, s.id LIMIT 1"""


def require_tenant_wide(conn: psycopg.Connection, principal: Principal, tenant_id: str, op: str) -> None:
    """A request that reaches every scope of the tenant at once (a GDPR export or erasure) is held
    to every scope's ACL: refused (403) when any scope is closed to the caller for `op`, or a deny
    there binds it."""
    actor_type, actor_id = principal.actor
    row = conn.execute(_KEPT_OUT, {"tenant": tenant_id, "work": principal.is_work_key, "type": actor_type,
                                   "id": actor_id, "key": principal.key_id, "op": op,
                                   "keys": [principal.key_id, *principal.lineage]}).fetchone()
    if row is not None:
        raise Forbidden(f"This reaches every scope, and the ACL of scope {row[0]} keeps {op} from {actor_type} "
                        f"{actor_id}.", code="AUTHZ_PERMISSION_DENIED")
