"""Flows: streaming queries over partitioned queues (`/streams/v1`) and the Python SDK to write them.

Domain (one unit of work per call, SQL here): `queries` (registration and its quota gate), `quotas`
(grants), `state` (the state shards), `cycle` (state ops + sink pushes + source ack in one
transaction), `sinks` (the partitioned-queue calls a cycle makes), `hosted` (queries run by the agent).
SDK: `Query` (the builder), `Runner` (pop, fold, commit one cycle per partition, idle flush) and the
two ways it talks to Postbox, `HttpClient` and `LocalClient`.
"""

from . import hosted, quotas  # noqa: F401  (domain modules used by the CLI and the agent)
from .sdk import (
    Cron,
    HttpClient,
    LocalClient,
    Query,
    Runner,
    Session,
    Sliding,
    Tumbling,
    avg_of,
    count,
    max_of,
    min_of,
    sum_of,
)

__all__ = [
    "Cron", "HttpClient", "LocalClient", "Query", "Runner", "Session", "Sliding", "Tumbling",
    "avg_of", "count", "max_of", "min_of", "sum_of",
]
