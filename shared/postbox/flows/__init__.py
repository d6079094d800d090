"""Flows: streaming queries over partitioned queues (`/streams/v1`).

Domain (one unit of work per call, SQL here): `queries` (registration and its quota gate), `quotas`
(grants), `state` (the state shards), `cycle` (state ops + sink pushes + source ack in one
transaction), `sinks` (the partitioned-queue calls a cycle makes), `hosted` (queries run by the agent),
`local_client` (the runner's calls in process).
The SDK (`Query`, `Runner`, windows, aggregates, `HttpClient`) lives with the Python client in
`postbox_client.flows`; its names are re-exported here, `HttpClient` on use (it needs httpx, which
the Lambda functions do not ship).
"""

from typing import Any

from postbox_client.flows.aggregates import avg_of, count, max_of, min_of, sum_of
from postbox_client.flows.query import Query
from postbox_client.flows.runner import CycleFailed, Runner
from postbox_client.flows.windows import Cron, Session, Sliding, Tumbling

from . import hosted, quotas  # noqa: F401  (domain modules used by the CLI and the agent)
from .local_client import LocalClient

__all__ = [
    "Cron", "CycleFailed", "HttpClient", "LocalClient", "Query", "Runner", "Session", "Sliding", "Tumbling",
    "avg_of", "count", "max_of", "min_of", "sum_of",
]


def __getattr__(name: str) -> Any:
    if name == "HttpClient":
        from postbox_client.flows.http import HttpClient

        return HttpClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
