"""The one rule of every key operation: no key creates or obtains more power than it holds.

A caller may mint a key, rotate one (and so read its new secret), revoke one, see one in a list or
mint an SQS credential only when that key's power is within the caller's own, field by field:

- `allowed_operations`: each one held by the caller (its role reaches it or it names it);
- `role`: reached by the caller's role;
- `project`: the caller's own, when the caller is bound to one (None: every project);
- `allowed_scopes`: each one among the caller's, when the caller is limited to some (None: all);
- `subject`: the caller's own, when the caller is a work key (it speaks for one subject only);
- `ip_allowlist`: each network inside one of the caller's, when the caller has a list (None: any);
- `expires_at`: no later than the caller's, when the caller expires (None: never).

A key describes only the fields its kind has (a work key has no role, an SQS credential no
subject), as a mapping from these names to values. A caller of None is `postbox admin`, which holds
every power; a tenant key with no project and no expiry passes every rule by itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

import psycopg

from .errors import Forbidden, Unprocessable
from .tenancy import ROLE_RANK, Principal

Power = Mapping[str, Any]


@lru_cache(maxsize=1024)
def _networks(cidrs: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def _when(value: datetime | str | None) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _operations(caller: Principal, operations: Iterable[str]) -> str | None:
    beyond = sorted(op for op in set(operations) if not caller.can(op))
    return f"names {', '.join(beyond)}, which this key does not hold" if beyond else None


def _role(caller: Principal, role: str) -> str | None:
    if ROLE_RANK.get(caller.role, 0) >= ROLE_RANK[role]:
        return None
    return f"is {role}, above this key's role ({caller.role})"


def _project(caller: Principal, project_id: str | None) -> str | None:
    if caller.project_id is None or project_id == caller.project_id:
        return None
    return "is not this key's project" if project_id else "is every project, and this key is bound to one"


def _scopes(caller: Principal, scopes: Iterable[str] | None) -> str | None:
    if caller.allowed_scopes is None:
        return None
    if scopes is None:
        return "is every scope, and this key is limited to some"
    own = {s.lower() for s in caller.allowed_scopes}
    beyond = sorted(s for s in scopes if s.lower() not in own)
    return f"names {', '.join(beyond)}, outside this key's allowed_scopes" if beyond else None


def _subject(caller: Principal, subject: tuple[str, str]) -> str | None:
    if not caller.is_work_key or tuple(subject) == caller.actor:
        return None
    return f"is {subject[0]}:{subject[1]}, and this key speaks only for {caller.actor[0]}:{caller.actor[1]}"


def _addresses(caller: Principal, allowlist: Iterable[str] | None) -> str | None:
    if caller.ip_allowlist is None:
        return None
    if allowlist is None:
        return "is any address, and this key is limited to some"
    own = _networks(tuple(caller.ip_allowlist))
    beyond = [str(net) for net in _networks(tuple(allowlist))
              if not any(net.version == mine.version and net.subnet_of(mine) for mine in own)]
    return f"names {', '.join(beyond)}, outside this key's ip_allowlist" if beyond else None


def _expiry(caller: Principal, expires_at: datetime | str | None) -> str | None:
    if caller.expires_at is None:
        return None
    when = _when(expires_at)
    if when is None:
        return f"is never, and this key expires at {caller.expires_at.isoformat()}"
    if when > caller.expires_at:
        return f"is {when.isoformat()}, after this key's ({caller.expires_at.isoformat()})"
    return None


_RULES: dict[str, Callable[[Principal, Any], str | None]] = {
    "allowed_operations": _operations,
    "role": _role,
    "project": _project,
    "allowed_scopes": _scopes,
    "subject": _subject,
    "ip_allowlist": _addresses,
    "expires_at": _expiry,
}


def beyond(caller: Principal | None, power: Power) -> tuple[str, str] | None:
    """(field, why) of the first field of `power` beyond the caller's own; None when all are within."""
    if caller is None:
        return None
    for field, value in power.items():
        why = _RULES[field](caller, value)
        if why is not None:
            return field, why
    return None


def within(caller: Principal | None, power: Power) -> bool:
    return beyond(caller, power) is None


def require_within(caller: Principal | None, power: Power, doing: str) -> None:
    """403 naming the first field of `power` beyond the caller's (`doing`: "mint", "rotate", ...)."""
    found = beyond(caller, power)
    if found is not None:
        field, why = found
        raise Forbidden(f"This key cannot {doing} a key beyond its own power: {field} {why}.", field=field)


def work_key(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A work key's power, from its metadata as the work surface answers it."""
    return {"allowed_operations": doc["allowed_operations"], "allowed_scopes": doc["allowed_scopes"],
            "subject": (doc["subject_type"], doc["subject_id"]), "ip_allowlist": doc["ip_allowlist"],
            "expires_at": doc["expires_at"]}


def sqs_credential(role: str, project_id: str, expires_at: datetime | None) -> dict[str, Any]:
    """An SQS credential's power: its role in one project (a credential is never tenant-wide)."""
    return {"role": role, "project": project_id, "expires_at": expires_at}


def new_expiry(conn: psycopg.Connection, days: int | None, at: datetime | str | None) -> datetime | None:
    """When a key minted now expires: in `days` days, or at `at` (422 naming it unless it is later
    than now), or never; by the database's clock, as every expiry is read."""
    if days is None and at is None:
        return None
    if days is not None and at is not None:
        raise Unprocessable("expires_at: give expires_in_days or expires_at, not both",
                            fields=[{"field": "expires_at", "message": "give expires_in_days or expires_at, not both"}])
    when, later = conn.execute(
        "SELECT coalesce(%(at)s::timestamptz, clock_timestamp() + make_interval(days => %(days)s::int)),"
        " coalesce(%(at)s::timestamptz > clock_timestamp(), true)", {"at": _when(at), "days": days}).fetchone()
    if not later:
        raise Unprocessable("expires_at: must be later than now",
                            fields=[{"field": "expires_at", "message": "must be later than now"}])
    return when
