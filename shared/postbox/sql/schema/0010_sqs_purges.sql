-- When a queue was last purged through SQS: SQS allows one PurgeQueue per queue every 60 seconds
-- and answers PurgeQueueInProgress to another. A row of its own, so purging a queue made through
-- the queues API gives it no SQS attributes.
CREATE TABLE sqs_purges (
    queue_id  bigint PRIMARY KEY REFERENCES queues(id) ON DELETE CASCADE,
    purged_at timestamptz NOT NULL
);
