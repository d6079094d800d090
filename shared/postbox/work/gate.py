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


def load_scope(conn: psycopg.Connection, principal: Principal, tenant_id: str, scope_id: str, op: str,
               **touches: Any) -> None:
    """The scope loaded (404 when missing) and the caller checked, in one statement."""
    with db.domain_errors():
        conn.execute(f"SELECT (work_scope_of(%s, %s)).id FROM {GATE} _",
                     (tenant_id, scope_id, guard(principal, tenant_id, scope_id, op, **touches)))


def load_named_scope(conn: psycopg.Connection, principal: Principal, tenant_id: str, scope_id: str, op: str) -> None:
    """A scope a request names in its body rather than in its path (a trust's target), held to what
    a path's scope is held to: the key's `allowed_scopes` (the authorizer sees only the path) and
    the scope's ACL for `op`."""
    if not principal.allows_scope(scope_id):
        raise Forbidden("This key is not allowed in the scope it names.", code="AUTHZ_PERMISSION_DENIED")
    load_scope(conn, principal, tenant_id, scope_id, op)
