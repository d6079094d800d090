-- ---- The append as one function: one round trip per append --------------------------------------
-- Locks the stream's row, then applies the protocol's checks in the order the service documents:
-- found / gone, Stream-Incarnation, closed, content type, (the caller's body validation), producer
-- (epoch, seq), Stream-Seq; then appends one segment to the stream's log partition (the log engine's
-- append statement, postbox.log.store._APPEND, for one record already framed by the caller), saves
-- the producer, closes, renews a sliding lifetime and wakes long-pollers, all in one transaction.
-- Refusals are outcomes, not exceptions: the caller turns them into errors whose details become
-- protocol headers (Stream-Next-Offset, Producer-Epoch, Producer-Expected-Seq, ...).
--   r_outcome: missing | gone | incarnation | closed | closed_again | closed_duplicate | content_type |
--              invalid | producer_gap | producer_limit | epoch_stale | epoch_seq | duplicate |
--              seq_conflict | appended | closed_now
--   r_tail: the stream's tail (after the write); r_offset: where the appended data starts;
--   r_value: the expected producer seq (producer_gap), current epoch (epoch_stale) or last seq (duplicate).
-- p_frames NULL means no body: the write only closes. p_invalid: the body failed validation, answer
-- `invalid` once the checks that come before validation have passed.
--
-- It refuses by raising, as every other SQL function does: ERRCODE = 'PB4xx' (the status),
-- DETAIL = the protocol's error code, HINT = a JSON object of the details the protocol's headers
-- carry (Stream-Next-Offset, Producer-Epoch, ...). Only successes come back as a row. A body the
-- service found invalid (JSON mode) arrives as its message and code, raised in its place in the
-- order of the checks.
CREATE OR REPLACE FUNCTION durable_append(
    p_project uuid, p_name text, p_media text, p_incarnation text, p_seq text, p_close boolean,
    p_producer text, p_epoch bigint, p_pseq bigint, p_token text, p_max_producers int,
    p_invalid text, p_invalid_code text, p_codec smallint, p_raw int, p_frames bytea,
    OUT r_outcome text, OUT r_tail bigint, OUT r_offset bigint, OUT r_incarnation text, OUT r_value bigint
) LANGUAGE plpgsql AS $$
DECLARE
    s durable_streams;
    v_state durable_producers;
    v_body boolean := p_frames IS NOT NULL OR p_invalid IS NOT NULL;
    v_close boolean := p_close OR NOT (p_frames IS NOT NULL OR p_invalid IS NOT NULL);
    v_first bigint;
