"""Logger, Metrics and Tracer for every function, wired the same way.

Every request has one id, its correlation id: the API Gateway request id (`requestContext.requestId`;
the local gateway makes one of the same shape), written as the surface's spec spells it (work's
`req_…`, see `instrument`'s `request_id_prefix`). Every log line of the request carries it as
`correlation_id`, with the tenant its key resolved to, and every answer carries it in
`X-Request-Id`; a surface's error envelope that names a request id (work's `meta.request_id`) reads
it from `request_id()`. Both are kept per thread (the local gateway serves concurrent requests of one
function on the threads of one process), never on the shared Logger, and cleared when the request
ends. The resolver's own error line (`request_logger()`) goes through the function's Logger, so a
500's id is found in the logs; a request's metrics carry the tenant as a property of its line
(searchable in Logs Insights) rather than a dimension, so a tenant count never multiplies the
metric bill. Metrics go
to the namespace NAMESPACE with the one dimension `service` = the function's logical name: the
dashboard and alarms of the stack name exactly those (a test checks it).

A surface function resolves its request's key itself (`functions.keys`, `resolve_keys=True`)
before anything of the request is logged. With metrics on (on AWS), an API request writes at most
one line when it ends (`functions.request_record`): its access line when it failed, was slow or was
sampled, an EMF record of what it counted (exact, whatever is sampled; agents flush theirs too); a
failure's error line carries the request as it came.

The Tracer pulls in the X-Ray SDK (and botocore), a quarter of a second of cold start, so it is
built only when tracing is on: on AWS unless POWERTOOLS_TRACE_DISABLED is set, never locally.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from functions import door, request_record, snapstart
from postbox import cells


def tracing_enabled() -> bool:
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() in ("1", "true")
    return not disabled and "AWS_LAMBDA_FUNCTION_NAME" in os.environ


NAMESPACE_DEFAULT = "Postbox"


def request_keys(event: Any) -> tuple[str | None, str | None]:
    """(correlation id, tenant id) of an API Gateway v2 event; (None, None) for anything else."""
    context = event.get("requestContext") if isinstance(event, dict) else None
    if not isinstance(context, dict):
        return None, None
    answer = (context.get("authorizer") or {}).get("lambda") or {}
    return context.get("requestId"), answer.get("tenant_id") or None


REQUEST_ID_HEADER = "X-Request-Id"
_KEYS = ("correlation_id", "tenant")
_current = threading.local()  # .id and .logger of the request this thread serves
_fallback = logging.getLogger("postbox.api")


def request_id() -> str:
    """The id of the request this thread is serving ("" outside one): the X-Request-Id it answers
    and the correlation id of its log lines."""
    return getattr(_current, "id", None) or ""


def request_logger() -> logging.Logger | Logger:
    """The Logger of the function serving this thread's request (its lines carry the request's id),
    or the plain `postbox.api` logger outside a function's handler."""
    return getattr(_current, "logger", None) or _fallback


def _answer_with_id(result: Any, rid: str) -> Any:
    if isinstance(result, dict) and "statusCode" in result:
        headers = result.get("headers")
        if not isinstance(headers, dict):
            headers = result["headers"] = {}
        headers[REQUEST_ID_HEADER] = rid
    return result


def instrument(service: str, request_id_prefix: str = "", *, resolve_keys: bool = False,
               ) -> tuple[Logger, Metrics, Callable[[Callable], Callable]]:
    """(logger, metrics, decorator) for a function; the decorator wraps its Lambda handler.

    For an API Gateway event the request's id is `request_id_prefix` + its requestId: the
    correlation id of every line the request logs and the `X-Request-Id` of its answer (a spec
    that fixes the id's shape, as work's `req_…`, names the prefix). `resolve_keys`: a surface's
    function, which resolves the request's key before it runs (`functions.keys.authenticate`)."""
    logger = Logger(service=service)
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", NAMESPACE_DEFAULT), service=service)
    metrics_disabled = os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in ("1", "true")
    if metrics_disabled:
        # Disabled metrics are never flushed, so Powertools would keep them and print a batch to
        # stdout every hundred: drop them at the door instead.
        metrics.add_metric = lambda *args, **kwargs: None  # type: ignore[method-assign]
    tracer = None
    if tracing_enabled():
        from aws_lambda_powertools import Tracer

        tracer = Tracer(service=service)
    authenticate = route = None
    if resolve_keys:  # imported here, in the function's init: agents and the console never need them
        from functions.keys import authenticate
        from postbox.directory import route
    snapstart.register()  # the hooks a SnapStart snapshot and its restores run, when initialised for one

    def wrap(fn: Callable[[dict, Any], Any]) -> Callable[[dict, Any], Any]:
        inner = tracer.capture_lambda_handler(fn) if tracer else fn

        @functools.wraps(fn)
        def with_request_keys(event: dict, context: Any) -> Any:
            with cells.scope():  # the invocation's cell is its own: its tenant's, once known
                return served(event, context)

        def served(event: dict, context: Any) -> Any:
            started = time.perf_counter()
            correlation_id, tenant = request_keys(event)
            rid = request_id_prefix + correlation_id if correlation_id else None
            # Per thread (a ContextVar of Powertools' formatter), not the Logger's shared keys.
            if rid:
                logger.thread_safe_append_keys(correlation_id=rid)
            outer = getattr(_current, "id", None), getattr(_current, "logger", None)
            _current.id, _current.logger = rid, logger
            status = 500
            front = door.is_function_url() and door.serves(service)  # the front door's work is its own
            try:
                result = door.admit(service, event) if front else None
                if result is None and authenticate is not None:
                    authenticate(event)
                    tenant = request_keys(event)[1]
                    if tenant:
                        route(tenant)
                if tenant:
                    logger.thread_safe_append_keys(tenant=tenant)
                if result is None and front:
                    result = door.throttle(tenant)
                if result is None:
                    result = inner(event, context)
                if front:
                    result = door.with_cors(event, result)
                tenant = tenant or request_keys(event)[1]  # a function that checks its own callers (SQS)
                if isinstance(result, dict) and isinstance(result.get("statusCode"), int):
                    status = result["statusCode"]
            except Exception:  # the function failed (API Gateway answers its own 500): a line with the id
                if rid:
                    logger.exception("handler failed", extra={"request": request_record.request_story(event)})
                raise
            finally:
                _current.id, _current.logger = outer
                logger.thread_safe_remove_keys(_KEYS)
                if metrics_disabled:
                    pass
                elif rid:  # an API request: at most one line (see `functions.request_record`)
                    ms = (time.perf_counter() - started) * 1000
                    line = request_record.record(metrics, event, rid, tenant, status, ms)
                    if line:
                        request_record.write(line)
                elif metrics.metric_set:
                    metrics.flush_metrics()
            return _answer_with_id(result, rid) if rid else result

        # clear_state: one request's tenant and correlation id never leak into the next one's lines.
        return logger.inject_lambda_context(with_request_keys, clear_state=True)

    return logger, metrics, wrap
