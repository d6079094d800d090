"""The caller's tenant as the work surface shows it (`GET /tenants/{tenant_id}`), named by its id
or its name; every work resource of the tenant carries its `tenant_id`."""

from __future__ import annotations

from typing import Any

from .. import db
from ..tenancy import Principal
from .common import VIEW, own_tenant


def get_tenant(principal: Principal, tenant: str) -> dict[str, Any]:
    """{id, name, plan, created_at} of the caller's own tenant (any other is missing: 404)."""
    tenant_id = own_tenant(principal, tenant, VIEW)
    with db.connection() as conn:
        row = conn.execute("SELECT jsonb_build_object('id', t.id, 'name', t.name, 'plan', t.plan,"
                           " 'created_at', t.created_at) FROM tenants t WHERE t.id = %s", (tenant_id,)).fetchone()
    return row[0]
