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
CREATE FUNCTION durable_append(
    p_project uuid, p_name text, p_media text, p_incarnation text, p_seq text, p_close boolean,
    p_producer text, p_epoch bigint, p_pseq bigint, p_token text, p_max_producers int, p_invalid boolean,
    p_codec smallint, p_raw int, p_frames bytea,
    OUT r_outcome text, OUT r_tail bigint, OUT r_offset bigint, OUT r_incarnation text, OUT r_value bigint
) LANGUAGE plpgsql AS $$
DECLARE
    s durable_streams;
    v_state durable_producers;
    v_body boolean := p_frames IS NOT NULL OR p_invalid;
    v_close boolean := p_close OR NOT (p_frames IS NOT NULL OR p_invalid);
    v_first bigint;
BEGIN
    SELECT * INTO s FROM durable_streams WHERE project_id = p_project AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        r_outcome := 'missing'; RETURN;
    END IF;
    r_incarnation := s.incarnation;
    IF NOT s.deleted AND ((s.expires_at IS NOT NULL AND s.expires_at <= clock_timestamp())
        OR (s.ttl_seconds IS NOT NULL AND s.accessed_at + s.ttl_seconds * interval '1 second' <= clock_timestamp())) THEN
        -- expired: answered as the service's lifetime rule answers (removed, or gone while forks read it)
        r_outcome := CASE WHEN s.forks > 0 THEN 'gone' ELSE 'missing' END; RETURN;
    END IF;
    IF s.deleted THEN
        r_outcome := 'gone'; RETURN;
    END IF;
    IF p_incarnation IS NOT NULL AND p_incarnation <> s.incarnation THEN
        r_outcome := 'incarnation'; RETURN;
    END IF;
    SELECT s.base_offset + p.next_offset INTO r_tail FROM log_partitions p WHERE p.id = s.partition_id;
    IF s.closed THEN
        r_outcome := CASE WHEN p_token IS NOT NULL AND s.closed_by = p_token THEN 'closed_duplicate'
                          WHEN NOT v_body AND p_producer IS NULL THEN 'closed_again'
                          ELSE 'closed' END;
        RETURN;
    END IF;
    IF v_body THEN
        IF p_media <> lower(btrim(split_part(s.content_type, ';', 1), E' \t\r\n')) THEN
            r_outcome := 'content_type'; RETURN;
        END IF;
        IF p_invalid THEN
            r_outcome := 'invalid'; RETURN;
        END IF;
    END IF;
    IF p_producer IS NOT NULL THEN
        SELECT * INTO v_state FROM durable_producers WHERE stream_id = s.id AND producer_id = p_producer;
        IF NOT FOUND THEN
            IF p_pseq <> 0 THEN
                r_outcome := 'producer_gap'; r_value := 0; RETURN;
            END IF;
            IF (SELECT count(*) FROM durable_producers WHERE stream_id = s.id) >= p_max_producers THEN
                r_outcome := 'producer_limit'; RETURN;
            END IF;
        ELSIF p_epoch < v_state.epoch THEN
            r_outcome := 'epoch_stale'; r_value := v_state.epoch; RETURN;
        ELSIF p_epoch > v_state.epoch THEN
            IF p_pseq <> 0 THEN
                r_outcome := 'epoch_seq'; RETURN;
            END IF;
        ELSIF p_pseq <= v_state.last_seq THEN
            r_outcome := 'duplicate'; r_value := v_state.last_seq; RETURN;
        ELSIF p_pseq <> v_state.last_seq + 1 THEN
            r_outcome := 'producer_gap'; r_value := v_state.last_seq + 1; RETURN;
        END IF;
    END IF;
    IF v_body THEN
        -- Stream-Seq compares bytewise (the C collation orders UTF-8 by bytes)
        IF p_seq IS NOT NULL AND s.last_seq IS NOT NULL AND p_seq COLLATE "C" <= s.last_seq COLLATE "C" THEN
            r_outcome := 'seq_conflict'; RETURN;
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