BEGIN
    SELECT * INTO s FROM durable_streams WHERE project_id = p_project AND name = p_name FOR UPDATE;
    IF NOT FOUND OR (NOT s.deleted AND s.forks = 0 AND (
            (s.expires_at IS NOT NULL AND s.expires_at <= clock_timestamp())
         OR (s.ttl_seconds IS NOT NULL AND s.accessed_at + s.ttl_seconds * interval '1 second' <= clock_timestamp())))
    THEN
        -- missing, or expired with no fork reading it (the service's lifetime rule removes it)
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'STREAM_NOT_FOUND', MESSAGE = 'Stream not found.';
    END IF;
    r_incarnation := s.incarnation;
    IF s.deleted OR (s.expires_at IS NOT NULL AND s.expires_at <= clock_timestamp())
        OR (s.ttl_seconds IS NOT NULL AND s.accessed_at + s.ttl_seconds * interval '1 second' <= clock_timestamp()) THEN
        -- deleted, or expired while forks read it (soft-deleted by the lifetime rule)
        RAISE EXCEPTION USING ERRCODE = 'PB410', DETAIL = 'STREAM_GONE', MESSAGE = 'The stream was deleted.',
            HINT = json_build_object('incarnation', s.incarnation)::text;
    END IF;
    IF p_incarnation IS NOT NULL AND p_incarnation <> s.incarnation THEN
        RAISE EXCEPTION USING ERRCODE = 'PB412', DETAIL = 'INCARNATION_MISMATCH',
            MESSAGE = 'The stream is not the one that answered this Stream-Incarnation.',
            HINT = json_build_object('incarnation', s.incarnation)::text;
    END IF;
    SELECT s.base_offset + p.next_offset INTO r_tail FROM log_partitions p WHERE p.id = s.partition_id;
    IF s.closed THEN
        IF p_token IS NOT NULL AND s.closed_by = p_token THEN
            r_outcome := 'closed_duplicate'; RETURN;
        ELSIF NOT v_body AND p_producer IS NULL THEN
            r_outcome := 'closed_again'; RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'STREAM_CLOSED', MESSAGE = 'The stream is closed.',
            HINT = json_build_object('closed', true, 'next_offset', r_tail)::text;
    END IF;
    IF v_body THEN
        IF p_media <> lower(btrim(split_part(s.content_type, ';', 1), E' \t\r\n')) THEN
            RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'CONTENT_TYPE_MISMATCH',
                MESSAGE = 'Content-Type does not match the stream''s.';
        END IF;
        IF p_invalid IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = p_invalid_code, MESSAGE = p_invalid;
        END IF;
    END IF;
    IF p_producer IS NOT NULL THEN
        SELECT * INTO v_state FROM durable_producers WHERE stream_id = s.id AND producer_id = p_producer;
        IF NOT FOUND THEN
            IF p_pseq <> 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'PRODUCER_SEQ_CONFLICT',
                    MESSAGE = 'Producer sequence gap.',
                    HINT = json_build_object('expected_seq', 0, 'received_seq', p_pseq)::text;
            END IF;
            IF (SELECT count(*) FROM durable_producers WHERE stream_id = s.id) >= p_max_producers THEN
                RAISE EXCEPTION USING ERRCODE = 'PB429', DETAIL = 'PRODUCER_LIMIT',
                    MESSAGE = 'Too many producers on this stream.', HINT = '{"retry_after": 60}';
            END IF;
        ELSIF p_epoch < v_state.epoch THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'PRODUCER_EPOCH_STALE', MESSAGE = 'Stale producer epoch.',
                HINT = json_build_object('current_epoch', v_state.epoch)::text;
        ELSIF p_epoch > v_state.epoch THEN
            IF p_pseq <> 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'INVALID_PRODUCER',
                    MESSAGE = 'A new producer epoch starts at sequence 0.';
            END IF;
        ELSIF p_pseq <= v_state.last_seq THEN
            r_outcome := 'duplicate'; r_value := v_state.last_seq; RETURN;
        ELSIF p_pseq <> v_state.last_seq + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'PRODUCER_SEQ_CONFLICT', MESSAGE = 'Producer sequence gap.',
                HINT = json_build_object('expected_seq', v_state.last_seq + 1, 'received_seq', p_pseq)::text;
        END IF;
    END IF;
    IF v_body THEN
        -- Stream-Seq compares bytewise (the C collation orders UTF-8 by bytes)
        IF p_seq IS NOT NULL AND s.last_seq IS NOT NULL AND p_seq COLLATE "C" <= s.last_seq COLLATE "C" THEN
            RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'STREAM_SEQ_CONFLICT', MESSAGE = 'Stream-Seq must increase.';
        END IF;
        v_first := log_append(s.partition_id, 1, p_codec, p_raw, p_frames);
        r_offset := s.base_offset + v_first;
        r_tail := r_offset + 1;
        r_outcome := 'appended';
    ELSE
        r_outcome := 'closed_now';
    END IF;
    IF p_producer IS NOT NULL THEN
        INSERT INTO durable_producers (stream_id, producer_id, epoch, last_seq)
        VALUES (s.id, p_producer, p_epoch, p_pseq)
        ON CONFLICT (stream_id, producer_id) DO UPDATE
        SET epoch = excluded.epoch, last_seq = excluded.last_seq, updated_at = clock_timestamp();
    END IF;
    IF (v_body AND p_seq IS NOT NULL) OR v_close OR s.ttl_seconds IS NOT NULL THEN
        UPDATE durable_streams
        SET accessed_at = clock_timestamp(),
            last_seq = CASE WHEN v_body THEN coalesce(p_seq, last_seq) ELSE last_seq END,
            closed = v_close,
            closed_by = CASE WHEN v_close THEN p_token ELSE closed_by END
        WHERE id = s.id;
    END IF;
    IF EXISTS (SELECT 1 FROM waiters WHERE channel = 'durable_' || s.id AND until > clock_timestamp()) THEN
        PERFORM pg_notify('durable_' || s.id, '');
    END IF;
END $$;
