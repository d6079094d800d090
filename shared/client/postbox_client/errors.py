"""Every refusal from Postbox as one exception type per status, carrying status, code and request id.

Each surface shapes its errors its own way (`{"detail": ...}`, `{"error": "..."}`,
`{"error": {"code", "message"}}`, `{"success": false, ...}`); `from_response` reads them all, so
callers branch on the exception class or `code`, never on the body's shape.
"""

from __future__ import annotations

from typing import Any

# The surface's own id first (the work surface's `req_…`, which its error bodies carry too), then the gateway's.
REQUEST_ID_HEADERS = ("x-request-id", "apigw-requestid", "x-amzn-requestid")

_DEFAULT_CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
    409: "conflict", 410: "gone", 412: "precondition_failed", 413: "too_large", 416: "out_of_range",
    422: "validation", 429: "rate_limited", 500: "server_error", 502: "bad_gateway", 503: "unavailable",
    504: "gateway_timeout",
}


class PostboxError(Exception):
    """A call Postbox refused or could not answer. `status` is 0 when no answer came at all."""

    def __init__(self, message: str, *, status: int = 0, code: str = "", request_id: str | None = None,
                 body: Any = None, method: str = "", url: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code or _DEFAULT_CODES.get(status, "error")
        self.request_id = request_id
        self.body = body
        self.method = method
        self.url = url

    def __str__(self) -> str:
        where = f"{self.method} {self.url}: " if self.method else ""
        rid = f" (request {self.request_id})" if self.request_id else ""
        return f"{where}{self.status} {self.code}: {self.message}{rid}"


class BadRequest(PostboxError):
    """400: the request was malformed or a value is out of range."""


class Unauthorized(PostboxError):
    """401: no key, or the key is unknown, revoked or expired."""


class Forbidden(PostboxError):
    """403: the key's role or scopes do not allow this, or a plan limit is reached."""


class NotFound(PostboxError):
    """404: no such resource (another tenant's resources answer the same)."""


class Conflict(PostboxError):
    """409: the name is taken, a lease is stale, a sequence is out of order."""


class Gone(PostboxError):
    """410: the offset or stream was removed."""


class PayloadTooLarge(PostboxError):
    """413: the message or request is over a limit."""


class ValidationFailed(PostboxError):
    """422: a field has the wrong type or value (see `body` for the list)."""


class RateLimited(PostboxError):
    """429: too many requests or a full backlog; retried with backoff before it reaches you."""


class ServerError(PostboxError):
    """5xx: Postbox failed; 503 is retried with backoff before it reaches you."""


class ConnectionFailed(PostboxError):
    """The request got no answer: connect error, reset or timeout."""


_BY_STATUS: dict[int, type[PostboxError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
    413: PayloadTooLarge, 422: ValidationFailed, 429: RateLimited,
}


def error_class(status: int) -> type[PostboxError]:
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, PostboxError)


def code_and_message(status: int, body: Any) -> tuple[str, str]:
    """The stable code and the sentence out of any surface's error body."""
    if not isinstance(body, dict):
        text = body.strip() if isinstance(body, str) else ""
        return "", text[:500] or _DEFAULT_CODES.get(status, "error").replace("_", " ")
    error, detail = body.get("error"), body.get("detail")
    if isinstance(error, dict):
        return str(error.get("code") or ""), str(error.get("message") or "")
    if isinstance(error, str):
        code = "denied" if body.get("denied") else ""
        return code, error
    if isinstance(detail, dict):
        return str(detail.get("code") or ""), str(detail.get("message") or detail)
    if isinstance(detail, list):
        parts = [f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg', '')}" if isinstance(d, dict)
                 else str(d) for d in detail]
        return "validation", "; ".join(parts)
    if isinstance(detail, str):
        return "", detail
    return "", str(body.get("message") or body)


def request_id(headers: Any) -> str | None:
    for name in REQUEST_ID_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def from_response(response: Any) -> PostboxError:
    """The exception for an httpx response whose status is not a success."""
    try:
        body: Any = response.json() if response.content else None
    except ValueError:
        body = response.text
    code, message = code_and_message(response.status_code, body)
    cls = error_class(response.status_code)
    return cls(message, status=response.status_code, code=code, request_id=request_id(response.headers),
               body=body, method=response.request.method, url=str(response.request.url))
