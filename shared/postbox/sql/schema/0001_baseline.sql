-- The baseline: every table, sequence, index, constraint, role and grant of a Postbox database.
-- Later changes to tables come as numbered files beside this one (0002_..., applied once, in order).
-- Functions, views and triggers are not here: each lives in one file of ../functions/, applied
-- after the tables (and again whenever its text changes). A column default that calls one of our
-- functions is set in the file that defines the function.

-- Tenancy: plans, tenants, projects (each tenant has a `default` one) and API keys (hashed).

CREATE TABLE plans (
    name              text PRIMARY KEY,
    max_queues        int    NOT NULL,
    messages_month    bigint NOT NULL,
    max_message_bytes int    NOT NULL,
    storage_bytes     bigint NOT NULL,
    retention_days    int    NOT NULL,
    work_requests_minute int NOT NULL DEFAULT 1000  -- requests a minute on the work surface (0: no limit)
);

INSERT INTO plans VALUES
    ('free',       25,    2000000,    262144,  2147483648,   7,   1000),
    ('pro',        500,   200000000,  1048576, 214748364800, 90,  60000),
    ('unlimited',  100000, 9000000000000000000, 1048576, 9000000000000000000, 365, 0);

CREATE TABLE tenants (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name       text NOT NULL UNIQUE,
    plan       text NOT NULL DEFAULT 'free' REFERENCES plans(name),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE projects (
    id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id  uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, name)
);

CREATE TABLE api_keys (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id   uuid REFERENCES projects(id) ON DELETE CASCADE,
    name         text NOT NULL DEFAULT '',
    prefix       text NOT NULL,
    key_hash     bytea NOT NULL UNIQUE,
    role         text NOT NULL CHECK (role IN ('read', 'write', 'manage', 'anon', 'work')),
    scopes       text[] NOT NULL DEFAULT '{}',
    expires_at   timestamptz,
    revoked_at   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Work API keys (role `work`, see the work surface's ACL below):
    subject_type         text,
    subject_id           text,
    key_type             text,
    allowed_scopes       uuid[],     -- NULL: every scope of the tenant
    ip_allowlist         text[],     -- CIDRs; NULL: any address
    grace_period_seconds int NOT NULL DEFAULT 0,
    previous_hash        bytea,      -- the key before the last rotation ...
    previous_valid_until timestamptz, -- ... accepted until then
    rotated_at           timestamptz,
    revoked_reason       text
);

CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);
CREATE INDEX api_keys_previous ON api_keys (previous_hash) WHERE previous_hash IS NOT NULL;

-- Usage a plan limits, kept as messages move. Slots spread concurrent writers over rows.
CREATE TABLE tenant_storage (
    tenant_id    uuid NOT NULL,
    slot         int  NOT NULL,
    stored_bytes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, slot)
) WITH (fillfactor = 70);

CREATE TABLE tenant_monthly_messages (
    tenant_id uuid NOT NULL,
    month     date NOT NULL,
    slot      int  NOT NULL,
    messages  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, month, slot)
) WITH (fillfactor = 70);
-- The message engine: queues, their waiting messages, their archive, and counters kept by
-- statement-level triggers so every path (send, read, archive, delete, purge, retention,
-- dead-lettering) counts the same way without a full count on any hot path.

CREATE TABLE queues (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id               uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    tenant_id              uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id             uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name                   text NOT NULL,
    description            text,
    visibility_timeout_sec int  NOT NULL DEFAULT 30,
    max_reads              int,
    dead_letter_queue_id   bigint REFERENCES queues(id),
    retention_days         int,
    app_send               boolean NOT NULL DEFAULT false,
    consumer               jsonb,
    consumer_last_error    text NOT NULL DEFAULT '',
    created_by             text NOT NULL DEFAULT '',
    created_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (project_id, name)
);
CREATE INDEX queues_tenant ON queues (tenant_id);
CREATE INDEX queues_dead_letter ON queues (dead_letter_queue_id) WHERE dead_letter_queue_id IS NOT NULL;

CREATE SEQUENCE queue_msg_id_seq;

-- One row per waiting (visible, delayed or in-flight) message. The primary key is the claim
-- order (fifo by msg_id within a queue); msg_id is global so a dead letter keeps its id.
-- A read rewrites each row it claims once (vt, read_ct). At fillfactor 50 a page keeps as much
-- free as it holds, so every row on it can be rewritten in place once (a HOT update) instead of
-- moving to another page and adding index entries: at 70 read+archive ran at 70k msg/s in
-- bench/queues.py's workload, at 50 at 87k, sends unchanged.
CREATE TABLE queue_messages (
    queue_id    bigint NOT NULL,
    msg_id      bigint NOT NULL DEFAULT nextval('queue_msg_id_seq'),
    vt          timestamptz NOT NULL,
    read_ct     int  NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    message     jsonb,
    headers     jsonb,
    size        int  NOT NULL,
    dead_from   bigint,
    PRIMARY KEY (queue_id, msg_id)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, fillfactor = 50);

