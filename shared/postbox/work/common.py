"""What the work modules share: the operations they check, id parsing, JSON in, cursor pages."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from .. import jsoncodec
from ..errors import NotFound, Unprocessable
from ..tenancy import Principal, require

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


def own_tenant(principal: Principal, path_tenant: str) -> str:
    """The caller's tenant, which a `/tenants/{tenant_id}` route must name; these routes need
    manage. Any other tenant, or a malformed id, is answered as a missing one (404 `NOT_FOUND`), so
    tenants cannot be probed."""
    tenant_id = require(principal, MANAGE)
    try:
        named = str(uuid.UUID(str(path_tenant)))
    except ValueError:
        named = None
    if named != tenant_id:
        raise NotFound("Tenant not found.", code="NOT_FOUND")
    return tenant_id


def parse_id(value: str, code: str) -> str:
    """A path id as a UUID string; anything that is not a UUID names nothing (404, not 422)."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise missing(code) from None


def as_json(value: Any) -> str:
    """A value as a JSON text parameter (cast to jsonb in the statement)."""
    return jsoncodec.dumps(value, strict=True).decode()


def encode_cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(jsoncodec.dumps(value)).decode().rstrip("=")


_BIGINT = 2**63 - 1


def decode_cursor(cursor: str | None, kind: type = int) -> Any:
    """The position a cursor names: a sequence number (`int`, within bigint) or a slug (`str`), as
    `encode_cursor` wrote it. Anything else is a validation error, never a query's."""
    if not cursor:
        return None
    try:
        value = jsoncodec.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError):
        value = None
    if kind is int and type(value) is int and 0 <= value <= _BIGINT:
        return value
    if kind is str and isinstance(value, str) and 0 < len(value) <= 256 and "\x00" not in value:
        return value
    raise Unprocessable("The cursor is not one this API returned.",
                        fields=[{"field": "cursor", "message": "not a cursor this API returned"}])


def page(rows: list[Any], limit: int, key: Any) -> tuple[list[Any], str | None]:
    """`rows` fetched with limit + 1: the page and the cursor of the next one (None at the end)."""
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, encode_cursor(key(rows[-1]))
    return rows, None
