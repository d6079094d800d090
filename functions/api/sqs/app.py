"""The SQS endpoint (`/sqs`, queue URLs `/sqs/<account>/<queue>` as request targets, and `POST /`
for clients that take a host and port only): the AWS JSON 1.0 protocol (`X-Amz-Target:
AmazonSQS.<Action>`) that SDKs and the AWS CLI speak, and the older Query protocol (form parameters,
XML answers; see `query`), with SigV4 verified here (its routes have no authorizer). Parses,
authenticates, calls the domain's action, answers in SQS's shapes: `{"__type", "message"}` and
`x-amzn-query-error` on JSON errors, `<ErrorResponse>` on Query ones.

Every route of this function is one endpoint (the action is named by the request, not its path), so
the handler reads the event API Gateway routed to it directly: the route's path parameters say
whether a queue URL was the target. A Powertools resolver would match the path again and build its
request and response objects: about 60 us a request, half of what the function spent around the action.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from typing import Any

from functions.observability import instrument, request_logger
from functions.request_record import request_story
from postbox import directory, inputs, jsoncodec
from postbox.db import RETRY_AFTER_S
from postbox.errors import (
    Forbidden,
    Invalid,
    LimitExceeded,
    NotFound,
    PostboxError,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from postbox.sqs import actions, errors, identity, sigv4

logger, metrics, lambda_handler = instrument("sqs")

CONTENT_TYPE = "application/x-amz-json-1.0"
XML_CONTENT_TYPE = "text/xml"  # the Query protocol's answers
TARGET_PREFIX = "AmazonSQS."
MOUNT = "/sqs"
_QUERY_ACTION = re.compile(r"(?:^|&)Action=")
SERVICE_ACTIONS = ("CreateQueue", "ListQueues")  # served at the endpoint, not at a queue's URL


def _answer(status: int, content_type: str, body: str, request_id: str,
            headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The function's answer in API Gateway's payload 2.0 form."""
    return {"statusCode": status, "isBase64Encoded": False, "body": body,
            "headers": {"Content-Type": content_type, "x-amzn-RequestId": request_id, **(headers or {})}}


def _json(body: dict[str, Any]) -> str:
    return jsoncodec.dumps(body).decode()


def _error(error: errors.SqsError, request_id: str, in_xml: bool, headers: dict[str, str] | None = None) -> dict:
    if in_xml:
        from . import query

        return _answer(error.status, XML_CONTENT_TYPE, query.failure(error, request_id), request_id, headers)
    body = {"__type": f"{error.namespace}#{error.kind}"}
    if error.message:  # Coral's SerializationException of an empty body has none
        body["message"] = error.message
    return _answer(error.status, CONTENT_TYPE, _json(body), request_id,
                   {"x-amzn-query-error": f"{error.query_code};{error.fault}", **(headers or {})})


def _speaks_query(method: str, headers: dict[str, str], query_string: str) -> bool:
    """A Query request: no X-Amz-Target (the JSON protocol's), and a form body, a GET or an `Action`
    in the query string. `headers` have lower-case names."""
    if "x-amz-target" in headers:
        return False
    return (method == "GET" or "x-www-form-urlencoded" in headers.get("content-type", "")
            or _QUERY_ACTION.search(query_string) is not None)


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
    if isinstance(error, TooManyRequests):  # a caller's cap of waiting receives
        return errors.throttled(error.message), {"Retry-After": str(error.details.get("retry_after", 1))}
    if isinstance(error, Invalid) or error.status < 500:
        return errors.invalid_parameter(error.message), None
    return errors.SqsError("InternalFailure", "internal error", status=500, query_code="InternalFailure",
                           namespace=errors.CORAL, fault="Receiver"), None


def _body(event: dict[str, Any]) -> bytes:
    raw = event.get("body") or ""
    try:
        return base64.b64decode(raw) if event.get("isBase64Encoded") else raw.encode("utf-8", "surrogatepass")
    except ValueError:
        raise errors.malformed("The request body could not be read.") from None


def _record_caller(event: dict[str, Any], tenant_id: str) -> None:
    """The tenant the signature resolved to, where a surface function's key check writes its answer
    (`requestContext.authorizer.lambda`), so the request's record and the local request log name it."""
    context = event.get("requestContext")
    if isinstance(context, dict):
        context["authorizer"] = {"lambda": {"authenticated": "true", "tenant_id": tenant_id}}


