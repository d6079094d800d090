"""The SQS endpoint (`/sqs`, queue URLs `/sqs/<account>/<queue>` as request targets, and `POST /`
for clients that take a host and port only): the AWS JSON 1.0 protocol (`X-Amz-Target:
AmazonSQS.<Action>`) that SDKs and the AWS CLI speak, and the older Query protocol (form parameters,
XML answers; see `query`), with SigV4 verified here (its routes have no authorizer). Parses,
authenticates, calls the domain's action, answers in SQS's shapes: `{"__type", "message"}` and
`x-amzn-query-error` on JSON errors, `<ErrorResponse>` on Query ones."""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

from aws_lambda_powertools.event_handler import Response

from functions.api.common import RequestLocalResolver
from functions.observability import instrument, request_logger
from postbox import inputs
from postbox.db import RETRY_AFTER_S
from postbox.errors import Forbidden, Invalid, LimitExceeded, NotFound, PostboxError, Unauthorized, Unavailable
from postbox.sqs import actions, errors, identity, sigv4

logger, metrics, lambda_handler = instrument("sqs")

CONTENT_TYPE = "application/x-amz-json-1.0"
XML_CONTENT_TYPE = "text/xml"  # the Query protocol's answers
TARGET_PREFIX = "AmazonSQS."
MOUNT = "/sqs"
_QUERY_ACTION = re.compile(r"(?:^|&)Action=")

app = RequestLocalResolver()  # the local gateway serves it from several threads at once


def _answer(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=CONTENT_TYPE,
                    body=json.dumps(body, separators=(",", ":"), ensure_ascii=False),
                    headers={"x-amzn-RequestId": _request_id(), **(headers or {})})


def _request_id() -> str:
    """The request's id (API Gateway's, which the logs carry too) as SQS's x-amzn-RequestId."""
    try:
        return app.current_event.request_context.request_id or str(uuid.uuid4())
    except AttributeError:  # no event in hand
        return str(uuid.uuid4())


def _error(error: errors.SqsError, headers: dict[str, str] | None = None) -> Response:
    if _answers_in_xml():
        from . import query

        return _xml(error.status, query.failure(error, _request_id()), headers)
    return _answer(error.status, {"__type": f"{error.namespace}#{error.kind}", "message": error.message},
                   {"x-amzn-query-error": f"{error.query_code};{error.fault}", **(headers or {})})


def _xml(status: int, body: str, headers: dict[str, str] | None = None) -> Response:
    return Response(status_code=status, content_type=XML_CONTENT_TYPE, body=body,
                    headers={"x-amzn-RequestId": _request_id(), **(headers or {})})


def _speaks_query(method: str, headers: dict[str, str], query_string: str) -> bool:
    """A Query request: no X-Amz-Target (the JSON protocol's), and a form body, a GET or an `Action`
    in the query string. `headers` have lower-case names."""
    if "x-amz-target" in headers:
        return False
    return (method == "GET" or "x-www-form-urlencoded" in headers.get("content-type", "")
            or _QUERY_ACTION.search(query_string) is not None)


def _answers_in_xml() -> bool:
    """Whether the request in hand speaks Query, so that its errors are answered in XML."""
    try:
        event = app.current_event
        return _speaks_query(event.request_context.http.method,
                             {k.lower(): v for k, v in (event.headers or {}).items()},
                             event.raw_event.get("rawQueryString") or "")
    except AttributeError:  # no event in hand
        return False


def as_sqs(error: PostboxError) -> tuple[errors.SqsError, dict[str, str] | None]:
    """A domain error in SQS's terms (an SqsError is already)."""
    if isinstance(error, errors.SqsError):
        return error, None
    if isinstance(error, Unavailable):
        return errors.SqsError("ServiceUnavailable", error.message, status=503, query_code="ServiceUnavailable",
                               namespace=errors.CORAL, fault="Receiver"), {"Retry-After": str(RETRY_AFTER_S)}
    if isinstance(error, Forbidden | Unauthorized):
        return errors.access_denied(error.message), None
    if isinstance(error, NotFound):
        return errors.no_queue(), None
    if isinstance(error, LimitExceeded):
        return errors.over_limit(error.message), None
    if isinstance(error, Invalid) or error.status < 500:
        return errors.invalid_parameter(error.message), None
    return errors.SqsError("InternalFailure", "internal error", status=500, query_code="InternalFailure",
                           namespace=errors.CORAL, fault="Receiver"), None


@app.exception_handler(PostboxError)
def _domain_error(error: PostboxError) -> Response:
    return _error(*as_sqs(error))


@app.exception_handler(Exception)
def _unexpected(error: Exception) -> Response:
    request_logger().exception("request failed: %s", type(error).__name__)
    return _error(*as_sqs(PostboxError("internal error")))


def _body(event: Any) -> bytes:
    raw = event.body or ""
    try:
        return base64.b64decode(raw) if event.is_base64_encoded else raw.encode("utf-8", "surrogatepass")
    except ValueError:
        raise errors.malformed("The request body could not be read.") from None


def _serve(target: tuple[str, str] | None) -> Response:
    event = app.current_event
    headers = {k.lower(): v for k, v in (event.headers or {}).items()}
    body = _body(event)
    query_string = event.raw_event.get("rawQueryString") or ""
    amz_target = headers.get("x-amz-target", "")
    method = event.request_context.http.method
    speaks_query = _speaks_query(method, headers, query_string)
    if not speaks_query and not amz_target.startswith(TARGET_PREFIX):
        raise errors.missing_parameter("X-Amz-Target")
    request = sigv4.Request(method, event.raw_event.get("rawPath") or event.path, query_string, headers, body)
    principal = actions.authenticate(request)
    target_queue = None
    if target is not None:  # another account's queue URL names no queue of the caller's
        if target[0] != identity.account_id(principal.tenant_id):
            raise errors.no_queue()
        target_queue = target[1]
    scheme = headers.get("x-forwarded-proto", "http").split(",")[0].strip()
    base = f"{scheme}://{headers.get('host', 'localhost')}{MOUNT}"
    if speaks_query:
        from . import query  # only Query requests pay for reading SQS's service model

        action, params = query.read(query_string, body)  # a POST's parameters may be in either
        return _xml(200, query.answer(action, actions.run(action, principal, base, params, target_queue),
                                      _request_id()))
    try:
        params = inputs.parse_json(body) if body else {}
    except inputs.BadInput as bad:
        if bad.code == "invalid_text":  # a character SQS refuses in a body or an attribute (NUL, a lone surrogate)
            raise errors.invalid_contents(f"Invalid characters found: {bad.reason}.") from None
        raise errors.malformed(f"The request body is not valid JSON: {bad.reason}") from None
    action = amz_target[len(TARGET_PREFIX):]
    return _answer(200, actions.run(action, principal, base, params, target_queue))


@app.post(MOUNT)
def endpoint() -> Response:
    return _serve(None)


@app.post("/")
def root() -> Response:
    """The endpoint at the API's root, for clients that build an endpoint from a host and port alone."""
    return _serve(None)


@app.post(MOUNT + "/<account>/<queue>")
def queue_url(account: str, queue: str) -> Response:
    """A queue URL as the request's target: its queue, when the body names none."""
    return _serve((account, queue))


@app.get(MOUNT)
def query_get() -> Response:
    """A Query request whose parameters are its query string."""
    return _serve(None)


@app.get(MOUNT + "/<account>/<queue>")
def queue_url_get(account: str, queue: str) -> Response:
    return _serve((account, queue))


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return app.resolve(event, context)
