"""SQS credentials: an access key id and a secret access key minted for a tenant (and project) with
a role. SigV4 needs the secret itself to check a signature, so it is stored sealed with the payload
key ring (AES-256-GCM, the key ring's current key) and opened only to verify; it is shown once.

Roles map onto SQS actions as the tenant roles do everywhere: read (receive-side reads of queues
and their attributes), write (send, receive, delete, change visibility), manage (create, delete,
purge, attributes, tags, move tasks).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from .. import config, db, limits, tenancy
from ..errors import Invalid, NotFound
from ..partitioned import payloads
from ..tenancy import Principal

ROLES = ("read", "write", "manage")
PREFIX = "PBSQ"  # 20 characters, as AWS access key ids are
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


@dataclass(frozen=True)
class Credential:
    principal: Principal
    secret: str


def _access_key_id() -> str:
    return PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def mint(tenant_id: str, role: str = "write", *, project: str | None = None, project_id: str | None = None,
         name: str = "") -> dict[str, Any]:
    """A new credential (for the project named, or by id, else the tenant's `default`), within the
    plan's credentials; the secret is in the answer once and stored only sealed."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}", code="role")
    if project:
        project_id = tenancy.ensure_project(tenant_id, project)
    access_key_id, secret = _access_key_id(), secrets.token_urlsafe(30)[:40]
    with db.transaction() as conn:
        limits.check(conn, tenant_id, limits.SQS_CREDENTIALS)
        conn.execute(
            "INSERT INTO sqs_credentials (access_key_id, tenant_id, project_id, role, secret_sealed, name)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (access_key_id, tenant_id, project_id, role, payloads.seal(secret.encode()), name),
        )
    return {"access_key_id": access_key_id, "secret_access_key": secret, "role": role,
            "project_id": project_id, "name": name}


def list_credentials(tenant_id: str) -> list[dict[str, Any]]:
    """A tenant's credentials without their secrets."""
    with db.transaction() as conn:
        rows = conn.execute(
            "SELECT c.access_key_id, c.role, coalesce(p.name, %s), c.name, c.created_at, c.revoked_at"
            " FROM sqs_credentials c LEFT JOIN projects p ON p.id = c.project_id"
            " WHERE c.tenant_id = %s ORDER BY c.created_at",
            (tenancy.DEFAULT_PROJECT, tenant_id),
        ).fetchall()
    return [{"access_key_id": r[0], "role": r[1], "project": r[2], "name": r[3],
             "created_at": r[4].isoformat(), "revoked_at": r[5].isoformat() if r[5] else None} for r in rows]


def revoke(tenant_id: str, access_key_id: str) -> dict[str, Any]:
    with db.transaction() as conn:
        row = conn.execute(
            "UPDATE sqs_credentials SET revoked_at = coalesce(revoked_at, clock_timestamp())"
            " WHERE tenant_id = %s AND access_key_id = %s RETURNING access_key_id",
            (tenant_id, access_key_id),
        ).fetchone()
    if row is None:
        raise NotFound("No such SQS credential.")
    _cache.pop(access_key_id, None)
    return {"revoked": access_key_id}


# ---- resolving a request's credential -------------------------------------------------------

_cache: dict[str, tuple[float, Credential | None]] = {}
_lock = threading.Lock()


def resolve(access_key_id: str) -> Credential | None:
    """The credential behind an access key id (None: unknown or revoked), remembered for
    POSTBOX_KEY_CACHE_SECONDS as API keys are, so a warm function rarely asks the database."""
    if not access_key_id.startswith(PREFIX) or len(access_key_id) != 20:
        return None
    now = time.monotonic()
    hit = _cache.get(access_key_id)
    if hit and hit[0] > now:
        return hit[1]
    with db.transaction() as conn:
        row = conn.execute(
            "SELECT tenant_id, project_id, role, secret_sealed FROM sqs_credentials"
            " WHERE access_key_id = %s AND revoked_at IS NULL",
            (access_key_id,),
        ).fetchone()
    found = None
    if row is not None:
        principal = Principal(str(row[0]), str(row[1]) if row[1] else None, row[2], access_key_id,
                              subject_type="sqs_credential", subject_id=access_key_id)
        found = Credential(principal, payloads.open_envelope(row[3]).decode())
    with _lock:
        if len(_cache) > 10_000:
            _cache.clear()
        _cache[access_key_id] = (now + config.settings().key_cache_seconds, found)
    return found


def clear_cache() -> None:
    _cache.clear()
