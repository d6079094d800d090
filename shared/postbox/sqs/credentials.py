"""SQS credentials: an access key id and a secret access key minted for a tenant (and project) with
a role. SigV4 needs the secret itself to check a signature, so it is stored sealed with the payload
key ring (AES-256-GCM, the key ring's current key) and opened only to verify; it is shown once.

A credential may expire. It is minted, listed and revoked only within the power of the key that
asks (its role, project and expiry: `postbox.key_power`).

Roles map onto SQS actions as the tenant roles do everywhere: read (receive-side reads of queues
and their attributes), write (send, receive, delete, change visibility), manage (create, delete,
purge, attributes, tags, move tasks).
"""

from __future__ import annotations

import secrets
import threading
import time
from datetime import datetime
from typing import Any, NamedTuple

from .. import cells, config, db, key_power, limits, tenancy
from ..errors import Invalid, NotFound
from ..partitioned import payloads
from ..tenancy import Principal

ROLES = ("read", "write", "manage")
PREFIX = "PBSQ"  # 20 characters, as AWS access key ids are
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"


class Credential(NamedTuple):
    principal: Principal
    secret: str


def _access_key_id() -> str:
    return PREFIX + "".join(secrets.choice(_ALPHABET) for _ in range(16))


def mint(tenant_id: str, role: str = "write", *, project: str | None = None, project_id: str | None = None,
         name: str = "", expires_in_days: int | None = None, expires_at: datetime | str | None = None,
         caller: Principal | None = None) -> dict[str, Any]:
    """A new credential (for the project named, or by id, else the caller's own project, else the
    tenant's `default`); the secret is in the answer once and stored only sealed. `caller` is the
    key minting it, which must hold its role, project and expiry (`postbox.key_power`); None is
    `postbox admin`."""
    if role not in ROLES:
        raise Invalid(f"role must be one of {', '.join(ROLES)}", code="role")
    access_key_id, secret = _access_key_id(), secrets.token_urlsafe(30)[:40]
    with db.transaction() as conn:
        limits.check(conn, tenant_id, limits.SQS_CREDENTIALS)
        if project:
            project_id = tenancy.ensure_project(tenant_id, project, conn)
        elif project_id is None and caller is not None:
            project_id = caller.project_id
        expires = key_power.new_expiry(conn, expires_in_days, expires_at)
        power = key_power.sqs_credential(role, project_id or tenancy.find_project(conn, tenant_id)[0], expires)
        key_power.require_within(caller, power, "mint")
        conn.execute(
            "INSERT INTO sqs_credentials (access_key_id, tenant_id, project_id, role, secret_sealed, name, expires_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (access_key_id, tenant_id, project_id, role, payloads.seal(secret.encode()), name, expires),
        )
    return {"access_key_id": access_key_id, "secret_access_key": secret, "role": role,
            "project_id": project_id, "name": name, "expires_at": _iso(expires)}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when else None


# A credential's project, the tenant's `default` where it names none, and its other fields.
_ROWS = """SELECT c.access_key_id, c.role, p.id::text, p.name, c.name, c.created_at, c.revoked_at, c.expires_at
FROM sqs_credentials c
JOIN projects p ON p.tenant_id = c.tenant_id AND (p.id = c.project_id OR (c.project_id IS NULL AND p.name = %s))
WHERE c.tenant_id = %s"""


def _power(row: tuple) -> dict[str, Any]:
    return key_power.sqs_credential(row[1], row[2], row[7])


def list_credentials(tenant_id: str, caller: Principal | None = None) -> list[dict[str, Any]]:
    """A tenant's credentials within the caller's power (all of them for a full-power key), without
    their secrets."""
    with db.transaction() as conn:
        rows = conn.execute(_ROWS + " ORDER BY c.created_at", (tenancy.DEFAULT_PROJECT, tenant_id)).fetchall()
    return [{"access_key_id": r[0], "role": r[1], "project": r[3], "name": r[4], "created_at": r[5].isoformat(),
             "revoked_at": _iso(r[6]), "expires_at": _iso(r[7])}
            for r in rows if key_power.within(caller, _power(r))]


def revoke(tenant_id: str, access_key_id: str, caller: Principal | None = None) -> dict[str, Any]:
    """Revoke a credential of the tenant (404 for any other), if it is within the caller's power
    (403 otherwise: no key ends a more powerful one)."""
    with db.transaction() as conn:
        row = conn.execute(_ROWS + " AND c.access_key_id = %s FOR UPDATE OF c",
                           (tenancy.DEFAULT_PROJECT, tenant_id, access_key_id)).fetchone()
        if row is None:
            raise NotFound("No such SQS credential.")
        key_power.require_within(caller, _power(row), "revoke")
        conn.execute("UPDATE sqs_credentials SET revoked_at = coalesce(revoked_at, clock_timestamp())"
                     " WHERE access_key_id = %s", (access_key_id,))
    _cache.pop(access_key_id, None)
    return {"revoked": access_key_id}


# ---- resolving a request's credential -------------------------------------------------------

_cache: dict[str, tuple[float, Credential | None]] = {}
_lock = threading.Lock()


def _credential_row(access_key_id: str) -> tuple | None:
    with db.transaction() as conn:
        return conn.execute(
            "SELECT tenant_id, project_id, role, secret_sealed FROM sqs_credentials WHERE access_key_id = %s"
            " AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > clock_timestamp())",
            (access_key_id,),
        ).fetchone()


def resolve(access_key_id: str) -> Credential | None:
    """The credential behind an access key id (None: unknown or revoked), remembered for
    POSTBOX_KEY_CACHE_SECONDS as API keys are, so a warm function rarely asks the database."""
    if not access_key_id.startswith(PREFIX) or len(access_key_id) != 20:
        return None
    now = time.monotonic()
    hit = _cache.get(access_key_id)
    if hit and hit[0] > now:
        return hit[1]
    row = cells.first(lambda: _credential_row(access_key_id))  # it lives with its tenant, on any cell
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