CREATE TABLE queue_archive (
    queue_id    bigint NOT NULL,
    msg_id      bigint NOT NULL,
    read_ct     int  NOT NULL,
    enqueued_at timestamptz NOT NULL,
    vt          timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    message     jsonb,
    headers     jsonb,
    size        int  NOT NULL,
    dead        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (queue_id, msg_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX queue_archive_archived_at ON queue_archive USING brin (archived_at);
CREATE INDEX queue_archive_dead ON queue_archive (queue_id, msg_id) WHERE dead;

CREATE TABLE queue_counters (
    queue_id       bigint NOT NULL,
    slot           int    NOT NULL,
    sent           bigint NOT NULL DEFAULT 0,
    removed        bigint NOT NULL DEFAULT 0,
    live_bytes     bigint NOT NULL DEFAULT 0,
    archived_total bigint NOT NULL DEFAULT 0,
    archive_rows   bigint NOT NULL DEFAULT 0,
    archive_bytes  bigint NOT NULL DEFAULT 0,
    dead_total     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);

-- A per-queue head hint, so a claim starts its index walk where visible messages begin instead of
-- at the queue's first index entry.
--
-- Archived and deleted messages leave dead entries at the front of queue_messages' primary key
-- until vacuum removes them, and in-flight messages sit there too; a claim that always started from
-- the front would walk all of them, and get slower with every message drained (38k -> 19k msg/s
-- over three 200k drains in bench/queues.py). A claim starts at `head`, the id after the last one
-- claimed, and moves it forward. Messages that turn visible again behind the head (a visibility
-- timeout running out, a message sent in a transaction that committed after later ones) are found
-- by a full walk from the front, which a claim makes whenever the last one is older than 250 ms
-- (one claim at a time per queue), so they come back at most that much late. set_vt to under a
-- second and dead letters moved in (they keep their older ids) pull the head back at once.
--
-- A claim never waits for the head row: it moves the head only when it can lock the row at once
-- (another claim moving it meanwhile will have moved it as far), so the row is created with its
-- queue (a trigger on queues) and always exists.
CREATE TABLE queue_heads (
    queue_id   bigint PRIMARY KEY REFERENCES queues(id) ON DELETE CASCADE,
    head       bigint NOT NULL DEFAULT 0,
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);

-- Long-polling readers announce themselves here (by channel) so writers NOTIFY only when someone
-- waits: NOTIFY takes a global lock at commit, and an unconditional one would throttle every writer.
CREATE UNLOGGED TABLE waiters (
    channel text NOT NULL,
    waiter  uuid NOT NULL,
    until   timestamptz NOT NULL,
    PRIMARY KEY (channel, waiter)
);

-- Consumer dispatch without session state (AWS).

-- A queue's delivery slots (at most `concurrency` batches in its function's hands) are lease rows
-- with an expiry, taken and released by single autocommit statements: no advisory lock, so an
-- RDS Proxy session is never pinned, and a slot whose dispatcher died frees itself.
CREATE TABLE consumer_slots (
    queue_id bigint      NOT NULL,
    slot     int         NOT NULL,
    holder   uuid,
    until    timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (queue_id, slot)
);

-- "A dispatch of this queue is on its way or running": taken by the send that finds its consumer
-- idle (that send starts the dispatch), released by the dispatch when the queue is drained.
CREATE TABLE consumer_kicks (
    queue_id bigint      PRIMARY KEY,
    until    timestamptz NOT NULL
);
-- The log engine: append-only partitions of segments. A segment is one row holding a batch of
-- frames (zstd-compressed above a small size) covering offsets [first_offset, end_offset).

CREATE TABLE log_partitions (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id      uuid   NOT NULL,
    owner_kind     text   NOT NULL,   -- which surface's resource owns it (e.g. 'pq', 'stream', 'durable')
    owner_id       bigint NOT NULL,   -- that resource's id
    name           text   NOT NULL,   -- partition name within the owner ('Default', a key, '')
    next_offset    bigint NOT NULL DEFAULT 0,   -- the offset the next record gets
    start_offset   bigint NOT NULL DEFAULT 0,   -- records below this were removed by retention
    stored_bytes   bigint NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_append_at timestamptz,
    UNIQUE (owner_kind, owner_id, name)
) WITH (fillfactor = 50);

CREATE TABLE log_segments (
    partition_id bigint NOT NULL,
    end_offset   bigint NOT NULL,   -- exclusive: the segment covers [first_offset, end_offset)
    first_offset bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    codec        smallint NOT NULL,  -- 0 raw frames, 1 zstd
    raw_bytes    int NOT NULL,
    frames       bytea NOT NULL,
    PRIMARY KEY (partition_id, end_offset)
);
ALTER TABLE log_segments ALTER COLUMN frames SET STORAGE EXTERNAL;  -- already compressed by us
CREATE INDEX log_segments_created ON log_segments USING brin (created_at);

-- Per-message hashes of producer-supplied ids, kept only where a surface asks for deduplication.
CREATE TABLE log_dedup (
    partition_id bigint NOT NULL,
    hash         bytea  NOT NULL,
    "offset"     bigint NOT NULL,
    PRIMARY KEY (partition_id, hash)
);
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

-- Per-queue counters, kept as messages move (never a full count): records pushed (duplicates not
-- counted), acked (committed by acks, auto-acks, partial acks and cycles, summed over groups),
-- failed (nacked), dead-lettered and replayed. A queue's figure is the sum of its slot rows; a
-- writer adds to the first of up to 8 slots that no other transaction holds, so concurrent
-- writers neither serialise on one row nor wait on each other (at most 8 rows per queue).
CREATE TABLE pq_counters (
    queue_id       bigint NOT NULL REFERENCES pq_queues (id) ON DELETE CASCADE,
    slot           int    NOT NULL,
    pushed         bigint NOT NULL DEFAULT 0,
    acked          bigint NOT NULL DEFAULT 0,
    failed         bigint NOT NULL DEFAULT 0,
    dead_lettered  bigint NOT NULL DEFAULT 0,
    replayed       bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);
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
-- Durable Streams (the `durable` surface): one row per stream, mapped to one log partition
-- (owner_kind 'durable'). A fork reads its source's records below `base_offset` through the
-- source chain, and its own partition's record p at logical offset base_offset + p.

CREATE TABLE durable_streams (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id       uuid   NOT NULL,
    project_id      uuid   NOT NULL,
    name            text   NOT NULL,
    content_type    text   NOT NULL,
    incarnation     text   NOT NULL,            -- changes when the name is created again
    partition_id    bigint,                     -- set right after the insert (owner id = stream id)
    base_offset     bigint NOT NULL DEFAULT 0,  -- logical offset of the own partition's record 0
    closed          boolean NOT NULL DEFAULT false,
    closed_by       text,                       -- producer id, epoch, seq of the close (dedup)
    last_seq        text,                       -- the last Stream-Seq accepted
    ttl_seconds     bigint,                     -- sliding lifetime (Stream-TTL)
    expires_at      timestamptz,                -- fixed lifetime (Stream-Expires-At)
    expires_at_text text,                       -- as the creator wrote it (echoed by HEAD)
    accessed_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    public          boolean NOT NULL DEFAULT false,
    source_id       bigint REFERENCES durable_streams(id),
    source_name     text,                       -- Stream-Forked-From as given
    fork_sub_offset bigint NOT NULL DEFAULT 0,
    forks           int    NOT NULL DEFAULT 0,  -- living forks that read through this stream
    deleted         boolean NOT NULL DEFAULT false,  -- soft-deleted: gone, kept for its forks
    retained_offset bigint NOT NULL DEFAULT 0,  -- logical offsets below this were removed (410)
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (project_id, name)
);
CREATE INDEX durable_streams_expiring ON durable_streams (id)
    WHERE ttl_seconds IS NOT NULL OR expires_at IS NOT NULL;

-- Idempotent producers: the last (epoch, seq) accepted per producer, committed with the append.
CREATE TABLE durable_producers (
    stream_id   bigint NOT NULL REFERENCES durable_streams(id) ON DELETE CASCADE,
    producer_id text   NOT NULL,
    epoch       bigint NOT NULL,
    last_seq    bigint NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream_id, producer_id)
);

