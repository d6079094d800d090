"""What every surface's resolver shares: the principal its key resolved to, the resolver itself
(`SurfaceResolver`, on `functions.api.request_local`'s), the one way a request's inputs are
admitted, and the mapping from domain errors (and anything unexpected) to the surface's own error
envelope."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder, Route
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Query

from functions.api.lazy_routers import LazyPattern
from functions.api.request_local import RequestLocalResolver
from functions.observability import request_logger
from functions.request_record import request_story
from postbox import inputs
from postbox.db import RETRY_AFTER_S
from postbox.errors import Forbidden, PostboxError, Unauthorized, Unavailable
from postbox.tenancy import Principal

# A history route's `window`: the chart's last hour or last day, one point a minute (postbox.history).
HistoryWindow = Annotated[Literal["hour", "day"], Query(description="the last hour or the last day, a point a minute")]

Envelope = Callable[[int, str, str, dict[str, Any]], dict[str, Any]]


def principal_from(context: dict[str, Any] | None) -> Principal | None:
    """The key's answer (requestContext.authorizer.lambda, written by `functions.keys`) as a
    Principal, if a key was valid and its own limits (a work key's scopes and addresses) let this
    request through."""
    if not context or str(context.get("authenticated")).lower() != "true" or context.get("refused"):
        return None
    return Principal(
        tenant_id=context["tenant_id"],
        project_id=context.get("project_id") or None,
        role=context["role"],
        key_id=context["key_id"],
        scopes=tuple(s for s in str(context.get("scopes", "")).split(",") if s),
        subject_type=context.get("subject_type") or "api_key",
        subject_id=context.get("subject_id") or "",
        allowed_scopes=_listed(context.get("allowed_scopes")),
        ip_allowlist=_listed(context.get("ip_allowlist")),
        expires_at=datetime.fromisoformat(context["expires_at"]) if context.get("expires_at") else None,
        lineage=_listed(context.get("lineage")) or (),
    )


def _listed(value: str | None) -> tuple[str, ...] | None:
    """A key's limit as the answer carries it: absent when the key has none, else comma-joined."""
    return None if value is None else tuple(v for v in value.split(",") if v)


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        headers=headers,
    )


def retry_headers(error: PostboxError) -> dict[str, str] | None:
    """`Retry-After` on a 503 (the database unavailable: `postbox.db`) and on a 429 that says when."""
    if error.status == 503 or (error.status == 429 and "retry_after" in error.details):
        return {"Retry-After": str(error.details.get("retry_after", 1))}
    return None


