-- The SQS face: credentials, SQS's own view of a Postbox queue, FIFO deduplication and message
-- move tasks. A queue made through SQS is a row of `queues` like any other; `sqs_queues` holds only
-- what SQS knows beyond it (FIFO, the attributes the queues surface has no column for, tags).

-- An SQS credential: an access key id and its secret, sealed with the payload key ring (SigV4 needs
-- the secret itself to verify a signature, so it cannot be stored as a hash as API keys are).
CREATE TABLE sqs_credentials (
    access_key_id text PRIMARY KEY,
    tenant_id     uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id    uuid REFERENCES projects(id) ON DELETE CASCADE,
    role          text NOT NULL,
    secret_sealed bytea NOT NULL,
    name          text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    revoked_at    timestamptz
);
CREATE INDEX sqs_credentials_tenant ON sqs_credentials (tenant_id);

CREATE TABLE sqs_queues (
    queue_id   bigint PRIMARY KEY REFERENCES queues(id) ON DELETE CASCADE,
    fifo       boolean NOT NULL DEFAULT false,
    attributes jsonb NOT NULL DEFAULT '{}',
    tags       jsonb NOT NULL DEFAULT '{}'
);

-- A FIFO queue's deduplication ids seen in the last five minutes, and the message each one sent.
CREATE TABLE sqs_dedup (
    queue_id   bigint NOT NULL REFERENCES queues(id) ON DELETE CASCADE,
    dedup_id   text NOT NULL,
    msg_id     bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue_id, dedup_id)
);

-- StartMessageMoveTask: dead letters moved back to their source (or to a named queue).
CREATE TABLE sqs_move_tasks (
    task_handle    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    source_id      bigint NOT NULL REFERENCES queues(id) ON DELETE CASCADE,
    destination_id bigint REFERENCES queues(id) ON DELETE SET NULL,
    source_arn     text NOT NULL,
    destination_arn text,
    status         text NOT NULL,
    moved          bigint NOT NULL DEFAULT 0,
    to_move        bigint NOT NULL DEFAULT 0,
    max_per_second int,
    failure_reason text,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX sqs_move_tasks_source ON sqs_move_tasks (source_id, started_at DESC);

-- When a message was first handed out (SQS's ApproximateFirstReceiveTimestamp); a claim sets it once.
ALTER TABLE queue_messages ADD COLUMN first_read_at timestamptz;

-- A FIFO queue's message groups: a claim skips a group while one of its messages is in flight.
CREATE INDEX queue_messages_group ON queue_messages (queue_id, (headers->'sqs'->>'g'), msg_id)
    WHERE (headers->'sqs'->>'g') IS NOT NULL;
