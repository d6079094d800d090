"""Tenants, projects and API keys. Keys are stored as SHA-256 hashes and resolved once per call.

A key carries a role (`read`, `write`, `manage`, or `anon` for a project's anonymous key), optional
scopes, an optional project, an expiry and a revocation time.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import NamedTuple

import psycopg

from . import cells, db, directory, limits, names
from .errors import Conflict, Forbidden, Invalid, NotFound, Unauthorized

ROLES = ("read", "write", "manage", "anon")
WORK_ROLE = "work"  # a work API key's role: no tenant role, only its allowed operations
ROLE_RANK = {"read": 1, "write": 2, "manage": 3}
# Explicit operations a surface checks, and the least role that holds each when the key names no
# operations of its own (a key's `scopes` grant operations one by one).
OPERATION_ROLES: dict[str, str] = {
    "scaiqueue:view": "read",
    "scaiqueue:publish": "write",
    "scaiqueue:consume": "write",
    "scaiqueue:manage": "manage",
}
KEY_PREFIX = "pbx_"
DEFAULT_PROJECT = "default"


class Principal(NamedTuple):
    """Who is calling, as the authorizer resolved it from the key."""

    tenant_id: str
    project_id: str | None
    role: str
    key_id: str
    scopes: tuple[str, ...] = ()
    # Who the key speaks for, as ACLs, audit and erasure name it: a tenant key is its own subject
    # (`api_key`, its id); a work API key names the user, agent or service it was minted for.
    subject_type: str = "api_key"
    subject_id: str = ""
    # A work API key's limits, which the authorizer applies to each request (None: no limit).
    allowed_scopes: tuple[str, ...] | None = None
    ip_allowlist: tuple[str, ...] | None = None
    # When the key stops working (None: never); no key it mints may outlive it.
    expires_at: datetime | None = None
    # The ids of the keys this one descends from (the key that minted it, then that key's lineage):
    # a `deny` ACL entry naming any of them binds this key too, so minting never escapes one.
    lineage: tuple[str, ...] = ()

    @property
    def is_work_key(self) -> bool:
        return self.role == WORK_ROLE

    @property
    def actor(self) -> tuple[str, str]:
        """(actor_type, actor_id): the one identity ACL entries, audit events and erasure match on."""
        return self.subject_type, self.subject_id or self.key_id

    @property
    def is_anonymous(self) -> bool:
        return self.role == "anon"

    def allows_scope(self, scope_id: str) -> bool:
        """Whether a work scope is one this key may act in: any, unless the key names `allowed_scopes`."""
        return self.allowed_scopes is None or scope_id.lower() in {s.lower() for s in self.allowed_scopes}

    def can(self, need: str) -> bool:
        """`need` is a role (manage > write > read; `anon` holds none) or an operation such as
        `scaiqueue:publish`, held when the key's scopes name it or its role reaches the operation's."""
        if need not in ROLE_RANK:
            if need in self.scopes:
                return True
            need = OPERATION_ROLES[need]
        return ROLE_RANK.get(self.role, 0) >= ROLE_RANK[need]


def require(principal: Principal | None, need: str, *, what: str = "this", anonymous: bool = False) -> str:
    """The one permission check of every surface; returns the caller's tenant id.

    No key is 401; an anonymous key is 401 unless the surface lets anonymous callers do this
    (`anonymous=True`, and then the surface applies its own rule on the resource); a role or
    operation the key lacks is 403.
    """
    if principal is None:
        raise Unauthorized("A valid key is required.")
    if principal.is_anonymous:
        if anonymous:
            return principal.tenant_id
        raise Unauthorized(f"This key cannot use {what}.")
    if not principal.can(need):
        raise Forbidden(f"This key's role ({principal.role}) cannot do this; it needs {need}.")
    return principal.tenant_id


class IssuedKey(NamedTuple):
    key: str
    key_id: str
    tenant_id: str
    project_id: str | None
    role: str


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def create_tenant(name: str, plan: str = "free", cell: str | None = None) -> str:
    """Create a tenant and its `default` project on the cell named, or the one with the most room
    (`postbox.directory`); returns the tenant id. Its name is unique across cells (Conflict)."""
    tenant_id, home = directory.place(name, cell)
    try:
        with cells.use(home), db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO tenants (id, name, plan) VALUES (%s, %s, %s) ON CONFLICT (name) DO NOTHING RETURNING id",
                (tenant_id, name, plan),
            ).fetchone()
            if row is None:  # a tenant from before the directory holds the name
                raise Conflict(f"tenant {name!r} exists")
            conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, %s)", (row[0], DEFAULT_PROJECT))
    except BaseException:
        directory.release(tenant_id)
        raise
    return tenant_id


def set_plan(tenant: str, plan: str) -> dict:
    """Put the tenant (a name or an id) on the plan named: its limits hold from the next request on.
    What it already has is kept when the new plan allows less: only new creations are refused.
    It runs on the tenant's cell, whose `plans` are the ones that count for it."""
    with on_tenant(tenant) as tenant_id, db.transaction() as conn:
        if conn.execute("SELECT 1 FROM plans WHERE name = %s", (plan,)).fetchone() is None:
            known = [r[0] for r in conn.execute("SELECT name FROM plans ORDER BY name")]
            raise Invalid(f"no plan named {plan!r}; one of {', '.join(known)}", code="plan")
        name = conn.execute("UPDATE tenants SET plan = %s WHERE id = %s RETURNING name",
                            (plan, tenant_id)).fetchone()[0]
    return {"tenant_id": tenant_id, "name": name, "plan": plan}


