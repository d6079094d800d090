"""What the work modules share: the operations they check, id parsing, JSON in, cursor pages."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from .. import jsoncodec
from ..errors import NotFound, Unprocessable

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


def own_tenant(tenant_id: str, path_tenant: str) -> str:
    """`tenant_id` (the caller's) when the path names it; any other tenant, or a malformed id, is
    answered as a missing one (404 `NOT_FOUND`), so tenants cannot be probed."""
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


def decode_cursor(cursor: str | None) -> Any:
    """The position a cursor names; a cursor we did not write is a validation error."""
    if not cursor:
        return None
    try:
        return jsoncodec.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError):
        raise Unprocessable("The cursor is not one this API returned.",
                      fields=[{"field": "cursor", "message": "not a cursor this API returned"}]) from None


def page(rows: list[Any], limit: int, key: Any) -> tuple[list[Any], str | None]:
    """`rows` fetched with limit + 1: the page and the cursor of the next one (None at the end)."""
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, encode_cursor(key(rows[-1]))
    return rows, None