-- Published snapshots (Ursula extension): the state of the stream at a logical offset.
CREATE TABLE durable_snapshots (
    stream_id    bigint NOT NULL REFERENCES durable_streams(id) ON DELETE CASCADE,
    "offset"     bigint NOT NULL,
    content_type text   NOT NULL,
    digest       text   NOT NULL,
    body         bytea  NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream_id, "offset")
);

-- Parts staged for a snapshot, committed in the order the commit names them.
CREATE TABLE durable_snapshot_parts (
    stream_id  bigint NOT NULL REFERENCES durable_streams(id) ON DELETE CASCADE,
    "offset"   bigint NOT NULL,
    digest     text   NOT NULL,
    body       bytea  NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (stream_id, "offset", digest)
);
-- Flows (`/streams/v1`): registered queries, their state shards (one per source partition), the
-- registration quota grants, and the queries hosted as a scheduled function.

CREATE TABLE flow_queries (
    id           uuid PRIMARY KEY,                 -- UUIDv7, the wire's query_id
    tenant_id    uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name         text NOT NULL,
    source_queue text NOT NULL,
    sink_queue   text,                             -- an empty string on the wire is stored as null
    config_hash  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, name)
);

-- Keys are compared byte-wise (COLLATE "C") so `key_prefix` reads are index range scans and rows
-- come back in the order the spec promises whatever the database's locale.
CREATE TABLE flow_state (
    query_id     uuid   NOT NULL REFERENCES flow_queries(id) ON DELETE CASCADE,
    partition_id bigint NOT NULL,                  -- log_partitions.id of the source partition
    key          text COLLATE "C" NOT NULL,
    value        jsonb  NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (query_id, partition_id, key)
);