def _serve(event: dict[str, Any], method: str, headers: dict[str, str], query_string: str, speaks_query: bool,
           request_id: str) -> dict[str, Any]:
    body = _body(event)
    amz_target = headers.get("x-amz-target", "")
    if not speaks_query and not amz_target.startswith(TARGET_PREFIX):
        raise errors.missing_parameter("X-Amz-Target")
    request = sigv4.Request(method, event.get("rawPath") or "/", query_string, headers, body)
    principal = actions.authenticate(request)
    directory.route(principal.tenant_id)
    _record_caller(event, principal.tenant_id)
    target_queue = None
    target = event.get("pathParameters") or {}
    if "queue" in target:  # another account's queue URL names no queue of the caller's
        if target.get("account") != identity.account_id(principal.tenant_id):
            raise errors.no_queue()
        target_queue = target["queue"]
    scheme = headers.get("x-forwarded-proto", "http").split(",")[0].strip()
    base = f"{scheme}://{headers.get('host', 'localhost')}{MOUNT}"
    trace = headers.get("x-amzn-trace-id")
    if speaks_query:
        from . import query  # only Query requests pay for reading SQS's service model

        # a POST's parameters may be in either; a presigned request's own (X-Amz-*) are not the action's
        action, params = query.read(sigv4.without_auth(query_string), body)
        if target_queue is not None and action in SERVICE_ACTIONS:
            raise errors.unknown_action(action)  # a queue's URL is no endpoint for these, as on SQS
        return _answer(200, XML_CONTENT_TYPE, query.answer(
            action, actions.run(action, principal, base, params, target_queue, trace_header=trace, query=True),
            request_id), request_id)
    if not body:  # a JSON request has a body, `{}` at least (a presigned one's parameters are not read)
        raise errors.empty_json()
    try:
        params = inputs.parse_json(body)
    except inputs.BadInput as bad:
        if bad.code == "invalid_text":  # a character SQS refuses in a body or an attribute (NUL, a lone surrogate)
            raise _invalid_text(body, bad) from None
        raise errors.malformed(f"The request body is not valid JSON: {bad.reason}") from None
    action = amz_target[len(TARGET_PREFIX):]
    return _answer(200, CONTENT_TYPE, _json(actions.run(action, principal, base, params, target_queue,
                                                        trace_header=trace)), request_id)


def _invalid_text(body: bytes, bad: inputs.BadInput) -> errors.SqsError:
    """SQS's answer to a character no message may hold (NUL, a lone surrogate), which the body parser
    refuses before the action reads it: worded for the message body or the attribute it is in."""
    try:
        value: Any = json.loads(body)  # the parser refused the text, not the JSON: read it as it is
        for part in bad.loc[1:]:
            value = value[part]
    except (ValueError, LookupError, TypeError):  # a member's name, not a value
        value = None
    character = next((c for c in value if c == "\x00" or "\ud800" <= c <= "\udfff"), "\x00") \
        if isinstance(value, str) else "\x00"
    if "MessageAttributes" in bad.loc[1:] and len(bad.loc) > bad.loc.index("MessageAttributes") + 1:
        return errors.invalid_attribute_character(str(bad.loc[bad.loc.index("MessageAttributes") + 1]), character)
    if bad.loc[-1] == "MessageBody":
        return errors.invalid_character(character)
    return errors.invalid_contents(f"Invalid characters found: {bad.reason}.")


def serve(event: dict[str, Any]) -> dict[str, Any]:
    """One request on any of the function's routes, answered in SQS's shapes whatever happens."""
    context = event.get("requestContext") or {}
    request_id = context.get("requestId") or str(uuid.uuid4())
    method = (context.get("http") or {}).get("method") or "POST"
    headers = {k.lower(): v for k, v in (event.get("headers") or {}).items()}
    query_string = event.get("rawQueryString") or ""
    speaks_query = _speaks_query(method, headers, query_string)
    try:
        return _serve(event, method, headers, query_string, speaks_query, request_id)
    except PostboxError as error:
        refusal, extra_headers = as_sqs(error)
        return _error(refusal, request_id, speaks_query, extra_headers)
    except Exception as error:  # our own fault: logged with the request, answered as SQS answers one
        request_logger().exception("request failed: %s", type(error).__name__,
                                   extra={"request": request_story(event)})
        return _error(as_sqs(PostboxError("internal error"))[0], request_id, speaks_query)


@lambda_handler
def handler(event: dict, context: Any) -> dict:
    return serve(event)
