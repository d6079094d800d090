"""What every route of the work surface shares: its error envelope, the resolver, the caller and
the shapes of a success.

Answers are `{"data": …}` (lists with `meta.next_cursor`); errors are
`{"error": {"code", "message", "details"}, "meta": {"request_id"}}` with the same id in
`X-Request-Id`: the request's one id (`functions.observability.request_id()`, `req_` + the API
Gateway request id, as the spec spells it), which every log line of the request carries too.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query

from functions.api.common import SurfaceResolver, json_response, principal_from
from functions.keys import key_from_headers
from functions.observability import request_id
from postbox.errors import Forbidden, Unauthorized
from postbox.tenancy import Principal

MOUNT = "/v1/modules/scaiqueue"
REQUEST_ID_PREFIX = "req_"  # the spec's `meta.request_id`: "req_..."

# Postbox's generic codes as the work surface spells them.
_CODES = {
    "validation": "VALIDATION_ERROR",
    "forbidden": "AUTHZ_PERMISSION_DENIED",
    "unauthorized": "AUTH_TOKEN_INVALID",
    "not_found": "NOT_FOUND",
    "too_large": "PAYLOAD_TOO_LARGE",
    "invalid": "VALIDATION_ERROR",
    "unavailable": "SERVICE_UNAVAILABLE",
}


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "function-after", "function-before", "constrained-str",
              "constrained-int", "json-or-python", "condition-object", "condition-expression", "condition-list"}


def _field_errors(details: dict[str, Any]) -> list[dict[str, str]]:
    """Pydantic's errors as [{field, message}], one per field: the field dotted without the
    `body`/`query` root or the tags pydantic adds for each member of a union (`str`, `dict[…]`)."""
    out: dict[str, str] = {}
    for e in details.get("errors", ()):
        loc = [str(p) for p in e.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path"):
            loc = loc[1:]
        loc = [p for p in loc if p not in _TYPE_TAGS and "[" not in p]
        message = "unknown field" if e.get("type") == "extra_forbidden" else e.get("msg", "")
        out.setdefault(".".join(loc) or "body", message.removeprefix("Value error, "))
    return [{"field": f, "message": m} for f, m in out.items()] + list(details.get("fields", ()))


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    code = _CODES.get(code, code)
    if "limit" in details:  # a plan limit, named as the surface writes codes: MAX_WORK_SCOPES
        code = code.upper()
    error: dict[str, Any] = {"code": code, "message": message or "The request is not valid.", "details": details}
    if code == "VALIDATION_ERROR":
        error["details"] = _field_errors(details)
        if details.get("errors") and error["details"]:  # the sentence names the field as `details` does
            first = error["details"][0]
            error["message"] = f"{first['field']}: {first['message']}"
    if "retry_after" in details:
        error["retry_after"] = details["retry_after"]
        error["details"] = {k: v for k, v in details.items() if k != "retry_after"}
    return {"error": error, "meta": {"request_id": request_id()}}


class WorkResolver(SurfaceResolver):
    """The shared resolver, whose 401 says whether a key was sent (AUTH_TOKEN_MISSING) or refused
    (AUTH_TOKEN_INVALID), as the work surface's error table does."""

    def principal(self) -> Principal:
        event = self.current_event
        context = event.request_context.authorizer.get_lambda
        found = principal_from(context)
        if found is None and (context or {}).get("refused"):
            raise Forbidden(context["refused"])
        if found is None:
            if key_from_headers(event.headers) is None:
                raise Unauthorized("No bearer token or API key was sent.", code="AUTH_TOKEN_MISSING")
            raise Unauthorized("The key is invalid, expired or revoked.", code="AUTH_TOKEN_INVALID")
        return found


app = WorkResolver(envelope)


def caller() -> Principal:
    """The caller (the resolver has already answered 401 for a request without a valid key)."""
    return app.principal()


def data(value: Any, status: int = 200):
    return json_response(status, {"data": value})


def data_text(text: str, status: int = 200) -> Response:
    """`{"data": …}` around a value the domain already wrote as JSON text (a claim's answer), passed
    on as it is."""
    return Response(status_code=status, content_type="application/json", body='{"data":' + text + "}")


def listing(found: tuple[list, str | None]):
    items, cursor = found
    return json_response(200, {"data": items, "meta": {"next_cursor": cursor}})


Limit = Annotated[int, Query(ge=1, le=200)]
Cursor = Annotated[str | None, Query(max_length=512)]
