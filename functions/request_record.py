"""What an API request leaves in the logs: one line when it succeeds, its whole story when it fails.

CloudWatch Logs bills every byte a function writes (and 26 bytes per line), Lambda's own START,
END and REPORT lines included, so a request that succeeds writes one line of about 150 bytes: its
correlation id, tenant, status, duration, the function's service and what it counted
(`"MessagesSent":10`). The stack's metric filters turn those counts into the dashboard's metrics
(namespace Postbox, dimension `service`), as an EMF record would, whose own directive alone is
150 bytes. Lambda's lines are dropped by the function's system log level (WARN, in its JSON log
format). A request answered 4xx also names its method and path; a failure (a 5xx, or an
exception) adds `request_story` to its error line: the request as it came, its key masked.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_SECRET_HEADERS = {"authorization", "apikey", "cookie", "x-amz-security-token"}
STORY_BODY_CHARS = 2048  # how much of a failed request's body its error line keeps


def _total(values: Any) -> int | float:
    """Powertools keeps each metric's values in a list: their sum, an integral one as an integer."""
    total = sum(values) if isinstance(values, list) else values
    return int(total) if isinstance(total, float) and total.is_integer() else total


def line(metrics: Any, correlation_id: str, tenant: str | None, status: int, ms: float,
         request: str | None = None) -> str:
    """The request's one line, with what it counted on `metrics` (a Powertools Metrics, then cleared)."""
    fields: dict[str, Any] = {"correlation_id": correlation_id}
    if tenant:
        fields["tenant"] = tenant
    fields["status"] = status
    fields["ms"] = round(ms, 1)
    if status >= 500:
        fields["level"] = "ERROR"
    if request:
        fields["request"] = request
    if metrics.metric_set:
        fields["service"] = metrics.service
        fields.update((name, _total(metric["Value"])) for name, metric in metrics.metric_set.items())
        metrics.clear_metrics()
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
