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
