"""Fresh tenants with keys, so every test works in its own tenant on the shared database."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from postbox import tenancy
from postbox.tenancy import Principal


@dataclass
class TestTenant:
    tenant_id: str
    key: str
    principal: Principal

    def key_for(self, role: str, project: str | None = None) -> str:
        return tenancy.create_key(self.tenant_id, role, project=project).key

    def principal_for(self, role: str, project: str | None = None) -> Principal:
        key = self.key_for(role, project)
        found = tenancy.resolve_key(key)
        assert found is not None
        return found


def new_tenant(plan: str = "pro", role: str = "manage") -> TestTenant:
    tenant_id = tenancy.create_tenant(f"test-{uuid.uuid4().hex[:12]}", plan=plan)
    issued = tenancy.create_key(tenant_id, role)
    principal = tenancy.resolve_key(issued.key)
    assert principal is not None
    return TestTenant(tenant_id, issued.key, principal)
