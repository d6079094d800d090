"""The Python streams SDK: build a query, run it with a Runner over HTTP or in process."""

from .aggregates import avg_of, count, max_of, min_of, sum_of
from .client import CycleFailed, HttpClient, LocalClient
from .query import Query
from .runner import Runner
from .windows import Cron, Session, Sliding, Tumbling

__all__ = [
    "Cron", "CycleFailed", "HttpClient", "LocalClient", "Query", "Runner", "Session", "Sliding", "Tumbling",
    "avg_of", "count", "max_of", "min_of", "sum_of",
]
