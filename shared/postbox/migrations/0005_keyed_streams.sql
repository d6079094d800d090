-- Keyed streams (`/v1/streams`): named logs per project on the log engine (owner_kind 'stream',
-- one partition per stream). Payloads, keys and headers live in the log's immutable segments; what
-- changes (status, schedule, expiry) lives in `stream_messages`, one small row per message. Named
-- subscriptions (consumer groups) fan out available messages into `stream_pending`; a per-key
-- `stream_sub_keys` row is the lease that keeps one key from being in flight twice.

CREATE TABLE streams (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     uuid   NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id    uuid   NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name          text   NOT NULL,
    partition_id  bigint,             -- its log partition, set in the transaction that creates it
    retention     text,               -- as given ("30d", "forever"); NULL = the deployment default
    retention_ms  bigint,             -- parsed; NULL with retention 'forever' or NULL (default)
    max_backlog   bigint,             -- NULL = the deployment default (none unless configured)
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Counters, kept by every path that changes a message's status (no count(*) on a hot path).
    messages      bigint NOT NULL DEFAULT 0,   -- retained, any status
    scheduled     bigint NOT NULL DEFAULT 0,
    available     bigint NOT NULL DEFAULT 0,
    UNIQUE (project_id, name)
) WITH (fillfactor = 70);
CREATE INDEX streams_tenant ON streams (tenant_id, project_id, name);

CREATE TABLE stream_messages (
    stream_id       bigint NOT NULL,
    "offset"        bigint NOT NULL,       -- the record's offset in the stream's log partition
    msg_id          text   NOT NULL,
    key             text,
    unit            text   NOT NULL,       -- ordering unit: 'k:' || key, or 'm:' || offset when unkeyed
    status          text   NOT NULL CHECK (status IN ('scheduled', 'available', 'cancelled', 'expired')),
    idempotency_key text,
    deliver_at      timestamptz,
    expires_at      timestamptz,
    published_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream_id, "offset")
) WITH (fillfactor = 90);
CREATE INDEX stream_messages_key ON stream_messages (stream_id, key, "offset") WHERE key IS NOT NULL;
CREATE INDEX stream_messages_status ON stream_messages (stream_id, status, "offset");
CREATE UNIQUE INDEX stream_messages_idempotency ON stream_messages (stream_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- The agents' sweeps: due scheduled messages, and available messages with an expiry.
CREATE INDEX stream_messages_due ON stream_messages (deliver_at) WHERE status = 'scheduled';
CREATE INDEX stream_messages_stream_due ON stream_messages (stream_id, deliver_at) WHERE status = 'scheduled';
CREATE INDEX stream_messages_expiring ON stream_messages (expires_at)
    WHERE status = 'available' AND expires_at IS NOT NULL;
CREATE INDEX stream_messages_stream_expiring ON stream_messages (stream_id, expires_at)
    WHERE status = 'available' AND expires_at IS NOT NULL;
CREATE INDEX stream_messages_published ON stream_messages USING brin (published_at);

CREATE TABLE stream_subscriptions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    stream_id      bigint NOT NULL REFERENCES streams(id) ON DELETE CASCADE,
    name           text   NOT NULL,
    max_deliveries int    NOT NULL DEFAULT 5,
    lease_ms       int    NOT NULL DEFAULT 30000,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    pending        bigint NOT NULL DEFAULT 0,   -- messages still to be acked (incl. in flight)
    acked          bigint NOT NULL DEFAULT 0,
    dead           bigint NOT NULL DEFAULT 0,
    UNIQUE (stream_id, name)
) WITH (fillfactor = 50);

-- One row per (subscription, available message) not yet acked or dead-lettered.
CREATE TABLE stream_pending (
    sub_id   bigint NOT NULL,
    "offset" bigint NOT NULL,
    unit     text   NOT NULL,
    attempts int    NOT NULL DEFAULT 0,
    PRIMARY KEY (sub_id, "offset")
) WITH (fillfactor = 80);
CREATE INDEX stream_pending_unit ON stream_pending (sub_id, unit, "offset");

-- One row per (subscription, ordering unit) with pending messages: the per-key lease.
-- A row exists while `pending` > 0; `head` is its oldest pending offset (claim order).
CREATE TABLE stream_sub_keys (
    sub_id       bigint NOT NULL,
    unit         text   NOT NULL,
    pending      int    NOT NULL,
    head         bigint NOT NULL,
    lease_token  uuid,
    lease_offset bigint,
    lease_until  timestamptz,
    PRIMARY KEY (sub_id, unit)
) WITH (fillfactor = 50);
CREATE INDEX stream_sub_keys_claim ON stream_sub_keys (sub_id, head);

-- Messages a subscription gave up on after max_deliveries deliveries.
CREATE TABLE stream_dead (
    sub_id   bigint NOT NULL,
    "offset" bigint NOT NULL,
    attempts int    NOT NULL,
    dead_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (sub_id, "offset")
);
