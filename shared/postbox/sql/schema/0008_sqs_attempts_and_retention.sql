-- A FIFO receive's ReceiveRequestAttemptId, kept five minutes: the messages that receive handed out,
-- with the read count and the visibility deadline it gave each, so that a retry can be answered the
-- same messages and receipt handles while none of them has been touched since.
CREATE TABLE sqs_receive_attempts (
    queue_id   bigint NOT NULL REFERENCES queues(id) ON DELETE CASCADE,
    attempt_id text NOT NULL,
    msg_ids    bigint[] NOT NULL,
    read_cts   int[] NOT NULL,
    vts        timestamptz[] NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, attempt_id)
);

-- A queue's waiting messages expire after its MessageRetentionPeriod when its SQS attributes hold
-- one: CreateQueue keeps it (the default too), SetQueueAttributes gives it to any queue. Queues SQS
-- made before it was kept get the default; a queues-API queue that SQS only tagged keeps its waiting
-- messages until they are deleted.
UPDATE sqs_queues SET attributes = attributes || '{"MessageRetentionPeriod": 345600}'
WHERE NOT attributes ? 'MessageRetentionPeriod' AND (fifo OR attributes <> '{}' OR tags = '{}');
