"""What every surface's resolver shares: the principal from the authorizer, the resolver itself,
and the mapping from domain errors to the surface's own error envelope."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError

from postbox.errors import PostboxError, Unauthorized
from postbox.tenancy import Principal

Envelope = Callable[[int, str, str, dict[str, Any]], dict[str, Any]]


def principal_from(context: dict[str, Any] | None) -> Principal | None:
    """The authorizer's answer (requestContext.authorizer.lambda) as a Principal, if a key was valid."""
    if not context or str(context.get("authenticated")).lower() != "true":
        return None
    return Principal(
        tenant_id=context["tenant_id"],
        project_id=context.get("project_id") or None,
        role=context["role"],
        key_id=context["key_id"],
        scopes=tuple(s for s in str(context.get("scopes", "")).split(",") if s),
    )


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        status_code=status,
        content_type="application/json",
        body=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
        headers=headers,
    )


def validation_details(error: RequestValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors trimmed to what names the field: loc, msg, type."""
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in error.errors()
    ]


class SurfaceResolver(APIGatewayHttpResolver):
    """A resolver with validation on, whose errors are shaped by one `envelope` function.

    `envelope(status, code, message, details)` returns the body of the surface's error answer.

    The current event and context are kept per thread: Powertools keeps the event on the class and
    the context on the instance, which is right for Lambda (one invocation at a time per process)
    but not for the local gateway, which runs concurrent requests (long polls among them) on the
    threads of one process.
    """

    def __init__(self, envelope: Envelope, validation_status: int = 422) -> None:
        self._local = threading.local()
        super().__init__(enable_validation=True)
        self.envelope = envelope

        @self.exception_handler(PostboxError)
        def _domain_error(error: PostboxError) -> Response:
            return json_response(error.status, envelope(error.status, error.code, error.message, error.details))

        @self.exception_handler(RequestValidationError)
        def _invalid(error: RequestValidationError) -> Response:
            details = {"errors": validation_details(error)}
            return json_response(validation_status, envelope(validation_status, "validation", "", details))

        @self.not_found
        def _no_route(_: Exception) -> Response:
            return json_response(404, envelope(404, "not_found", "No such route.", {}))

    @property
    def current_event(self) -> Any:
        return self._local.event

    @current_event.setter
    def current_event(self, value: Any) -> None:
        self._local.event = value

    @property
    def context(self) -> dict:
        found = getattr(self._local, "context", None)
        if found is None:
            found = self._local.context = {}
        return found

    @context.setter
    def context(self, value: dict) -> None:
        self._local.context = value

    def resolve(self, event: dict, context: Any) -> dict:
        self._local.event = self._to_proxy_event(event)
        return super().resolve(event, context)

    def principal(self) -> Principal:
        """The caller, or 401 in the surface's envelope when no valid key came with the request."""
        context = self.current_event.request_context.authorizer.get_lambda
        found = principal_from(context)
        if found is None:
            reason = (context or {}).get("reason") or "No valid session or key."
            raise Unauthorized(reason)
        return found
