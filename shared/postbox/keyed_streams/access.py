"""Who may do what, and which project a request is about.

A key bound to a project always works in that project (a `project` the caller names is ignored);
other keys name a project by `project` (body or query), `default` when omitted.
"""

from __future__ import annotations

from typing import NamedTuple

import psycopg

from .. import tenancy
from ..errors import NotFound
from ..tenancy import Principal


class Project(NamedTuple):
    id: str
    name: str


def require(principal: Principal, need: str) -> None:
    """The shared check: read < write < manage; anonymous keys cannot use keyed streams."""
    tenancy.require(principal, need, what="keyed streams")


def project(conn: psycopg.Connection, principal: Principal, name: str | None) -> Project:
    """The project a request works in: the key's own, else the one named (default `default`)."""
    if principal.project_id:
        row = conn.execute("SELECT id::text, name FROM projects WHERE id = %s", (principal.project_id,)).fetchone()
        if row is None:
            raise NotFound("the key's project no longer exists", code="project_not_found")
        return Project(*row)
    return Project(*tenancy.find_project(conn, principal.tenant_id, name))


def project_filter(conn: psycopg.Connection, principal: Principal, name: str | None) -> Project | None:
    """For listings: the key's project, the one named, or None for every project of the tenant."""
    if principal.project_id or name:
        return project(conn, principal, name)
    return None
