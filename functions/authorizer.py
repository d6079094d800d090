"""The REQUEST authorizer (HTTP API, payload 2.0, simple responses).

It resolves the key (`Authorization: Bearer <key>` or `apikey: <key>`) to a tenant, project and
role, and always answers isAuthorized=true with that answer in the context: each surface decides
what an anonymous caller may do (a public stream is readable without a key) and shapes its own
401 body, which API Gateway's bare 403 for a denied request could not do.

A work API key may be limited to some scopes (the request's path must name one of them) and to
some client addresses (the event's source IP must fall in one of its CIDRs); a request outside its
limits carries `refused` in the context, which every surface answers 403.
"""

from __future__ import annotations

import ipaddress
import re
import time
from functools import lru_cache
from typing import Any

from functions.observability import instrument
from postbox import config
from postbox.errors import Unavailable
from postbox.tenancy import KEY_PREFIX, Principal, resolve_key

logger, metrics, lambda_handler = instrument("authorizer")

_cache: dict[str, tuple[float, Principal | None]] = {}


def key_from_headers(headers: dict[str, str] | None) -> str | None:
    """A Postbox key in `Authorization: Bearer` wins; else `apikey`; else whatever bearer came."""
    headers = {k.lower(): v for k, v in (headers or {}).items()}
    auth = headers.get("authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    if bearer.startswith(KEY_PREFIX):
        return bearer
    return headers.get("apikey", "").strip() or bearer or None


def _resolve(key: str) -> Principal | None:
    """Resolve with a short per-container cache (POSTBOX_KEY_CACHE_SECONDS, 30 by default), so a warm
    authorizer rarely touches the DB; a revoked key is therefore refused within that time."""
    now = time.monotonic()
    hit = _cache.get(key)
    if hit and hit[0] > now:
        return hit[1]
    principal = resolve_key(key)
    if len(_cache) > 10_000:
        _cache.clear()
    _cache[key] = (now + config.settings().key_cache_seconds, principal)
    return principal


def clear_cache() -> None:
    _cache.clear()


WORK_MOUNT = "/v1/modules/scaiqueue"
_SCOPE_IN_PATH = re.compile(re.escape(WORK_MOUNT) + r"/scopes/([^/]+)")
# Paths a key limited to some scopes may use without naming one: who it is.
_SCOPELESS = {WORK_MOUNT + "/whoami"}


@lru_cache(maxsize=1024)
def _networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def refusal(principal: Principal, path: str | None, source_ip: str | None) -> str | None:
    """Why a key's own limits refuse this request (None: they do not): the scope its path names
    must be one of the key's `allowed_scopes`, its source address in one of its `ip_allowlist` CIDRs."""
    if principal.ip_allowlist is not None:
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
        if found.group(1).lower() not in {s.lower() for s in principal.allowed_scopes}:
            return "This key is not allowed in this scope."
    return None


def authorize(headers: dict[str, str] | None, path: str | None = None, source_ip: str | None = None) -> dict[str, Any]:
    """The simple-response answer for a request with these headers, path and client address."""
    key = key_from_headers(headers)
    if not key:
        return {"isAuthorized": True, "context": {"authenticated": False, "reason": "No valid session or key."}}
    try:
        principal = _resolve(key)
    except Unavailable as down:  # the surface answers its 503 in its own envelope (nothing is cached)
        return {"isAuthorized": True, "context": {"authenticated": False, "unavailable": down.message}}
    if principal is None:
        return {"isAuthorized": True, "context": {"authenticated": False, "reason": "Invalid or expired key."}}
    refused = refusal(principal, path, source_ip)
    return {
        "isAuthorized": True,
        "context": {
            **({"refused": refused} if refused else {}),
            "authenticated": True,
            "tenant_id": principal.tenant_id,
            "project_id": principal.project_id or "",
            "role": principal.role,
            "key_id": principal.key_id,
            "scopes": ",".join(principal.scopes),
            "subject_type": principal.subject_type,
            "subject_id": principal.subject_id,
        },
    }


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    http = (event.get("requestContext") or {}).get("http") or {}
    return authorize(event.get("headers"), event.get("rawPath"), http.get("sourceIp"))