_default_projects: dict[str, str] = {}


def find_project(conn: psycopg.Connection, tenant_id: str, name: str | None = None) -> tuple[str, str]:
    """(id, name) of the tenant's project `name`, `default` when no name; NotFound when missing."""
    name = name or DEFAULT_PROJECT
    row = conn.execute(
        "SELECT id::text FROM projects WHERE tenant_id = %s AND name = %s", (tenant_id, name)
    ).fetchone()
    if row is None:
        raise NotFound(f"no project named {name}", code="project_not_found")
    return row[0], name


def project_id(principal: Principal) -> str:
    """The project a key works in: its own, else its tenant's `default` (looked up once per process:
    a project is never renamed or removed while its tenant lives)."""
    if principal.project_id:
        return principal.project_id
    tenant_id = principal.tenant_id
    if tenant_id not in _default_projects:
        with db.connection() as conn:
            _default_projects[tenant_id] = find_project(conn, tenant_id)[0]
    return _default_projects[tenant_id]


def tenant_id_by_name(name: str) -> str | None:
    """The id of the tenant named, on whichever cell it is (the directory knows; a tenant from
    before the directory is on the first cell)."""
    if cells.several():
        found = directory.tenant_id_by_name(name)
        if found is not None:
            return found
    with cells.use(cells.default()), db.transaction() as conn:
        row = conn.execute("SELECT id FROM tenants WHERE name = %s", (name,)).fetchone()
        return str(row[0]) if row else None


def tenant_id_of(tenant: str) -> str:
    """The id of the tenant an operator names by its name or its id, on whichever cell it is
    (NotFound when no cell has it)."""
    found = tenant_id_by_name(tenant)
    if found is not None:
        return found
    try:
        tenant_id = str(uuid.UUID(tenant))
    except ValueError:
        raise NotFound(f"no tenant {tenant!r}") from None
    with directory.at(tenant_id), db.connection() as conn:
        if conn.execute("SELECT 1 FROM tenants WHERE id = %s", (tenant_id,)).fetchone() is None:
            raise NotFound(f"no tenant {tenant!r}")
    return tenant_id


@contextmanager
def on_tenant(tenant: str) -> Iterator[str]:
    """Run the block on the cell of the tenant named by its name or id (an operator's command, which
    no request routed); yields its id. NotFound when no cell has it."""
    tenant_id = tenant_id_of(tenant)
    with directory.at(tenant_id):
        yield tenant_id


def tenant_name(tenant_id: str) -> str | None:
    with db.transaction() as conn:
        row = conn.execute("SELECT name FROM tenants WHERE id = %s", (tenant_id,)).fetchone()
        return row[0] if row else None


def create_project(tenant_id: str, name: str) -> str:
    """A new project of the tenant, within the plan's projects; its name is unique in the tenant (409
    when taken)."""
    names.PROJECT.check(name)
    with db.transaction() as conn:
        limits.check(conn, tenant_id, limits.PROJECTS)
        row = conn.execute(
            "INSERT INTO projects (tenant_id, name) VALUES (%s, %s) ON CONFLICT (tenant_id, name) DO NOTHING"
            " RETURNING id::text",
            (tenant_id, name),
        ).fetchone()
    if row is None:
        raise Conflict(f"a project named {name} already exists", code="project_exists")
    return row[0]


