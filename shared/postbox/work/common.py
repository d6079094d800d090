"""What the work modules share: the operations they check, id parsing, JSON in, cursor pages (the
shared `postbox.paging` cursors, refused as the work surface's 422 `VALIDATION_ERROR`)."""

from __future__ import annotations

import uuid
from typing import Any

from .. import jsoncodec, paging
from ..errors import NotFound, Unprocessable
from ..tenancy import Principal, require, tenant_name

VIEW = "scaiqueue:view"
PUBLISH = "scaiqueue:publish"
CONSUME = "scaiqueue:consume"
MANAGE = "scaiqueue:manage"

SCOPE_NOT_FOUND = "SCAIQUEUE_SCOPE_NOT_FOUND"
QUEUE_NOT_FOUND = "SCAIQUEUE_QUEUE_NOT_FOUND"
MESSAGE_NOT_FOUND = "SCAIQUEUE_MESSAGE_NOT_FOUND"
SLUG_CONFLICT = "SCAIQUEUE_SLUG_CONFLICT"
INVALID_TRANSITION = "SCAIQUEUE_INVALID_TRANSITION"

_MISSING = {SCOPE_NOT_FOUND: "Scope not found.", QUEUE_NOT_FOUND: "Queue not found.",
            MESSAGE_NOT_FOUND: "Message not found."}


def missing(code: str) -> NotFound:
    return NotFound(_MISSING[code], code=code)


def own_tenant(principal: Principal, path_tenant: str, need: str = MANAGE) -> str:
    """The caller's tenant, which a `/tenants/{tenant_id}` route must name, by its id or its name
    (as scope routes take a slug); these routes need manage unless `need` says otherwise. Any other
    tenant, or something that names none, is answered as a missing one (404 `NOT_FOUND`), so
    tenants cannot be probed."""
    tenant_id = require(principal, need)
    named = str(path_tenant)
    try:
        named = str(uuid.UUID(named))
    except ValueError:
        if named == _tenant_name(tenant_id):
            named = tenant_id
    if named != tenant_id:
        raise NotFound("Tenant not found.", code="NOT_FOUND")
    return tenant_id


_names: dict[str, str | None] = {}  # tenant id -> name: a tenant is never renamed


def _tenant_name(tenant_id: str) -> str | None:
    if tenant_id not in _names:
        if len(_names) > 10_000:
            _names.clear()
        _names[tenant_id] = tenant_name(tenant_id)
    return _names[tenant_id]


def parse_id(value: str, code: str) -> str:
    """A path id as a UUID string; anything that is not a UUID names nothing (404, not 422)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise missing(code) from None


def as_json(value: Any) -> str:
    """A value as a JSON text parameter (cast to jsonb in the statement)."""
    return jsoncodec.dumps(value, strict=True).decode()


def decode_cursor(cursor: str | None, listing: str, kind: type = int) -> Any:
    """The position a cursor of `listing` names: a sequence number (`int`, within bigint) or a slug
    (`str`), as `page` wrote it; None for the first page. Anything else is a 422 naming `cursor`."""
    found = paging.decode(cursor, listing, (kind,), error=Unprocessable)
    return None if found is None else found[0]


def page(rows: list[Any], limit: int, listing: str, key: Any) -> tuple[list[Any], str | None]:
    """`rows` fetched with limit + 1: the page and the cursor of the next one (None at the end)."""
    return paging.page(rows, limit, listing, key)
