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
