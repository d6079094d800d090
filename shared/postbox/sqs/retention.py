"""MessageRetentionPeriod applied: waiting messages of a queue whose SQS attributes hold one are
deleted once they are older than it (counted from when they were sent), as SQS drops them. A queue
made through SQS holds it (the default too); a queues-API queue holds it only once SetQueueAttributes
gave it one, so otherwise it keeps its waiting messages until they are deleted.

Each pass looks at the first `batch` messages of each such queue in id order (ids are drawn as
messages are sent, so the oldest come first) and deletes those past retention, at most `batch` in
all, with SKIP LOCKED so that overlapping sweeps split the work. Deleting the rows fires the
queue's counting triggers, so its length and stored bytes follow.
"""

from __future__ import annotations

from ..queues.retention import in_batches

_EXPIRE = """
WITH doomed AS (
    SELECT x.queue_id, x.msg_id
    FROM sqs_queues s
    CROSS JOIN LATERAL (
        SELECT m.queue_id, m.msg_id FROM queue_messages m
        WHERE m.queue_id = s.queue_id
          AND m.msg_id = ANY (ARRAY(
              SELECT f.msg_id FROM queue_messages f WHERE f.queue_id = s.queue_id
              ORDER BY f.msg_id LIMIT %(batch)s))
          AND m.enqueued_at < clock_timestamp()
              - make_interval(secs => (s.attributes->>'MessageRetentionPeriod')::int)
        FOR UPDATE SKIP LOCKED
    ) x
    WHERE s.attributes ? 'MessageRetentionPeriod'
    LIMIT %(batch)s
)
DELETE FROM queue_messages m USING doomed d WHERE m.queue_id = d.queue_id AND m.msg_id = d.msg_id
"""


def sweep(batch: int = 1000, budget_s: float = 20.0) -> int:
    """Delete waiting messages past their queue's MessageRetentionPeriod, a batch per transaction,
    until a pass finds none or the budget is spent."""
    return in_batches(_EXPIRE, batch, budget_s)
