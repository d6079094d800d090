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

-- The one way a segment is appended: allocate offsets under the partition row's lock and insert
-- the segment. Returns the first offset. Called by the engine's Python `store.append` and by
-- surfaces' own one-round-trip SQL functions, so the statement lives in one place.
CREATE FUNCTION log_append(p_partition bigint, p_n int, p_codec smallint, p_raw int, p_frames bytea)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_first bigint;
BEGIN
    UPDATE log_partitions
    SET next_offset = next_offset + p_n, stored_bytes = stored_bytes + octet_length(p_frames),
        last_append_at = clock_timestamp()
    WHERE id = p_partition
    RETURNING next_offset - p_n INTO v_first;
    IF v_first IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such log partition.';
    END IF;
    INSERT INTO log_segments (partition_id, end_offset, first_offset, codec, raw_bytes, frames)
    VALUES (p_partition, v_first + p_n, v_first, p_codec, p_raw, p_frames);
    RETURN v_first;
END $$;
