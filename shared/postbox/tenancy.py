"""Tenants, projects and API keys. Keys are stored as SHA-256 hashes and resolved once per call.

A key carries a role (`read`, `write`, `manage`, or `anon` for a project's anonymous key), optional
scopes, an optional project, an expiry and a revocation time.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime

from . import db
from .errors import Conflict, Invalid, NotFound

ROLES = ("read", "write", "manage", "anon")
KEY_PREFIX = "pbx_"
DEFAULT_PROJECT = "default"


@dataclass(frozen=True)
class Principal:
    """Who is calling, as the authorizer resolved it from the key."""

    tenant_id: str
    project_id: str | None
    role: str
    key_id: str
    scopes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_anonymous(self) -> bool:
        return self.role == "anon"

    def can(self, need: str) -> bool:
        """Roles are ordered: manage > write > read; `anon` only as the surface allows it."""
        order = {"read": 1, "write": 2, "manage": 3}
        return order.get(self.role, 0) >= order[need]


@dataclass(frozen=True)
class IssuedKey:
    key: str
    key_id: str
    tenant_id: str
    project_id: str | None
    role: str


def hash_key(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def create_tenant(name: str, plan: str = "free") -> str:
    """Create a tenant and its `default` project; returns the tenant id."""
    with db.transaction() as conn:
        row = conn.execute(
            "INSERT INTO tenants (name, plan) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING RETURNING id",
            (name, plan),
        ).fetchone()
        if row is None:
            raise Conflict(f"tenant {name!r} exists")
        conn.execute("INSERT INTO projects (tenant_id, name) VALUES (%s, %s)", (row[0], DEFAULT_PROJECT))
        return str(row[0])


def tenant_id_by_name(name: str) -> str | None:
    with db.transaction() as conn:
        row = conn.execute("SELECT id FROM tenants WHERE name = %s", (name,)).fetchone()
        return str(row[0]) if row else None


def ensure_project(tenant_id: str, name: str) -> str:
    with db.transaction() as conn:
        row = conn.execute(
            "INSERT INTO projects (tenant_id, name) VALUES (%s, %s)"
            " ON CONFLICT (tenant_id, name) DO UPDATE SET name = excluded.name RETURNING id",
            (tenant_id, name),
        ).fetchone()
        return str(row[0])


def create_key(
    tenant_id: str,
    role: str,
    *,
    project: str | None = None,
    name: str = "",
    scopes: tuple[str, ...] = (),
    expires_at: datetime | None = None,
) -> IssuedKey:
    """Issue a new key; the plain key is returned once and only its hash is stored."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}")
    if role == "anon" and project is None:
        project = DEFAULT_PROJECT
    project_id = ensure_project(tenant_id, project) if project else None
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    with db.transaction() as conn:
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
    with db.transaction() as conn:
        cur = conn.execute(
            "UPDATE api_keys SET revoked_at = clock_timestamp() WHERE id::text = %s AND revoked_at IS NULL",
            (key_id,),
        )
        if cur.rowcount == 0:
            raise NotFound(f"no active key {key_id}")


def resolve_key(key: str) -> Principal | None:
    """The principal behind a plain key, or None when it is unknown, expired or revoked."""
    if not key or not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT id, tenant_id, project_id, role, scopes FROM api_keys"
            " WHERE key_hash = %s AND revoked_at IS NULL"
            " AND (expires_at IS NULL OR expires_at > clock_timestamp())",
            (hash_key(key),),
        ).fetchone()
    if row is None:
        return None
    key_id, tenant_id, project_id, role, scopes = row
    return Principal(str(tenant_id), str(project_id) if project_id else None, role, str(key_id), tuple(scopes))
