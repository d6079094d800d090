-- Consumer-group cursors on log partitions (engine level), and the partitioned queue surface's
-- own tables: queues with their options, the consumer groups seen per queue, and dead letters.

-- One row per (partition, consumer group): everything below `committed` is consumed; a lease
-- covers [committed, batch_end) until lease_expires_at. Used by every log surface with groups.
CREATE TABLE log_cursors (
    partition_id     bigint NOT NULL,
    consumer_group   text   NOT NULL,
    committed        bigint NOT NULL,          -- the next offset this group has not consumed
    lease_id         uuid,                     -- the current lease (the worker id), if any
    lease_expires_at timestamptz,
    batch_start      bigint,                   -- the leased batch: [batch_start, batch_end)
    batch_end        bigint,
    batch_last_id    text,                     -- the id of the leased batch's last record
    retry_count      int    NOT NULL DEFAULT 0,  -- failed deliveries of the batch at `committed`
    available_at     timestamptz,              -- a failed batch redelivers from here (retry delay)
    total_consumed   bigint NOT NULL DEFAULT 0,
    served_at        timestamptz NOT NULL DEFAULT clock_timestamp(),  -- last lease granted: fairness
    PRIMARY KEY (partition_id, consumer_group)
) WITH (fillfactor = 50);
CREATE UNIQUE INDEX log_cursors_lease ON log_cursors (lease_id) WHERE lease_id IS NOT NULL;
CREATE INDEX log_cursors_expiry ON log_cursors (lease_expires_at) WHERE lease_id IS NOT NULL;

CREATE TABLE pq_queues (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id                   uuid   NOT NULL,
    name                        text   NOT NULL,
    lease_time                  int    NOT NULL DEFAULT 300,   -- seconds
    retry_limit                 int    NOT NULL DEFAULT 3,
    retry_delay_ms              int    NOT NULL DEFAULT 0,
    delayed_processing          int    NOT NULL DEFAULT 0,     -- seconds before a message is delivered
    retention_seconds           int    NOT NULL DEFAULT 0,     -- 0: keep
    completed_retention_seconds int    NOT NULL DEFAULT 0,     -- 0: keep
    encryption_enabled          boolean NOT NULL DEFAULT false,
    dlq_after_max_retries       boolean NOT NULL DEFAULT true,
    created_at                  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at                  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, name)
);

-- Groups that have popped from a queue, so a partition created later gets their cursors at once.
CREATE TABLE pq_groups (
    queue_id       bigint NOT NULL REFERENCES pq_queues (id) ON DELETE CASCADE,
    consumer_group text   NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (queue_id, consumer_group)
);

CREATE TABLE pq_dead_letters (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      uuid   NOT NULL,
    queue_id       bigint NOT NULL REFERENCES pq_queues (id) ON DELETE CASCADE,
    partition_id   bigint NOT NULL,
    consumer_group text   NOT NULL,
    "offset"       bigint NOT NULL,
    transaction_id text   NOT NULL,
    message_id     text,
    headers        bytea,
    payload        bytea  NOT NULL,            -- as stored in the log (enveloped when encrypted)
    created_at     timestamptz NOT NULL,       -- when the message was pushed
    failed_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    retry_count    int    NOT NULL,
    error          text
);
CREATE INDEX pq_dead_letters_queue ON pq_dead_letters (tenant_id, queue_id, id);
