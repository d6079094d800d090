"""What an API request leaves in the logs: its access line when it failed, was slow or was sampled,
an EMF record when it counted something, its whole story when it failed.

CloudWatch Logs bills every byte a function writes (and 26 bytes per line), so a request that
succeeds quickly writes nothing of its own unless it is sampled (`POSTBOX_LOG_SAMPLE_RATE`, a stack's
`logSampleRate`); a request answered 4xx or 5xx, or slower than `POSTBOX_LOG_SLOW_MS`, always writes
its access line. The access line holds what API Gateway's access log holds (the caller's address,
method and path, status, milliseconds; the request's id as `correlation_id`, as every line of the
request has it) and the tenant, and its `weight`: the requests it stands for (1, or 1/rate for a
sampled line), so that adding up the weights of a tenant's lines counts its requests.

Metrics stay exact whatever is sampled: what a request counted (`"MessagesSent":10`) goes out as one
embedded-metric-format record per invocation, Powertools Metrics' own record with each metric's
values added up and the tenant as a property (searchable, not a dimension). When the access line is
written it is that record, so a request writes at most one line of its own besides an error's.
"""

from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

_SECRET_HEADERS = {"authorization", "apikey", "cookie", "x-amz-security-token"}
STORY_BODY_CHARS = 2048  # how much of a failed request's body its error line keeps
DEFAULT_SAMPLE_RATE = 0.01
DEFAULT_SLOW_MS = 1000.0


def _setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


SAMPLE_RATE = min(1.0, max(0.0, _setting("POSTBOX_LOG_SAMPLE_RATE", DEFAULT_SAMPLE_RATE)))
SLOW_MS = _setting("POSTBOX_LOG_SLOW_MS", DEFAULT_SLOW_MS)
_draw = random.random


def _total(values: Any) -> int | float:
    """Powertools keeps each metric's values in a list: their sum, an integral one as an integer."""
    total = sum(values) if isinstance(values, list) else values
    return int(total) if isinstance(total, float) and total.is_integer() else total


def emf(metrics: Any) -> dict[str, Any]:
    """What a Powertools Metrics counted in this invocation as one EMF record (each metric's values
    added up), or {} when it counted nothing; its metrics are cleared either way."""
    if not metrics.metric_set:
        return {}
    record = metrics.serialize_metric_set()
    for name in metrics.metric_set:
        record[name] = _total(record[name])
    metrics.clear_metrics()
    return record


def keep_line(status: int, ms: float) -> float | None:
    """Whether a request's access line is written: 1.0 (always: an error or a slow request), the
    sampling rate (drawn for this one), or None (not written)."""
    if status >= 400 or ms >= SLOW_MS:
        return 1.0
    if SAMPLE_RATE and _draw() < SAMPLE_RATE:
        return SAMPLE_RATE
    return None


def record(metrics: Any, event: Any, correlation_id: str, tenant: str | None, status: int, ms: float) -> str | None:
    """The one line a request writes (its access line, EMF if it counted anything), or None."""
    counted = emf(metrics)
    kept = keep_line(status, ms)
    if kept is None:
        if not counted:
            return None
        fields: dict[str, Any] = {}
    else:
        fields = {"correlation_id": correlation_id}
        event = event if isinstance(event, dict) else {}
        fields["ip"] = ((event.get("requestContext") or {}).get("http") or {}).get("sourceIp")
        fields["request"] = request_line(event)
        fields["status"] = status
        fields["ms"] = round(ms, 1)
        fields["weight"] = round(1.0 / kept, 3)  # the requests this line stands for
        if status >= 500:
            fields["level"] = "ERROR"
    if tenant:
        fields["tenant"] = tenant
    fields.update(counted)
    return json.dumps(fields, separators=(",", ":"), default=str)


def write(text: str) -> None:
    """One line on stdout, where Lambda (and CloudWatch's EMF extraction) reads it."""
    sys.stdout.write(text + "\n")


def request_line(event: dict) -> str:
    """`METHOD /path` of a payload 2.0 event."""
    http = (event.get("requestContext") or {}).get("http") or {}
    return f"{http.get('method', '?')} {event.get('rawPath', '?')}"


def request_story(event: Any) -> dict[str, Any]:
    """A failed request as it came (credentials masked, the body cut at STORY_BODY_CHARS), for its
    error line: what the caller sent is what reproduces a failure."""
    if not isinstance(event, dict):
        return {"event": repr(event)[:STORY_BODY_CHARS]}
    context = event.get("requestContext") if isinstance(event.get("requestContext"), dict) else {}
    http = context.get("http") if isinstance(context.get("http"), dict) else {}
    headers = event.get("headers") if isinstance(event.get("headers"), dict) else {}
    body = event.get("body")
    story: dict[str, Any] = {
        "method": http.get("method"),
        "path": event.get("rawPath"),
        "route": event.get("routeKey"),
        "query": event.get("rawQueryString") or "",
        "source_ip": http.get("sourceIp"),
        "headers": {k: ("***" if str(k).lower() in _SECRET_HEADERS else v) for k, v in headers.items()},
    }
    if isinstance(body, str) and body:
        story["body_chars"] = len(body)
        story["body"] = body[:STORY_BODY_CHARS]
        story["base64"] = bool(event.get("isBase64Encoded"))
    return story
