"""A partitioned queue's failed deliveries, on the log engine's one lease lifecycle.

Queen's options map onto the shared retry vocabulary: `retryLimit` retries after the first
delivery (max_attempts = retryLimit + 1), `retryDelay` ms between them, and with
`dlqAfterMaxRetries` off a batch that used its attempts is skipped without a dead letter.
"""

from __future__ import annotations

import psycopg

from ..log_engine import leases
from ..log_engine.cursors import Cursor, commit
from ..log_engine.retry import RetryPolicy
from . import dlq, queues


def policy(queue: queues.Queue) -> RetryPolicy:
    return RetryPolicy.from_retry_limit(queue.retry_limit, queue.retry_delay_ms)


def _dead_letters(queue: queues.Queue) -> leases.DeadLetters | None:
    return dlq.record if queue.dlq_after_max_retries else None


def nack(conn: psycopg.Connection, queue: queues.Queue, cur: Cursor, upto: int, error: str | None) -> bool:
    """A failed ack at `upto`: what precedes it commits, the rest of the lease failed; True when
    the rest went to the dead letters."""
    return leases.fail_rest(conn, cur, upto, policy(queue), _dead_letters(queue), error)


def dead_letter(conn: psycopg.Connection, queue: queues.Queue, cur: Cursor, upto: int, error: str | None) -> bool:
    """An ack with status `dlq` at `upto`: what precedes it commits, the rest of the lease goes to the
    dead letters now (kept even when the queue does not dead-letter exhausted retries)."""
    if upto > cur.committed:
        commit(conn, cur, upto, release=False)
    return leases.fail(conn, cur, upto, cur.attempts + 1, RetryPolicy(0), dlq.record, error)


def expire(conn: psycopg.Connection, queue: queues.Queue, cur: Cursor) -> bool:
    """An expired lease is a failed delivery; True when it sent the batch to the dead letters."""
    return leases.expire(conn, cur, policy(queue), _dead_letters(queue))
