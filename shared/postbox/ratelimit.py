"""Per-tenant request limits from the tenant's plan, without a database round trip per request.

A token bucket per tenant in the process: it holds a minute's worth of requests (the plan's limit
a minute) and refills continuously. The plan's limit is read once and cached for PLAN_TTL_S, so a
warm function touches the database for it at most once a minute per tenant. Each function
instance keeps its own buckets: with N warm instances a tenant can reach N times its limit at
worst (a stack bounds N with reserved concurrency); the limit protects the store from a runaway
client, it is not a billing meter. A plan limit of 0 means no limit.

Two limits use it: the work surface's own (`work_requests_minute`, answered in the work envelope)
and every surface's request rate where the functions are the front door (`requests_minute`, see
`functions.door`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from . import db

PLAN_TTL_S = 60.0
_PLAN_COLUMN = {  # static SQL per limit: never formatted from input
    "requests_minute": "SELECT p.requests_minute FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = %s",
    "work_requests_minute":
        "SELECT p.work_requests_minute FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = %s",
}


class Decision(NamedTuple):
    allowed: bool
    limit: int  # requests a minute; 0 when unlimited
    remaining: int
    reset_s: int  # seconds until the bucket is full again
    retry_after_s: int  # when refused: seconds until one request is allowed

    def headers(self) -> dict[str, str]:
        if not self.limit:
            return {}
        out = {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
               "X-RateLimit-Reset": str(self.reset_s)}
        if not self.allowed:
            out["Retry-After"] = str(self.retry_after_s)
        return out


class Limiter:
    """Token buckets keyed by tenant, with the plans' limits cached."""

    def __init__(self, read_limit: Callable[[str], int], clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant -> (tokens, at)
        self._limits: dict[str, tuple[float, int]] = {}  # tenant -> (expires, per minute)
        self._read_limit = read_limit
        self._clock = clock

    def _limit(self, tenant_id: str, now: float) -> int:
        cached = self._limits.get(tenant_id)
        if cached and cached[0] > now:
            return cached[1]
        limit = self._read_limit(tenant_id)
        if len(self._limits) > 10_000:
            self._limits.clear()
        self._limits[tenant_id] = (now + PLAN_TTL_S, limit)
        return limit

    def check(self, tenant_id: str) -> Decision:
        """Take one token for this request, or say how long until one is there."""
        now = self._clock()
        limit = self._limit(tenant_id, now)
        if limit <= 0:
            return Decision(True, 0, 0, 0, 0)
        rate = limit / 60.0
        with self._lock:
            tokens, at = self._buckets.get(tenant_id, (float(limit), now))
            tokens = min(float(limit), tokens + (now - at) * rate)
            allowed = tokens >= 1.0
            if allowed:
                tokens -= 1.0
            if len(self._buckets) > 10_000:
                self._buckets.clear()
            self._buckets[tenant_id] = (tokens, now)
        return Decision(allowed, limit, int(tokens), math.ceil((limit - tokens) / rate),
                        0 if allowed else max(1, math.ceil((1.0 - tokens) / rate)))


def plan_limit(column: str) -> Callable[[str], int]:
    """A reader of one of the plans' per-minute limits for a tenant (0 for a tenant not found)."""
    sql = _PLAN_COLUMN[column]

    def read(tenant_id: str) -> int:
        with db.connection() as conn:
            row = conn.execute(sql, (tenant_id,)).fetchone()
        return int(row[0]) if row else 0

    return read


_requests = Limiter(plan_limit("requests_minute"))


def check_requests(tenant_id: str) -> Decision:
    """The plan's request rate over every surface (`requests_minute`)."""
    return _requests.check(tenant_id)
