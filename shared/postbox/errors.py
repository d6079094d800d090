"""Typed domain errors. Each surface maps them to its own envelope and status codes."""

from __future__ import annotations

import json
from typing import Any


class PostboxError(Exception):
    """Base of every error the domain raises on purpose; `code` is stable for clients."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details


class Invalid(PostboxError):
    status, code = 400, "invalid"


class Unauthorized(PostboxError):
    status, code = 401, "unauthorized"


class Forbidden(PostboxError):
    status, code = 403, "forbidden"


class NotFound(PostboxError):
    status, code = 404, "not_found"


class Conflict(PostboxError):
    status, code = 409, "conflict"


class Gone(PostboxError):
    status, code = 410, "gone"


class PreconditionFailed(PostboxError):
    status, code = 412, "precondition_failed"


class TooLarge(PostboxError):
    status, code = 413, "too_large"


class UnsupportedMediaType(PostboxError):
    status, code = 415, "unsupported_media_type"


class Unprocessable(PostboxError):
    """Well-formed but invalid input, where a surface answers 422 (its validation status)."""

    status, code = 422, "validation"


class LimitExceeded(PostboxError):
    """A plan or quota limit (403 on most surfaces). One on how many of a kind of resource a tenant
    holds (`postbox.limits`) has the limit's name as its code and `limit` and `value` as details."""

    status, code = 403, "limit_exceeded"


class TooManyRequests(PostboxError):
    status, code = 429, "too_many_requests"


class Unavailable(PostboxError):
    status, code = 503, "unavailable"


_BY_SQLSTATE: dict[str, type[PostboxError]] = {
    "PB400": Invalid,
    "PB403": LimitExceeded,
    "PB404": NotFound,
    "PB409": Conflict,
    "PB410": Gone,
    "PB412": PreconditionFailed,
    "PB413": TooLarge,
    "PB422": Unprocessable,
    "PB429": TooManyRequests,
    "PB503": Unavailable,  # a tenant being moved to another cell: its writes wait for the move
}


def from_sqlstate(
    sqlstate: str | None, message: str, detail: str | None, hint: str | None = None
) -> PostboxError | None:
    """The typed error for a PB-class SQLSTATE raised by our SQL functions (detail = the code; a
    hint, when there is one, is a JSON object of the error's details)."""
    kind = _BY_SQLSTATE.get(sqlstate or "")
    if kind is None:
        return None
    return kind(message, code=detail or None, **_hint_details(hint))


def _hint_details(hint: str | None) -> dict[str, Any]:
    """A JSON object hint is the error's details; any other hint is kept as text, never a crash."""
    if not hint:
        return {}
    try:
        found = json.loads(hint)
    except ValueError:
        return {"hint": hint}
    return found if isinstance(found, dict) else {"hint": hint}