-- Registration grants: a tenant other than the one named `default` registers new query names only
-- with an enabled row here; `max_queries` (when set) caps how many queries it may have.
CREATE TABLE flow_quotas (
    tenant_id   uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    enabled     boolean NOT NULL DEFAULT true,
    max_queries int CHECK (max_queries IS NULL OR max_queries >= 0),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Hosted queries: the flows agent builds the query from `factory` (module:function) and runs one
-- bounded pass of the runner, idle flush included, even when no worker is up.
CREATE TABLE flow_hosted (
    query_id   uuid PRIMARY KEY REFERENCES flow_queries(id) ON DELETE CASCADE,
    factory    text NOT NULL,
    enabled    boolean NOT NULL DEFAULT true,
    last_run_at timestamptz,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The work surface on the message engine: scopes own queues (five of them system queues); one row
-- per message keeps its state after it ends (completed, failed, cancelled, expired, dead-lettered)
-- until the archiver's retention. The claim order is `rank, seq`, computed at publish from the
-- queue's ordering mode (fifo: 0; priority: tier * 1024 + (1000 - score); deadline: epoch seconds
-- of the deadline), and a partial index on it makes a claim one SKIP LOCKED walk.
-- Hot paths (publish, claim, finish) are single functions; refusals are PB4xx SQLSTATEs whose
-- DETAIL is the surface's error code. Every agent's runs are counted in `agent_runs`.

CREATE TABLE work_scopes (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id            uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    slug                 text NOT NULL,
    display_name         text NOT NULL,
    description          text,
    defaults             jsonb NOT NULL DEFAULT '{}',
    state                text NOT NULL DEFAULT 'active'
                         CHECK (state IN ('active', 'paused', 'draining', 'archived')),
    emit_published       boolean NOT NULL DEFAULT false,
    emit_claimed         boolean NOT NULL DEFAULT false,
    retention_days       int NOT NULL DEFAULT 7,
    dead_letter_alert    int NOT NULL DEFAULT 100,
    dead_letter_alerted  boolean NOT NULL DEFAULT false,
    dead_letter_queue_id bigint,
    events_queue_id      bigint,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    acl_grants           int NOT NULL DEFAULT 0,  -- rows in work_acl_grants for the scope
    acl_queue_entries    int NOT NULL DEFAULT 0,  -- rows in work_queue_acl for the scope
    UNIQUE (tenant_id, slug)
);

-- Message schemas: a queue names the one its bodies must satisfy. Schemas are validated by the
-- caller (JSON Schema needs a validator library); the publish only checks that the caller
-- validated against the schema the queue names now.
CREATE TABLE work_schemas (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     text NOT NULL,
    schema      jsonb NOT NULL,
    deprecated  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, name, version)
);

CREATE TABLE work_queues (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id             uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    scope_id             uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    tenant_id            uuid NOT NULL,
    slug                 text NOT NULL,
    display_name         text NOT NULL,
    description          text,
    is_system            boolean NOT NULL DEFAULT false,
    state                text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused')),
    consumer_mode        text NOT NULL DEFAULT 'competing' CHECK (consumer_mode IN ('competing', 'broadcast')),
    ordering             text NOT NULL DEFAULT 'fifo' CHECK (ordering IN ('fifo', 'priority', 'deadline')),
    max_depth            int NOT NULL DEFAULT 0,
    overflow_policy      text NOT NULL DEFAULT 'reject' CHECK (overflow_policy IN ('reject', 'drop_oldest')),
    visibility_timeout_s int NOT NULL DEFAULT 30,
    max_retries          int NOT NULL DEFAULT 3,
    ttl_seconds          int,
    recovered_at         timestamptz NOT NULL DEFAULT '-infinity',  -- a claim's last look for expired claims
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    schema_id            uuid REFERENCES work_schemas(id),  -- what its bodies must satisfy (NULL: any body)
    UNIQUE (scope_id, slug)
);

-- Depths and totals per queue, spread over 8 slots so concurrent writers rarely meet on a row.
CREATE TABLE work_queue_counters (
    queue_id      bigint NOT NULL REFERENCES work_queues(id) ON DELETE CASCADE,
    slot          int    NOT NULL,
    pending       bigint NOT NULL DEFAULT 0,
    claimed       bigint NOT NULL DEFAULT 0,
    published     bigint NOT NULL DEFAULT 0,
    completed     bigint NOT NULL DEFAULT 0,
    dead_lettered bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);

CREATE SEQUENCE work_message_seq;

