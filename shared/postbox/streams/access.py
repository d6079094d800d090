"""Who may do what, and which project a request is about.

A key bound to a project always works in that project (a `project` the caller names is ignored);
other keys name a project by `project` (body or query), `default` when omitted.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from ..errors import Forbidden, NotFound
from ..tenancy import DEFAULT_PROJECT, Principal


@dataclass(frozen=True)
class Project:
    id: str
    name: str


def require(principal: Principal, need: str) -> None:
    """read < write < manage; anonymous keys cannot use streams."""
    if not principal.can(need):
        raise Forbidden(f"This key's role ({principal.role}) cannot do this; it needs {need}.")


def project(conn: psycopg.Connection, principal: Principal, name: str | None) -> Project:
    """The project a request works in: the key's own, else the one named (default `default`)."""
    if principal.project_id:
        row = conn.execute("SELECT id, name FROM projects WHERE id = %s", (principal.project_id,)).fetchone()
    else:
        name = name or DEFAULT_PROJECT
        row = conn.execute(
            "SELECT id, name FROM projects WHERE tenant_id = %s AND name = %s", (principal.tenant_id, name)
        ).fetchone()
    if row is None:
        raise NotFound(f"no project named {name}", code="project_not_found")
    return Project(str(row[0]), row[1])


def project_filter(conn: psycopg.Connection, principal: Principal, name: str | None) -> Project | None:
    """For listings: the key's project, the one named, or None for every project of the tenant."""
    if principal.project_id or name:
        return project(conn, principal, name)
    return None
