"""The REQUEST authorizer (HTTP API, payload 2.0, simple responses).

It resolves the key (`Authorization: Bearer <key>` or `apikey: <key>`) to a tenant, project and
role, and always answers isAuthorized=true with that answer in the context: each surface decides
what an anonymous caller may do (a public stream is readable without a key) and shapes its own
401 body, which API Gateway's bare 403 for a denied request could not do.
"""

from __future__ import annotations

import time
from typing import Any

from functions.observability import instrument
from postbox import config
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


def authorize(headers: dict[str, str] | None) -> dict[str, Any]:
    """The simple-response answer for a request with these headers."""
    key = key_from_headers(headers)
    if not key:
        return {"isAuthorized": True, "context": {"authenticated": False, "reason": "No valid session or key."}}
    principal = _resolve(key)
    if principal is None:
        return {"isAuthorized": True, "context": {"authenticated": False, "reason": "Invalid or expired key."}}
    return {
        "isAuthorized": True,
        "context": {
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
    return authorize(event.get("headers"))