def validation_details(error: RequestValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors trimmed to what names the field: loc, msg, type."""
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in error.errors()
    ]


_LOCATIONS = ("body", "query", "path", "header", "cookie")
_PASSTHROUGH = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


def _plain_json(body: Any) -> str:
    """A JSON-typed answer as compact JSON text, by orjson: a tenth of `json.dumps`' time for 100
    messages. The value is the one Powertools writes; the spelling differs only where JSON allows
    it (text beyond ASCII as UTF-8 rather than `\\u` escapes, `1e16` for `1e+16`). What orjson
    cannot take (a key that is not a string, an integer beyond 64 bits) raises TypeError, and so do
    datetimes and dataclasses, which orjson would write its own way: Powertools encodes those."""
    return orjson.dumps(body, option=_PASSTHROUGH).decode()


def field_of(loc: list[Any] | tuple[Any, ...]) -> str:
    """The field a validation error names, without where it was sent: `options.leaseTime`, or the
    location itself (`body`) when the whole of it was wrong."""
    parts = [str(p) for p in loc]
    if len(parts) > 1 and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(parts) or "body"


def first_invalid(details: dict[str, Any]) -> tuple[str, str]:
    """(field, message) of the first validation error in an envelope's `details`."""
    errors = details.get("errors") or [{"loc": ["body"], "msg": "invalid request"}]
    first = errors[0]
    return field_of(first.get("loc", ["body"])), first.get("msg", "invalid")


class SurfaceResolver(RequestLocalResolver):
    """A resolver with validation on, whose errors are shaped by one `envelope` function.

    `envelope(status, code, message, details)` returns the body of the surface's error answer.

    Every request is admitted the same way before its route's own validation runs: a caller
    without a valid key is 401 before anything of the request is looked at (unless the surface
    serves anonymous callers, as durable's public streams do); then path and query parameters
    and a JSON body are held to `postbox.inputs`' rules (the one content-type rule, size, UTF-8,
    depth, NUL), each failure a 4xx in the surface's envelope naming the field. What nobody
    expected is logged and answered 500 in the same envelope.

    Per-request state is kept per thread, and routes' stacks built once (see `RequestLocalResolver`).
    """

    def __init__(self, envelope: Envelope, validation_status: int = 422, *, anonymous: bool = False) -> None:
        super().__init__(enable_validation=True)
        self.envelope = envelope
        self.validation_status = validation_status
        self.anonymous = anonymous

        @self.exception_handler(PostboxError)
        def _domain_error(error: PostboxError) -> Response:
            body = envelope(error.status, error.code, error.message, error.details)
            return json_response(error.status, body, retry_headers(error))

        @self.exception_handler(RequestValidationError)
        def _invalid(error: RequestValidationError) -> Response:
            details = {"errors": validation_details(error)}
            field, why = first_invalid(details)
            body = envelope(validation_status, "validation", f"{field}: {why}", details)
            return json_response(validation_status, body)

        @self.exception_handler(Exception)
        def _unexpected(error: Exception) -> Response:
            """Our own fault: logged through the function's Logger (the line carries the request's id,
            which the envelope or `X-Request-Id` shows the caller), and answered in the surface's
            envelope (a 500 is safe to retry)."""
            request_logger().exception("request failed: %s", type(error).__name__,
                                       extra={"request": request_story(self.current_event.raw_event)})
            return json_response(500, envelope(500, "internal", "internal error", {}))

        @self.not_found
        def _no_route(_: Exception) -> Response:
            return json_response(404, envelope(404, "not_found", "No such route.", {}))

    greedy = ""  # the path parameter that spans slashes, as API Gateway's `{name+}`, where a surface has one
    route_regex = "^{}/?$"  # as for every `RequestLocalResolver`, a trailing slash matches the path without it

    def _compile_regex(self, rule: str, base_regex: str | None = None) -> LazyPattern:
        """A path parameter is any text between slashes (the `greedy` one any text): API Gateway
        already matched the route, and a name the surface refuses is its own 404 or invalid-name
        answer, never "No such route". Compiled when a request is first matched against it
        (`LazyPattern`)."""
        def group(m: re.Match) -> str:
            return f"(?P<{m.group(1)}>{'.+' if m.group(1) == self.greedy else '[^/]+'})"

        return LazyPattern((base_regex or self.route_regex).format(re.sub(r"<(\w+)>", group, rule)))

    def _to_response(self, result: Any) -> Any:
        """A route's dict or list answer, serialized here when it holds JSON types only. Powertools
        would first walk it with `jsonable_encoder` (several Python calls per value: 80 % of a
        pop(100)'s time in its handler), which leaves such a value as it is, then serialize it with
        `json.dumps`: the JSON value is the same (see `_plain_json`). Anything else (a model, a
        datetime) and a route that declares its return type (validated against it) take Powertools' path."""
        response = super()._to_response(result)
        body = getattr(response, "body", None)
        if isinstance(body, dict | list):
            route = self.context.get("_route")
            if route is not None and route.dependant.return_param is None:
                with contextlib.suppress(TypeError, ValueError):  # not JSON types only: Powertools encodes it
                    response.body = _plain_json(body)
        return response

    def _call_route(self, route: Route, route_arguments: dict[str, str]) -> ResponseBuilder:
        try:
            self._admit(route, route_arguments)
        except Exception as exc:
            answer = self._call_exception_handler(exc, route)
            if answer is None:
                raise
            return answer
        return super()._call_route(route, route_arguments)

    def _admit(self, route: Route, route_arguments: dict[str, str]) -> None:
        """Key first, then the inputs every surface shares (see the class's docstring)."""
        event = self.current_event
        unavailable = (event.request_context.authorizer.get_lambda or {}).get("unavailable")
        if unavailable:  # the key could not be looked up: the database is out of reach
            raise Unavailable(unavailable, retry_after=RETRY_AFTER_S)
        if not self.anonymous:
            self.principal()
        try:
            inputs.check_params(route_arguments, "path")
            inputs.check_params(event.query_string_parameters, "query")
            if route.dependant.body_params:
                event.__dict__["json_body"] = self._json_body(event)  # Powertools' cached json_body
        except inputs.BadInput as bad:
            raise RequestValidationError([{"loc": bad.loc, "msg": bad.reason, "type": bad.code}]) from None

    @staticmethod
    def _json_body(event: Any) -> Any:
        inputs.require_json_type((event.headers or {}).get("content-type"))
        headers = event.raw_event.get("headers") or {}
        for name in [k for k in headers if k.lower() == "content-type"]:
            headers[name] = "application/json"  # as Powertools' own check spells it (case-sensitive)
        body = event.body
        if not body:
            return None
        raw = base64.b64decode(body) if event.is_base64_encoded else body.encode("utf-8", "surrogatepass")
        return inputs.parse_json(raw)

    def caller(self) -> Principal | None:
        """The caller, or None when no valid key came with the request."""
        return principal_from(self.current_event.request_context.authorizer.get_lambda)

    def principal(self) -> Principal:
        """The caller, or 401 in the surface's envelope when no valid key came with the request."""
        context = self.current_event.request_context.authorizer.get_lambda
        found = principal_from(context)
        if found is None and (context or {}).get("refused"):
            raise Forbidden(context["refused"])
        if found is None:
            reason = (context or {}).get("reason") or "No valid session or key."
            raise Unauthorized(reason)
        return found