-- A claim rewrites a message row (state, visible_at, attempts, claim token). No index holds a
-- column the claim changes, and the table keeps half of each page free (as the message engine's
-- does), so a claim updates its rows in place (HOT) and only the completion, which ends the row,
-- writes index entries (were `state` and `visible_at` indexed, each claim would write a new row
-- version plus an entry in every index, and the completion again).
--
-- * The claim walk's index holds every live message (ended_at IS NULL), pending or claimed, in
--   claim order; a message leaves it when it ends. A claim takes what is visible (visible_at
--   passed): a pending message, or a claimed one whose claim ran out (as the message engine does).
--   A claim that ran out on the last attempt is dead-lettered by the claim that finds it, the
--   others are claimed again at once with failure_reason 'visibility timeout'. The agent's sweep
--   puts expired claims back to pending for queues no one claims from.
-- * Listing: live messages (pending, claimed) by a (queue_id, seq) index of live rows, filtered by
--   state; ended ones by `ended_state`, a stored column that is NULL while the message lives (so a
--   claim does not change it) and its final state once it ends.
-- * Expiry and aging sweeps walk indexes whose predicate is ended_at (not state).
-- * A fifo queue's claims start at its claim head (work_claim_heads, below), past the dead and
--   claimed entries at the front of the claim index.
CREATE TABLE work_messages (
    id                   uuid PRIMARY KEY,  -- DEFAULT work_uuid7(), set beside that function (work_messages.sql)
    seq                  bigint NOT NULL DEFAULT nextval('work_message_seq'),
    queue_id             bigint NOT NULL,
    scope_id             uuid NOT NULL,
    tenant_id            uuid NOT NULL,
    state                text NOT NULL DEFAULT 'pending',
    rank                 bigint NOT NULL DEFAULT 0,
    visible_at           timestamptz NOT NULL,
    aged_at              timestamptz,
    message_type         text NOT NULL DEFAULT 'task',
    tier                 smallint NOT NULL DEFAULT 2,
    score                int NOT NULL DEFAULT 500,
    labels               jsonb NOT NULL DEFAULT '{}',
    content_type         text NOT NULL DEFAULT 'application/json',
    body                 jsonb NOT NULL,
    correlation_id       text,
    causation_id         text,
    parent_id            text,
    source_type          text,
    source_id            text,
    ttl_seconds          int,
    deadline             timestamptz,
    expires_at           timestamptz,
    max_retries          int NOT NULL,
    visibility_timeout_s int NOT NULL,
    idempotency_key      text,
    hitl_spec            jsonb,
    attempts             int NOT NULL DEFAULT 0,
    claimed_by           text,
    claim_token          uuid,
    claimed_at           timestamptz,
    failure_reason       text,
    response             jsonb,
    created_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at             timestamptz,
    ended_state          text GENERATED ALWAYS AS (CASE WHEN ended_at IS NOT NULL THEN state END) STORED
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, fillfactor = 50);

