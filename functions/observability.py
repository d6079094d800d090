"""Logger, Metrics and Tracer for every function, wired the same way.

Every log line of a request carries its correlation id (the API Gateway request id) and the tenant
the authorizer resolved; the EMF metrics carry the tenant as a property (searchable in Logs
Insights) rather than a dimension, so a tenant count never multiplies the metric bill. Metrics go
to the namespace NAMESPACE with the one dimension `service` = the function's logical name: the
dashboard and alarms of the stack name exactly those (a test checks it).

The Tracer pulls in the X-Ray SDK (and botocore), a quarter of a second of cold start, so it is
built only when tracing is on: on AWS unless POWERTOOLS_TRACE_DISABLED is set, never locally.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics


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


def instrument(service: str) -> tuple[Logger, Metrics, Callable[[Callable], Callable]]:
    """(logger, metrics, decorator) for a function; the decorator wraps its Lambda handler."""
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

    def wrap(fn: Callable[[dict, Any], Any]) -> Callable[[dict, Any], Any]:
        inner = tracer.capture_lambda_handler(fn) if tracer else fn

        @functools.wraps(fn)
        def with_request_keys(event: dict, context: Any) -> Any:
            correlation_id, tenant = request_keys(event)
            if correlation_id:
                logger.set_correlation_id(correlation_id)
            if tenant:
                logger.append_keys(tenant=tenant)
                metrics.add_metadata(key="tenant", value=tenant)
            else:  # metadata outlives a request that emitted no metric: never lend it the last tenant
                metrics.metadata_set.pop("tenant", None)
            return inner(event, context)

        # clear_state: one request's tenant and correlation id never leak into the next one's lines.
        # Disabled metrics are never flushed: no flush wrapper to run (and warn) on every request.
        inner_handler = with_request_keys if metrics_disabled else metrics.log_metrics(with_request_keys)
        return logger.inject_lambda_context(inner_handler, clear_state=True)

    return logger, metrics, wrap
