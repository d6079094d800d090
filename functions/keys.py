"""Who is calling: a request's key resolved to a tenant, project and role inside the surface
function that serves it, so a request costs one Lambda invocation (no authorizer function).

The key comes in `Authorization: Bearer <key>` or `apikey: <key>`. `authenticate(event)` resolves
it (with a short per-container cache) and writes the answer where API Gateway would put a Lambda
authorizer's, `requestContext.authorizer.lambda`, overwriting whatever the event held there: every
surface reads the caller from that one place, decides what an anonymous caller may do (a public
stream is readable without a key) and shapes its own 401 body.

A work API key may be limited to some scopes (the request's path must name one of them) and to
some client addresses (the event's source IP must fall in one of its CIDRs); a request outside its
limits carries `refused` in the answer, which every surface answers 403.
"""

from __future__ import annotations

import re
import threading
import time
from functools import lru_cache
from typing import Any

from postbox import config
from postbox.errors import Unavailable
from postbox.tenancy import KEY_PREFIX, Principal, resolve_key

# Keys resolved lately, each with when its answer expires: those that resolved, and those that did
# not apart, so that a caller trying made-up keys fills only the second; each drops its oldest entry
# when full (insertion order), never the whole cache.
_known: dict[str, tuple[float, Principal]] = {}
_unknown: dict[str, float] = {}
_KNOWN_MAX, _UNKNOWN_MAX = 10_000, 2_000
_cache_lock = threading.Lock()

NO_KEY = "No valid session or key."
BAD_KEY = "Invalid or expired key."


def key_from_headers(headers: dict[str, str] | None) -> str | None:
    """A Postbox key in `Authorization: Bearer` wins; else `apikey`; else whatever bearer came."""
    headers = {str(k).lower(): v for k, v in (headers or {}).items() if isinstance(v, str)}
    auth = headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if bearer.startswith(KEY_PREFIX):
        return bearer
    return headers.get("apikey", "").strip() or bearer or None


def _resolve(key: str) -> Principal | None:
    """Resolve with a short per-container cache (POSTBOX_KEY_CACHE_SECONDS, 30 by default), so a warm
    function rarely touches the database for the key; a revoked key is refused within that time."""
    now = time.monotonic()
    hit = _known.get(key)
    if hit and hit[0] > now:
        return hit[1]
    if _unknown.get(key, 0.0) > now:
        return None
    # A key is ASCII (`pbx_` and URL-safe base64): anything else is unknown without a lookup.
    principal = resolve_key(key) if key.isascii() else None
    until = now + config.settings().key_cache_seconds
    with _cache_lock:
        if principal is None:
            _remember(_unknown, key, until, _UNKNOWN_MAX)
        else:
            _remember(_known, key, (until, principal), _KNOWN_MAX)
    return principal


def _remember(cache: dict[str, Any], key: str, value: Any, most: int) -> None:
    cache.pop(key, None)
    while len(cache) >= most:
        del cache[next(iter(cache))]  # the oldest
    cache[key] = value


def clear_cache() -> None:
    with _cache_lock:
        _known.clear()
        _unknown.clear()


WORK_MOUNT = "/v1/modules/scaiqueue"
_SCOPE_IN_PATH = re.compile(re.escape(WORK_MOUNT) + r"/scopes/([^/]+)")
# Paths a key limited to some scopes may use without naming one: who it is.
_SCOPELESS = {WORK_MOUNT + "/whoami"}


@lru_cache(maxsize=1024)
def _networks(cidrs: tuple[str, ...]) -> tuple[Any, ...]:
    import ipaddress  # only a key limited to some addresses needs it

    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def refusal(principal: Principal, path: str | None, source_ip: str | None) -> str | None:
    """Why a key's own limits refuse this request (None: they do not): the scope its path names
    must be one of the key's `allowed_scopes`, its source address in one of its `ip_allowlist` CIDRs."""
    if principal.ip_allowlist is not None:
        import ipaddress

        try:
            address = ipaddress.ip_address(source_ip or "")
        except ValueError:
            return "This key is limited to some client addresses, and the request's is unknown."
        if not any(address in net for net in _networks(principal.ip_allowlist)):
            return f"This key is not allowed from {address}."
    if principal.allowed_scopes is not None and (path or "") not in _SCOPELESS:
        found = _SCOPE_IN_PATH.match(path or "")
        if found is None:
            return "This key is limited to some scopes and may only call routes under them."
        if not principal.allows_scope(found.group(1)):
            return "This key is not allowed in this scope."
    return None


def resolve(headers: dict[str, str] | None, path: str | None = None, source_ip: str | None = None) -> dict[str, Any]:
    """The answer for a request with these headers, path and client address: `authenticated`, and
    the principal or the reason it is not one (`reason`, `refused`, or `unavailable` when the
    database could not be asked: the surface answers its 503, and nothing is cached)."""
    key = key_from_headers(headers)
    if not key:
        return {"authenticated": False, "reason": NO_KEY}
    try:
        principal = _resolve(key)
    except Unavailable as down:
        return {"authenticated": False, "unavailable": down.message}
    if principal is None:
        return {"authenticated": False, "reason": BAD_KEY}
    refused = refusal(principal, path, source_ip)
    return {
        **({"refused": refused} if refused else {}),
        "authenticated": True,
        "tenant_id": principal.tenant_id,
        "project_id": principal.project_id or "",
        "role": principal.role,
        "key_id": principal.key_id,
        "scopes": ",".join(principal.scopes),
        "subject_type": principal.subject_type,
        "subject_id": principal.subject_id,
        **({"lineage": ",".join(principal.lineage)} if principal.lineage else {}),  # keys it descends from
        **_limits(principal),
    }


def _limits(principal: Principal) -> dict[str, str]:
    """The key's own limits, each only when it has it, so the key operations can hold the keys it
    mints, rotates or revokes within them (`postbox.key_power`)."""
    found = {}
    if principal.allowed_scopes is not None:
        found["allowed_scopes"] = ",".join(principal.allowed_scopes)
    if principal.ip_allowlist is not None:
        found["ip_allowlist"] = ",".join(principal.ip_allowlist)
    if principal.expires_at is not None:
        found["expires_at"] = principal.expires_at.isoformat()
    return found


def authenticate(event: Any) -> None:
    """Resolve an API Gateway (payload 2.0) event's key and write the answer into the event, at
    `requestContext.authorizer.lambda`; any other event is left as it is."""
    context = event.get("requestContext") if isinstance(event, dict) else None
    if not isinstance(context, dict):
        return
    http = context.get("http") if isinstance(context.get("http"), dict) else {}
    headers = event.get("headers") if isinstance(event.get("headers"), dict) else None
    path = event.get("rawPath") if isinstance(event.get("rawPath"), str) else None
    source_ip = http.get("sourceIp") if isinstance(http.get("sourceIp"), str) else None
    context["authorizer"] = {"lambda": resolve(headers, path, source_ip)}