-- The claim walk: live messages of a queue in claim order.
CREATE INDEX work_messages_claim ON work_messages (queue_id, rank, seq) WHERE ended_at IS NULL;
-- Listing: live messages (by state in the rows), ended ones by their final state; the oldest
-- pending (overflow), cursors.
CREATE INDEX work_messages_live ON work_messages (queue_id, seq) WHERE ended_at IS NULL;
CREATE INDEX work_messages_list ON work_messages (queue_id, ended_state, seq) WHERE ended_at IS NOT NULL;
CREATE UNIQUE INDEX work_messages_idempotency ON work_messages (queue_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX work_messages_correlation ON work_messages (scope_id, correlation_id, seq)
    WHERE correlation_id IS NOT NULL;
CREATE INDEX work_messages_expiry ON work_messages (expires_at) WHERE ended_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX work_messages_aging ON work_messages (aged_at) WHERE ended_at IS NULL AND aged_at IS NOT NULL;
CREATE INDEX work_messages_ended ON work_messages (ended_at) WHERE ended_at IS NOT NULL;
-- An actor's messages without a walk of the whole table. The claim and finish never change these
-- columns, so their updates stay in place (HOT). Events (source 'system') are not indexed.
CREATE INDEX work_messages_source ON work_messages (tenant_id, source_type, source_id, seq)
    WHERE source_type <> 'system';

-- Every agent's runs, one row per agent: what GET /system-agents shows.
CREATE TABLE agent_runs (
    agent                text PRIMARY KEY,
    total_runs           bigint NOT NULL DEFAULT 0,
    total_processed      bigint NOT NULL DEFAULT 0,
    total_errors         bigint NOT NULL DEFAULT 0,
    last_run_at          timestamptz,
    last_run_duration_ms int,
    last_error           text,
    last_error_at        timestamptz,
    running_since        timestamptz
);

-- The claim head of a fifo queue (as the message engine's `queue_heads`): messages that ended
-- leave dead entries at the front of the claim index until vacuum, and claimed ones stay there
-- while they are held, so a claim of a fifo queue starts at `head`, the seq after the last one
-- claimed, instead of at the front. Messages claimable behind the head (released, failed after
-- their backoff, claims that ran out, delayed ones come due, publishes that committed after later
-- ones) are found by a walk from the front, which one claim per queue makes when the last is older
-- than 250 ms, and which any claim makes when the walk from the head comes short: a claim that
-- answers fewer messages than asked has looked at the whole queue. A release, a fail and the
-- agent's recovery pull the head back to the message at once. Priority and deadline queues (whose
-- new messages may sort before the ones claimed) always walk from the front.
CREATE TABLE work_claim_heads (
    queue_id   bigint PRIMARY KEY REFERENCES work_queues(id) ON DELETE CASCADE,
    head       bigint NOT NULL DEFAULT 0,
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);

-- The registries a publish consults besides the queue's schema: routing rules with their
-- condition language, and HITL patterns with the check of a reviewer's response at complete.

-- ---- routing rules ------------------------------------------------------------------------------

CREATE TABLE work_routing_rules (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id     uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name         text NOT NULL,
    description  text,
    priority     int NOT NULL DEFAULT 100,
    enabled      boolean NOT NULL DEFAULT true,
    trigger      text NOT NULL DEFAULT 'message_published',
    conditions   jsonb,                      -- NULL: every message
    action       jsonb NOT NULL,             -- {"type": route|copy|transform|escalate|archive, ...}
    source_queue bigint REFERENCES work_queues(id) ON DELETE CASCADE,  -- NULL: any queue of the scope
    target_queue bigint REFERENCES work_queues(id) ON DELETE CASCADE,  -- route and copy
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_routing_rules_order ON work_routing_rules (scope_id, trigger, priority, created_at);

-- ---- HITL patterns ------------------------------------------------------------------------------

-- Reusable human-in-the-loop specs with `{{key}}` placeholders, expanded by the caller (plain text
-- substitution, never evaluated). A pattern never changes once registered: register a new version.
CREATE TABLE work_hitl_patterns (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     text NOT NULL,
    spec        jsonb NOT NULL,
    parameters  jsonb NOT NULL DEFAULT '[]',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, name, version)
);
-- Subscriptions and chunk streams (the publish path that records chunks, routes and fans out is
-- in the functions files).
--
-- A subscription binds a subscriber to a broadcast queue with a filter (the routing condition
-- language). Each message published into a broadcast queue gets one delivery per active
-- subscription whose filter matches, written in the publish transaction; the message itself is
-- then `delivering` (not claimable by plain claims) until every delivery has ended, when it
-- becomes `completed`. A delivery is claimed, completed, failed and released on its own, with its
-- own attempts and claim token, so each subscription processes every message once.
-- Routing runs inside the publish call too: the rules choose the message's queue (and changes)
-- before the one INSERT (work_publish), so a message is never visible in two places or in none.

CREATE TABLE work_subscriptions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id         uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    tenant_id        uuid NOT NULL,
    queue_id         bigint NOT NULL REFERENCES work_queues(id) ON DELETE CASCADE,
    subscriber_type  text NOT NULL,
    subscriber_id    text NOT NULL,
    filter           jsonb,
    delivery_mode    text NOT NULL DEFAULT 'pull' CHECK (delivery_mode IN ('pull', 'push')),
    push_url         text,             -- push: where the agent POSTs each delivery
    push_secret      text,             -- push: the HMAC-SHA256 key of its signature (shown once)
    auto_claim       boolean NOT NULL DEFAULT false,
    max_in_flight    int NOT NULL DEFAULT 100,
    state            text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused')),
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_subscriptions_queue ON work_subscriptions (queue_id) WHERE state = 'active';
CREATE INDEX work_subscriptions_scope ON work_subscriptions (scope_id, created_at);
CREATE INDEX work_subscriptions_push ON work_subscriptions (id) WHERE delivery_mode = 'push' AND state = 'active';

CREATE TABLE work_deliveries (
    subscription_id  uuid NOT NULL REFERENCES work_subscriptions(id) ON DELETE CASCADE,
    message_id       uuid NOT NULL REFERENCES work_messages(id) ON DELETE CASCADE,
    seq              bigint NOT NULL,  -- the message's, for the order of a pull
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'claimed', 'completed', 'dead_lettered', 'expired')),
    visible_at       timestamptz NOT NULL,
    attempts         int NOT NULL DEFAULT 0,
    claim_token      uuid,
    claimed_at       timestamptz,
    failure_reason   text,
    response         jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at         timestamptz,
    PRIMARY KEY (subscription_id, message_id)
);
CREATE INDEX work_deliveries_pull ON work_deliveries (subscription_id, seq) WHERE state = 'pending';
CREATE INDEX work_deliveries_claimed ON work_deliveries (subscription_id, visible_at) WHERE state = 'claimed';
CREATE INDEX work_deliveries_message ON work_deliveries (message_id);

-- ---- chunk streams ------------------------------------------------------------------------------

-- A stream: chunks published as messages carrying `stream` {id, seq, final}, assembled in `seq`
-- order. It is `complete` once the final chunk and every chunk before it arrived, `cancelled` when
-- cancelled while open (no chunk is accepted then).
CREATE TABLE work_streams (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope_id     uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    stream_key   text NOT NULL,
    queue_id     bigint REFERENCES work_queues(id) ON DELETE SET NULL,  -- where its first chunk went
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'complete', 'cancelled')),
    chunks       int NOT NULL DEFAULT 0,
    final_seq    int,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at     timestamptz,
    UNIQUE (scope_id, stream_key)
);
CREATE INDEX work_streams_state ON work_streams (scope_id, state, created_at);

