"""Logger, Metrics and Tracer for every function, wired the same way.

The Tracer pulls in the X-Ray SDK (and botocore), a quarter of a second of cold start, so it is
built only when tracing is on: on AWS unless POWERTOOLS_TRACE_DISABLED is set, never locally.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Logger, Metrics


def tracing_enabled() -> bool:
    disabled = os.environ.get("POWERTOOLS_TRACE_DISABLED", "").lower() in ("1", "true")
    return not disabled and "AWS_LAMBDA_FUNCTION_NAME" in os.environ


def instrument(service: str) -> tuple[Logger, Metrics, Callable[[Callable], Callable]]:
    """(logger, metrics, decorator) for a function; the decorator wraps its Lambda handler."""
    logger = Logger(service=service)
    metrics = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Postbox"), service=service)
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() in ("1", "true"):
        # Disabled metrics are never flushed, so Powertools would keep them and print a batch to
        # stdout every hundred: drop them at the door instead.
        metrics.add_metric = lambda *args, **kwargs: None  # type: ignore[method-assign]
    tracer = None
    if tracing_enabled():
        from aws_lambda_powertools import Tracer

        tracer = Tracer(service=service)

    def wrap(fn: Callable[[dict, Any], Any]) -> Callable[[dict, Any], Any]:
        inner = tracer.capture_lambda_handler(fn) if tracer else fn
        return logger.inject_lambda_context(metrics.log_metrics(inner))

    return logger, metrics, wrap
