"""Which surface a path belongs to, so that a client of a stack whose front door is the surfaces'
own URLs (one base URL per surface) sends each call to its surface's URL. The route table is the
server's; this is its client-side reading by path prefix (a test keeps the two in step)."""

from __future__ import annotations

_PREFIXES = (  # first match wins
    ("/api/v1/queues", "queues"),
    ("/api/v1/sqs", "queues"),
    ("/api/v1/", "partitioned"),
    ("/health", "partitioned"),
    ("/streams/v1", "flows"),
    ("/v1/streams", "keyed-streams"),
    ("/v1/projects", "keyed-streams"),
    ("/v1/stream/", "durable"),
    ("/v1/modules/scaiqueue", "work"),
    ("/sqs", "sqs"),
    ("/console", "console"),
)


def surface_of(path: str) -> str:
    """The surface serving `path`; any other path is a durable stream's hosted form
    (`/{account}/s.{name}`)."""
    for prefix, surface in _PREFIXES:
        stem = prefix.rstrip("/")
        if path == stem or path.startswith(stem + "/"):
            return surface
    return "durable"