CREATE TABLE work_stream_chunks (
    stream      bigint NOT NULL REFERENCES work_streams(id) ON DELETE CASCADE,
    seq         int NOT NULL,
    message_id  uuid NOT NULL REFERENCES work_messages(id) ON DELETE CASCADE,
    PRIMARY KEY (stream, seq)
);
CREATE INDEX work_stream_chunks_message ON work_stream_chunks (message_id);
-- The work surface's access control: work API keys (rows of api_keys with role `work`), scope
-- grants, per-queue allow/deny entries, and trusted scopes for cross-scope routing.
--
-- Work keys resolve through the same one-query lookup as every key. A work key holds only its
-- `allowed_operations` (kept in `scopes`); its role `work` ranks below `read`, so no other surface
-- accepts it. Rotation keeps the old hash in `previous_hash` until `previous_valid_until`.
--
-- The ACL is checked by `work_acl_check(caller)` in the same statement that loads the scope (one
-- round trip): on the hot paths from work_scope_of, which reads the caller from a transaction-local
-- setting; elsewhere called in the FROM beside the loader. The counters on work_scopes, kept by
-- triggers, say whether a scope has anything to look at, so a scope without ACL rows costs nothing.

-- ---- work API keys ------------------------------------------------------------------------------


-- ---- ACL ----------------------------------------------------------------------------------------

CREATE TABLE work_acl_grants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    actor_type  text NOT NULL,
    actor_id    text NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'publisher', 'consumer', 'manager')),
    conditions  jsonb,                   -- NULL or {"not_before"?, "not_after"?}
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_acl_grants_actor ON work_acl_grants (scope_id, actor_type, actor_id);

CREATE TABLE work_queue_acl (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    queue_id    bigint NOT NULL REFERENCES work_queues(id) ON DELETE CASCADE,
    actor_type  text NOT NULL,
    actor_id    text NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'publisher', 'consumer', 'manager')),
    effect      text NOT NULL DEFAULT 'allow' CHECK (effect IN ('allow', 'deny')),
    conditions  jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_queue_acl_actor ON work_queue_acl (queue_id, actor_type, actor_id);
CREATE INDEX work_queue_acl_scope ON work_queue_acl (scope_id, created_at);

CREATE TABLE work_trusted_scopes (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id        uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    target_scope_id uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    direction       text NOT NULL DEFAULT 'outbound' CHECK (direction IN ('outbound', 'inbound', 'both')),
    allowed_types   text[],              -- NULL: any message type
    allowed_queues  uuid[],              -- queues of the receiving scope; NULL: any
    identity_mode   text NOT NULL DEFAULT 'source' CHECK (identity_mode IN ('source', 'scope')),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, target_scope_id)
);
CREATE INDEX work_trusted_scopes_target ON work_trusted_scopes (target_scope_id);
-- The work surface's lifecycle journal: every moment of a message's life (published, claimed,
-- completed, failed, released, extended, cancelled, dead-lettered, expired) and every management
-- change is written once, as one narrow row of `work_journal`, in the transaction that makes it.
-- That row is both the audit record (the audit routes read the journal) and the source of the
-- scope's events: the `_events` queue is materialised from the journal when it is read (claimed,
-- listed, looked at, counted), not written on every completion. A completion of 100 messages thus
-- writes 100 narrow rows with one index (two when they carry correlation ids) instead of 100 full
-- message rows with eight.
CREATE TABLE work_journal (
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    scope_id       uuid,                 -- NULL: a tenant-level record (API keys)
    tenant_id      uuid NOT NULL,
    at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    event_type     text NOT NULL,        -- scaiqueue.message.completed, scaiqueue.queue.created, ...
    resource_type  text NOT NULL DEFAULT 'message',
    resource_id    text,                 -- NULL for a message: its message_id
    message_id     uuid,
    queue_id       bigint,               -- work_queues.id of a message's queue
    correlation_id text,
    actor_type     text,
    actor_id       text,
    attempts       int,
    outcome        text NOT NULL DEFAULT 'success',
    emit           boolean NOT NULL DEFAULT false,  -- copied into the scope's `_events`
    payload        jsonb                 -- small: reason, seconds, claimed_by, details
) WITH (fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05);
-- One index on the hot path: a scope's rows in order (materialising `_events`, the audit pages).
CREATE INDEX work_journal_scope ON work_journal (scope_id, seq);
-- A correlation chain's trace; messages without a correlation id do not enter it.
CREATE INDEX work_journal_correlation ON work_journal (scope_id, correlation_id, seq)
    WHERE correlation_id IS NOT NULL;

