"""The one retry vocabulary: a policy decides, storage applies the decision.

Every surface that leases work speaks it, whatever its wire names:
- `attempts`: deliveries of the work that failed so far (a nack, an error ack, an expired lease);
- `max_attempts`: deliveries allowed before the work is dead-lettered (None: retried for ever);
- `retry_delay_ms`: how long failed work waits before it is delivered again;
- dead letter: where work goes once `attempts` reaches `max_attempts`.

Mapping of the wire names: a partitioned queue's `retryLimit` counts retries after the first
delivery (max_attempts = retryLimit + 1) and its `retryDelay` is the delay; a keyed-stream
subscription's `max_deliveries` is max_attempts (a nack names its own delay); a message-engine
queue's `max_reads` is max_attempts (its claim applies the decision in SQL).
"""

from __future__ import annotations

from typing import NamedTuple


class RetryDecision(NamedTuple):
    """What storage does with failed work: deliver it again after `delay_ms`, or dead-letter it."""

    dead_letter: bool
    attempts: int
    delay_ms: int = 0


class RetryPolicy(NamedTuple):
    max_attempts: int | None
    retry_delay_ms: int = 0

    @classmethod
    def from_retry_limit(cls, retry_limit: int, retry_delay_ms: int = 0) -> RetryPolicy:
        """A policy from a count of retries after the first delivery (Queen's `retryLimit`)."""
        return cls(retry_limit + 1, retry_delay_ms)

    def exhausted(self, attempts: int) -> bool:
        """True once `attempts` failed deliveries leave no delivery to try."""
        return self.max_attempts is not None and attempts >= self.max_attempts

    def decide(self, attempts: int, *, delay_ms: int | None = None) -> RetryDecision:
        """The decision after the `attempts`-th failed delivery (`delay_ms` overrides the policy's
        delay, as a nack naming its own does)."""
        if self.exhausted(attempts):
            return RetryDecision(True, attempts)
        return RetryDecision(False, attempts, self.retry_delay_ms if delay_ms is None else delay_ms)
