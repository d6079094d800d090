"""What an API request leaves in the logs: one line when it succeeds, its whole story when it fails.

CloudWatch Logs bills every byte a function writes (and 26 bytes per line), Lambda's own START,
END and REPORT lines included, so a request that succeeds writes one line of about 250 bytes: its
EMF metric record, when the request counted something, with the request's correlation id, tenant,
status and duration added as properties (one line is both the metrics the dashboard reads and the
request's access record); otherwise a line of those four alone. Lambda's lines are dropped by the
function's system log level (WARN, in its JSON log format). A request answered 4xx also names
its method and path; a failure (a 5xx, or an exception) adds `request_story` to its error line:
the request as it came, with the key's headers masked.
"""

from __future__ import annotations

import json
import sys
from typing import Any

_SECRET_HEADERS = {"authorization", "apikey", "cookie", "x-amz-security-token"}
STORY_BODY_CHARS = 2048  # how much of a failed request's body its error line keeps


def _scalar(values: Any) -> Any:
    """Powertools keeps each metric's values in a list; one integral value is written as a number."""
    if isinstance(values, list) and len(values) == 1:
        values = values[0]
    if isinstance(values, float) and values.is_integer():
        return int(values)
    return values


def line(metrics: Any, correlation_id: str, tenant: str | None, status: int, ms: float,
         request: str | None = None) -> str:
    """The request's one line: its EMF record (from `metrics`, a Powertools Metrics, which is then
    cleared) with the request's fields, or those fields alone when it counted nothing."""
    fields: dict[str, Any] = {"correlation_id": correlation_id}
    if tenant:
        fields["tenant"] = tenant
    fields["status"] = status
    fields["ms"] = round(ms, 1)
    if request:
        fields["request"] = request
    if not metrics.metric_set:
        return json.dumps({"level": "INFO" if status < 500 else "ERROR", **fields}, separators=(",", ":"))
    metrics.metadata_set.pop("tenant", None)
    record = metrics.serialize_metric_set()
    metrics.clear_metrics()
    for name in [d["Name"] for d in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]]:
        record[name] = _scalar(record[name])
    record.update(fields)
    return json.dumps(record, separators=(",", ":"), default=str)


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