-- How far each scope's `_events` has been materialised from the journal.
CREATE TABLE work_journal_marks (
    scope_id uuid PRIMARY KEY REFERENCES work_scopes(id) ON DELETE CASCADE,
    upto     bigint NOT NULL DEFAULT 0
);
-- GDPR jobs of the work surface: erasure (redact or delete) and export of one actor's data.
--
-- A job is a row of work_gdpr_jobs worked through by the work-gdpr agent in bounded batches: each
-- batch is one call of a step function, in the transaction that holds the job row (FOR UPDATE SKIP
-- LOCKED), and records the step's cursor and progress with it, so a job resumes where its last
-- batch committed and two agents never work on the same job at once.
--
-- Every step function has one signature, (job, cursor after, limit) -> (n changed, next cursor;
-- NULL once the step is done), named work_gdpr_<erase|export>_<step>; the step lists are data in
-- postbox.work.gdpr, so another table's step (an audit journal's) is one more function and one
-- more name in the list.
--
-- What belongs to an actor (actor_type, actor_id):
--   * messages it published (source_type, source_id), with the dead-letter copies of them;
--   * its claims on any message (claimed_by = actor_id): the claim, its response, its fail reason;
--   * subscriptions whose subscriber it is, and their deliveries (responses, fail reasons);
--   * in events (`_events`): the correlation ids of its messages' events, the claimer, responses
--     and reasons its claims and deliveries put in events' payloads.
-- Redact overwrites those fields with a marker ({"redacted": true} for JSON, 'redacted' or NULL
-- for text); delete removes the rows it owns outright (its messages and their events and
-- deliveries, its subscriptions and their deliveries) and redacts its marks on others' messages.

CREATE TABLE work_gdpr_jobs (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id         uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    kind              text NOT NULL CHECK (kind IN ('erasure', 'export')),
    mode              text CHECK (mode IN ('redact', 'delete')),          -- erasure
    format            text CHECK (format IN ('jsonl', 'json')),           -- export
    compression       text CHECK (compression IN ('none', 'zstd')),       -- export
    actor_type        text NOT NULL,
    actor_id          text NOT NULL,
    requested_by_type text,
    requested_by_id   text,
    state             text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued', 'running', 'completed', 'failed')),
    step              int NOT NULL DEFAULT 0,        -- index in the kind's step list
    cursor            text,                          -- where the current step goes on
    progress          jsonb NOT NULL DEFAULT '{}',   -- {step: rows processed}
    attempts          int NOT NULL DEFAULT 0,        -- batches that failed (3 fail the job)
    error             text,
    result            jsonb,                         -- export: where the file is, its size and records
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at        timestamptz,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at      timestamptz
);
CREATE INDEX work_gdpr_jobs_due ON work_gdpr_jobs (created_at) WHERE state IN ('queued', 'running');

-- An export's records, one part per batch (JSON lines), until the agent writes the file.
CREATE TABLE work_gdpr_export_parts (
    job_id   uuid NOT NULL REFERENCES work_gdpr_jobs(id) ON DELETE CASCADE,
    part     int NOT NULL,
    records  int NOT NULL,
    lines    text NOT NULL,
    PRIMARY KEY (job_id, part)
);

-- Exports kept in the database (when no export bucket is configured): served by the download route.
CREATE TABLE work_gdpr_export_files (
    job_id     uuid PRIMARY KEY REFERENCES work_gdpr_jobs(id) ON DELETE CASCADE,
    content    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);


-- Pull subscriptions with `auto_claim`: their deliveries are claimed for them as they arrive (the
-- work-auto-claim agent assigns those that waited).
CREATE INDEX work_subscriptions_auto_claim ON work_subscriptions (id)
    WHERE auto_claim AND delivery_mode = 'pull' AND state = 'active';
-- The audit journal in GDPR erasure and export (one step of each kind of job).
--
-- The journal is walked by `seq` in ranges (a BRIN index, nearly free to keep on an append-only
-- table, finds a range without a scan), the tenant's rows of each range only. Erasure:
--   - rows about the actor's own messages (it published them): `delete` removes them; `redact`
--     clears their correlation id and replaces their payload by the marker;
--   - rows the actor wrote (its claims, completions, management changes), and rows whose payload
--     names it as the claimer: the actor becomes `redacted`, the payload the marker. The audit log
--     keeps that something happened, not who did it.
-- The step runs first: it finds the actor's messages before the message step changes them.
-- Export: every row the actor wrote.

CREATE INDEX work_journal_seq_brin ON work_journal USING brin (seq);

-- The roles. `postbox_app` is what every function but `migrate` connects as: DML on the tables and
-- EXECUTE on the functions, nothing else (no DDL, no TRUNCATE, no writes to the migrator's tables).
-- `postbox_listen` only registers long-poll waiters and LISTENs, on a direct connection to the
-- cluster (see docs/architecture.md). Both are created without LOGIN: on AWS the migrate function
-- gives them their login (a rotated password, IAM authentication); locally nothing logs in as them.
-- Roles belong to the server, not the database, so creating them tolerates a concurrent creator.
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['postbox_app', 'postbox_listen'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END;
        END IF;
    END LOOP;
END $$;

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO postbox_app, postbox_listen;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO postbox_app;
-- The migrator's bookkeeping (created before this file runs) may be read, not written.
REVOKE INSERT, UPDATE, DELETE ON schema_migrations, schema_functions FROM postbox_app;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO postbox_app;
-- Whatever is created later (the functions files, later table migrations: they run as the same
-- owner) is granted the same way.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO postbox_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO postbox_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO postbox_app;
GRANT SELECT, INSERT, DELETE ON waiters TO postbox_listen;
