-- The one way a segment is appended: allocate offsets under the partition row's lock and insert
-- the segment. Returns the first offset. Called by the engine's Python `store.append` and by
-- surfaces' own one-round-trip SQL functions, so the statement lives in one place.
CREATE OR REPLACE FUNCTION log_append(p_partition bigint, p_n int, p_codec smallint, p_raw int, p_frames bytea)
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

-- The segments holding the records at scattered offsets: one index probe per offset, each segment
-- once. Offsets removed by retention (or never written) find nothing. The engine's Python reads
-- (`store.read_at`) and surfaces' one-round-trip functions both read through it.
CREATE OR REPLACE FUNCTION log_segments_at(p_partition bigint, p_offsets bigint[])
RETURNS TABLE (first_offset bigint, codec smallint, frames bytea, ts_ms bigint) LANGUAGE sql STABLE AS $$
    SELECT DISTINCT g.first_offset, g.codec, g.frames, (extract(epoch FROM g.created_at) * 1000)::bigint
    FROM unnest(p_offsets) AS o(want)
    CROSS JOIN LATERAL (
        SELECT l.first_offset, l.codec, l.frames, l.created_at FROM log_segments l
        WHERE l.partition_id = p_partition AND l.end_offset > o.want
        ORDER BY l.end_offset LIMIT 1
    ) g
    WHERE g.first_offset <= o.want
$$;
