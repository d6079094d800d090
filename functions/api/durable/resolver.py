"""The durable surface's resolver and what every one of its answers shares: the protocol headers
(CORS, a sandboxing `Content-Security-Policy`, `Cache-Control`, Ursula's on the hosted form), no
body on `HEAD`, refusals in the protocol's envelope, and the request's parts as the routes read them."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware

from functions.api.common import SurfaceResolver, principal_from
from functions.api.durable.wire import CORS, SANDBOX, URSULA, error_response
from postbox.errors import PostboxError
from postbox.tenancy import Principal


def envelope(status: int, code: str, message: str, details: dict[str, Any]) -> dict[str, Any]:
    return {"error": {"code": code, "message": message or code}}


class DurableResolver(SurfaceResolver):
    """A resolver whose `<rest>` parameter is greedy, as API Gateway's `{rest+}` is."""

    greedy, route_regex = "rest", "^{}$"


app = DurableResolver(envelope, validation_status=400, anonymous=True)  # public streams: no key needed


def _hosted_request() -> bool:
    """A request to a stream of the hosted form (`/{account}/s.{name}...`)."""
    params = app.current_event.path_parameters or {}
    stream = params.get("stream", "")
    return "account" in params and stream.startswith("s.") and len(stream) > 2


def finish(response: Response) -> Response:
    """The headers every answer carries unless it set its own, and no body for `HEAD`."""
    headers = response.headers
    present = {k.lower() for k in headers}
    if _hosted_request() and response.status_code != 401:  # the server's own answers name it
        headers.update({k: v for k, v in URSULA.items() if k not in present})
    headers.update({k: v for k, v in CORS.items() if k not in present})
    headers.update(SANDBOX)
    if "cache-control" not in present:
        headers["Cache-Control"] = "no-store"
    if app.current_event.http_method.upper() == "HEAD":
        response.body = ""
    return response


def _protocol_headers(app: DurableResolver, next_middleware: NextMiddleware) -> Response:
    return finish(next_middleware(app))


app.use([_protocol_headers])


@app.exception_handler(PostboxError)
def _refusal(error: PostboxError) -> Response:
    return finish(error_response(error))


def principal() -> Principal | None:
    return principal_from(app.current_event.request_context.authorizer.get_lambda)


def headers() -> dict[str, str]:
    return {k.lower(): v for k, v in (app.current_event.headers or {}).items()}


def query() -> list[tuple[str, str]]:
    return parse_qsl(app.current_event.raw_event.get("rawQueryString") or "", keep_blank_values=True)


def method() -> str:
    return app.current_event.http_method.upper()