def list_projects(tenant_id: str) -> list[dict]:
    with db.transaction() as conn:
        cur = conn.execute("SELECT id::text, name, created_at FROM projects WHERE tenant_id = %s ORDER BY name",
                           (tenant_id,))
        return [{"project_id": i, "name": n, "created_at": c} for i, n, c in cur]


def ensure_project(tenant_id: str, name: str, conn: psycopg.Connection | None = None) -> str:
    """The id of the tenant's project `name`, made if it is missing (in `conn`'s transaction if given),
    within the plan's projects (LimitExceeded max_projects; a project that exists is never refused).
    A project made by being named follows the name rule `create_project` does."""
    names.PROJECT.check(name, "project")
    if conn is None:
        with db.transaction() as own:
            return ensure_project(tenant_id, name, own)
    with db.domain_errors():
        return str(conn.execute("SELECT project_ensure(%s, %s)", (tenant_id, name)).fetchone()[0])


def create_key(
    tenant_id: str,
    role: str,
    *,
    project: str | None = None,
    name: str = "",
    scopes: tuple[str, ...] = (),
    expires_at: datetime | None = None,
) -> IssuedKey:
    """Issue a new key, within the plan's keys (and projects, when it names one the tenant does not
    have: it is made with the key); the plain key is returned once and only its hash is stored."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}")
    if role == "anon" and project is None:
        project = DEFAULT_PROJECT
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with db.transaction() as conn:
        project_id = ensure_project(tenant_id, project, conn) if project else None
        limits.check(conn, tenant_id, limits.API_KEYS)
        row = conn.execute(
            "INSERT INTO api_keys (tenant_id, project_id, name, prefix, key_hash, role, scopes, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (tenant_id, project_id, name, key[:10], hash_key(key), role, list(scopes), expires_at),
        ).fetchone()
    return IssuedKey(key, str(row[0]), tenant_id, project_id, role)


def list_keys(tenant_id: str) -> list[dict]:
    with db.transaction() as conn:
        cur = conn.execute(
            "SELECT k.id, k.name, k.prefix, k.role, k.scopes, p.name, k.expires_at, k.revoked_at, k.created_at"
            " FROM api_keys k LEFT JOIN projects p ON p.id = k.project_id"
            " WHERE k.tenant_id = %s ORDER BY k.created_at",
            (tenant_id,),
        )
        cols = ("key_id", "name", "prefix", "role", "scopes", "project", "expires_at", "revoked_at", "created_at")
        return [dict(zip(cols, row, strict=True)) for row in cur]


def revoke_key(key_id: str) -> None:
    """Revoke the key on whichever cell holds it (it lives with its tenant)."""
    if cells.first(lambda: _revoke_here(key_id)) is None:
        raise NotFound(f"no active key {key_id}")


def _revoke_here(key_id: str) -> bool | None:
    with db.transaction() as conn:
        cur = conn.execute(
            "UPDATE api_keys SET revoked_at = clock_timestamp() WHERE id::text = %s AND revoked_at IS NULL",
            (key_id,),
        )
    return True if cur.rowcount else None


_RESOLVE = """
SELECT id, tenant_id, project_id, role, scopes, subject_type, subject_id, allowed_scopes::text[], ip_allowlist,
       expires_at, lineage::text[]
FROM api_keys
WHERE (key_hash = %(h)s OR (previous_hash = %(h)s AND previous_valid_until > clock_timestamp()))
  AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > clock_timestamp())
"""


def _resolve_row(key: str) -> tuple | None:
    with db.transaction() as conn:
        return conn.execute(_RESOLVE, {"h": hash_key(key)}).fetchone()


def resolve_key(key: str) -> Principal | None:
    """The principal behind a plain key, or None when it is unknown, expired or revoked. One query for
    every kind of key; a rotated work key's previous secret is found until its grace period ends."""
    if not key or not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    row = cells.first(lambda: _resolve_row(key))
    if row is None:
        return None
    (key_id, tenant_id, project_id, role, scopes, subject_type, subject_id, allowed_scopes, ip_allowlist, expires,
     lineage) = row
    return Principal(str(tenant_id), str(project_id) if project_id else None, role, str(key_id), tuple(scopes),
                     subject_type=subject_type or "api_key", subject_id=subject_id or "",
                     allowed_scopes=None if allowed_scopes is None else tuple(allowed_scopes),
                     ip_allowlist=None if ip_allowlist is None else tuple(ip_allowlist), expires_at=expires,
                     lineage=tuple(lineage))
