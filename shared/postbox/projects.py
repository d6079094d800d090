"""Projects: a tenant's named groups of resources (every tenant has `default`). A `manage` key
that is not bound to a project may create more; any key lists the projects it can work in."""

from __future__ import annotations

from typing import Any

from . import tenancy
from .errors import Forbidden
from .tenancy import Principal


def create(principal: Principal, name: str) -> dict[str, Any]:
    tenant_id = tenancy.require(principal, "manage", what="projects")
    if principal.project_id:
        raise Forbidden("A key bound to a project cannot create projects.")
    return {"project_id": tenancy.create_project(tenant_id, name), "name": name, "created": True}


def listing(principal: Principal) -> dict[str, Any]:
    tenant_id = tenancy.require(principal, "read", what="projects")
    found = tenancy.list_projects(tenant_id)
    if principal.project_id:
        found = [p for p in found if p["project_id"] == principal.project_id]
    return {"projects": [{**p, "created_at": p["created_at"].isoformat()} for p in found]}
