"""When to try a call again and how long to wait first: one policy for the sync and async transports.

A 429 or 503 answer and a failed connect mean the call did not land: always retried. A call whose
request was sent but got no answer (read timeout, reset) or a 502/504 may have landed: retried
only when repeating it is harmless (`idempotent`: reads, deletes, calls that carry an idempotency
key). Waits grow exponentially with full jitter, and honour `Retry-After` when it is longer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx

NOT_LANDED_STATUSES = frozenset({429, 503})
MAYBE_LANDED_STATUSES = frozenset({502, 504})
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
MAYBE_LANDED_ERRORS = (httpx.ReadTimeout, httpx.WriteTimeout, httpx.ReadError, httpx.WriteError,
                       httpx.RemoteProtocolError)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # tries in all, the first included
    base_s: float = 0.2
    max_s: float = 5.0

    def backoff(self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None) -> float:
        """Seconds to wait before try number `attempt + 1` (attempt counts from 1)."""
        cap = min(self.max_s, self.base_s * (2 ** (attempt - 1)))
        wait = (rng or random).uniform(0, cap)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_s * 4))
        return wait

    def retry_status(self, attempt: int, status: int, idempotent: bool) -> bool:
        if attempt >= self.attempts:
            return False
        return status in NOT_LANDED_STATUSES or (idempotent and status in MAYBE_LANDED_STATUSES)

    def retry_error(self, attempt: int, error: Exception, idempotent: bool) -> bool:
        if attempt >= self.attempts:
            return False
        return isinstance(error, NOT_SENT_ERRORS) or (idempotent and isinstance(error, MAYBE_LANDED_ERRORS))


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to the backoff
