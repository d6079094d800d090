"""Registration grants: which tenants may register new query names, and how many queries.

The tenant named `default` never reads this table (it stands for "tenancy off"); every other tenant
needs an enabled grant to register a NEW name. Re-registering an existing query always passes, so a
revoked grant stops new queries without stranding a runner that is still draining.
"""

from __future__ import annotations

from typing import Any

import psycopg

from .. import cells, db, tenancy
from ..errors import Forbidden, NotFound

DEFAULT_TENANT = "default"


def grant(tenant: str, *, max_queries: int | None = None, enabled: bool = True) -> dict[str, Any]:
    """Create or replace a tenant's grant (`tenant` is a name or an id), on the tenant's cell."""
    with tenancy.on_tenant(tenant) as tid, db.transaction() as conn:
        conn.execute(
            "INSERT INTO flow_quotas (tenant_id, enabled, max_queries) VALUES (%s, %s, %s)"
            " ON CONFLICT (tenant_id) DO UPDATE SET enabled = excluded.enabled,"
            " max_queries = excluded.max_queries, updated_at = clock_timestamp()",
            (tid, enabled, max_queries),
        )
    return {"tenant_id": tid, "enabled": enabled, "max_queries": max_queries}


def revoke(tenant: str) -> dict[str, Any]:
    """Disable the grant (kept, so `list` shows it): new names are denied, existing queries run on."""
    with tenancy.on_tenant(tenant) as tid, db.transaction() as conn:
        cur = conn.execute("UPDATE flow_quotas SET enabled = false, updated_at = clock_timestamp()"
                           " WHERE tenant_id = %s", (tid,))
        if cur.rowcount == 0:
            raise NotFound(f"tenant {tenant!r} has no streams grant")
    return {"tenant_id": tid, "enabled": False}


def list_grants() -> list[dict[str, Any]]:
    """Every cell's grants, by tenant name."""
    rows = []
    for _ in cells.each():
        with db.transaction() as conn:
            rows += conn.execute(
                "SELECT t.name, q.tenant_id::text, q.enabled, q.max_queries,"
                " (SELECT count(*) FROM flow_queries f WHERE f.tenant_id = q.tenant_id), q.updated_at"
                " FROM flow_quotas q JOIN tenants t ON t.id = q.tenant_id"
            ).fetchall()
    cols = ("tenant", "tenant_id", "enabled", "max_queries", "queries", "updated_at")
    return [dict(zip(cols, r, strict=True)) for r in sorted(rows, key=lambda r: r[0])]


def check_new_query(conn: psycopg.Connection, tenant_id: str) -> None:
    """403 (`denied`) unless the tenant may register one more query; locks the grant row so
    concurrent registrations cannot overshoot `max_queries`."""
    name = conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()
    if name is not None and name[0] == DEFAULT_TENANT:
        return
    row = conn.execute("SELECT enabled, max_queries FROM flow_quotas WHERE tenant_id = %s FOR UPDATE",
                       (tenant_id,)).fetchone()
    if row is None:
        raise Forbidden("streams quota: this tenant has no grant to register queries", code="denied", denied=True)
    enabled, cap = row
    if not enabled:
        raise Forbidden("streams quota: this tenant's grant is disabled", code="denied", denied=True)
    if cap is not None:
        have = conn.execute("SELECT count(*) FROM flow_queries WHERE tenant_id = %s", (tenant_id,)).fetchone()[0]
        if have >= cap:
            raise Forbidden(f"streams quota: max_queries ({cap}) reached", code="denied", denied=True)
