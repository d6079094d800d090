-- Keyed streams (`/v1/streams`): the statements more than one path runs, and the publish as one
-- function. Payloads live in the stream's log partition (log_append); a message's changing state
-- lives in stream_messages. Lock order, everywhere: stream_messages rows, then the streams row,
-- then stream_sub_keys rows (in unit order), then stream_pending rows, then stream_subscriptions.

-- A stream row and its log partition (owner_kind 'stream', one partition named ''), in the caller's
-- transaction, within the plan's streams (PB403 max_keyed_streams). NULL when the project already
-- has a stream of that name (the caller decides whether that is a conflict), never refused for the
-- limit then: the count is taken after the insert, under the lock taken before it. The name was
-- checked by the caller against the keyed-stream name rule.
CREATE OR REPLACE FUNCTION keyed_stream_insert(
    p_tenant uuid, p_project uuid, p_name text, p_retention text, p_retention_ms bigint, p_max_backlog bigint
) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
    v_partition bigint;
BEGIN
    PERFORM plan_limit_lock(p_tenant, 'max_keyed_streams');
    INSERT INTO streams (tenant_id, project_id, name, retention, retention_ms, max_backlog)
    VALUES (p_tenant, p_project, p_name, p_retention, p_retention_ms, p_max_backlog)
    ON CONFLICT (project_id, name) DO NOTHING RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        RETURN NULL;
    END IF;
    PERFORM plan_limit_check(p_tenant, 'max_keyed_streams', 0);
    INSERT INTO log_partitions (tenant_id, owner_kind, owner_id, name) VALUES (p_tenant, 'stream', v_id, '')
    ON CONFLICT (owner_kind, owner_id, name) DO UPDATE SET name = excluded.name RETURNING id INTO v_partition;
    UPDATE streams SET partition_id = v_partition WHERE id = v_id;
    RETURN v_id;
END $$;

-- Hand newly available messages (offset, ordering unit) to every subscription of the stream, or to
-- the one p_only names: a stream_pending row each, the unit's stream_sub_keys row created or moved
-- (its head is its oldest pending offset), the subscription's pending counter. Three statements in
-- the lock order (units in order, then pending rows, then the subscription rows): as one statement
-- with data-modifying CTEs, the subscriptions' UPDATE (the main query) ran before the units' upsert,
-- and a publish holding a subscription row while waiting for a unit an ack held deadlocked with it.
CREATE OR REPLACE FUNCTION keyed_stream_enqueue(p_stream bigint, p_offsets bigint[], p_units text[], p_only bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    subs bigint[] := ARRAY(SELECT id FROM stream_subscriptions
                           WHERE stream_id = p_stream AND (p_only IS NULL OR id = p_only) ORDER BY id);
BEGIN
    IF cardinality(subs) = 0 OR coalesce(cardinality(p_offsets), 0) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO stream_sub_keys AS k (sub_id, unit, pending, head)
    SELECT s.id, n.u, count(*), min(n.o)
    FROM unnest(subs) AS s(id) CROSS JOIN unnest(p_offsets, p_units) AS n(o, u)
    GROUP BY s.id, n.u ORDER BY s.id, n.u
    ON CONFLICT (sub_id, unit) DO UPDATE SET pending = k.pending + excluded.pending,
                                             head = least(k.head, excluded.head);
    INSERT INTO stream_pending (sub_id, "offset", unit)
    SELECT s.id, n.o, n.u FROM unnest(subs) AS s(id) CROSS JOIN unnest(p_offsets, p_units) AS n(o, u);
    UPDATE stream_subscriptions SET pending = pending + cardinality(p_offsets) WHERE id = ANY (subs);
END $$;

-- ---- The publish: one round trip for one message or a batch of up to 100 -------------------------
-- The caller has framed each message's record (p_frames, one frame each, so any subset of them is a
-- segment) and, when the whole batch compresses, packed all of them (p_packed, p_codec, p_raw); it
-- sends each payload's JSON size, a fresh message id per item, and the deployment's defaults.
--
-- In order: the project (the key's own when it is bound to one, else the one named); the stream,
-- locked (publishes to one stream take turns, which makes idempotency and the backlog check exact);
-- each item checked by the database clock (expires_at past or not after deliver_at, deliver_at
-- beyond the retention, payload over the plan's max_message_bytes); idempotency keys already
-- stored, or used by an earlier item of the batch, answer that message (replayed) and publish
-- nothing; the backlog cap (429, for the whole call, when anything would be published); then the
-- new messages are appended as one segment, indexed, counted, handed to the subscriptions, and
-- their waiters woken. A stream that does not exist is created here, and only when something is
-- published; a creation lost to a concurrent publisher runs the call again on the stream it made.
--
-- p_strict (a single publish): the first refused item raises its error and nothing happens.
-- Otherwise a refused item is an outcome and the others are published.
-- Rows: one 'item' row per input, in input order (r_outcome published | replayed | refused; a
-- refusal's SQLSTATE in r_state with its code and message; r_same is the earlier item of the batch
-- a replay repeats; the message's row as stored), then one 'segment' row per log segment holding
-- an already stored message a replay answers (its record is read from the segment's frames), when
-- p_documents asks for the messages' documents (a single publish; a batch answers ids and offsets).
CREATE OR REPLACE FUNCTION keyed_stream_publish(
    p_tenant uuid, p_key_project uuid, p_project text, p_name text,
    p_default_retention_ms bigint, p_default_max_backlog bigint, p_strict boolean,
    p_keys text[], p_idempotency text[], p_deliver_at timestamptz[], p_expires_at timestamptz[],
    p_sizes int[], p_ids text[], p_frames bytea[], p_codec smallint, p_raw int, p_packed bytea, p_documents boolean
) RETURNS TABLE (
    r_kind text, r_index int, r_outcome text, r_state text, r_code text, r_message text, r_same int,
    r_project text, r_offset bigint, r_msg_id text, r_key text, r_status text, r_idempotency text,
    r_deliver_at timestamptz, r_expires_at timestamptz, r_published_at timestamptz,
    r_codec smallint, r_frames bytea, r_ts bigint
) LANGUAGE plpgsql AS $$
DECLARE
    n int := coalesce(cardinality(p_sizes), 0);
    v_project_id uuid;
    v_project text;
    s streams;
    v_exists boolean;
    v_now timestamptz := clock_timestamp();
    v_retention bigint;
    v_max_bytes int;
    v_cap bigint;
    v_slowest bigint;
    v_first bigint;
    v_frames bytea;
    v_ready int;
    v_at int;
    outcome text[] := array_fill(NULL::text, ARRAY[n]);
    state text[] := array_fill(NULL::text, ARRAY[n]);
    code text[] := array_fill(NULL::text, ARRAY[n]);
    msg text[] := array_fill(NULL::text, ARRAY[n]);
    same int[] := array_fill(NULL::int, ARRAY[n]);
    offs bigint[] := array_fill(NULL::bigint, ARRAY[n]);  -- the offset each item answers with
    fresh int[] := '{}';                                 -- items published now, in input order
    seen_keys text[] := '{}';                            -- idempotency keys of `fresh`, and their items
    seen_items int[] := '{}';
    stored_keys text[] := '{}';
    stored_offsets bigint[] := '{}';
    replayed_offsets bigint[] := '{}';
BEGIN
    IF p_key_project IS NOT NULL THEN
        SELECT id, name INTO v_project_id, v_project FROM projects WHERE id = p_key_project;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'project_not_found',
                MESSAGE = 'the key''s project no longer exists';
        END IF;
    ELSE
        SELECT id, name INTO v_project_id, v_project FROM projects WHERE tenant_id = p_tenant AND name = p_project;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'project_not_found',
                MESSAGE = format('no project named %s', p_project);
        END IF;
    END IF;
    SELECT * INTO s FROM streams WHERE project_id = v_project_id AND name = p_name FOR UPDATE;
    v_exists := FOUND;
    v_retention := CASE WHEN v_exists AND s.retention IS NOT NULL THEN s.retention_ms ELSE p_default_retention_ms END;
    SELECT p.max_message_bytes INTO v_max_bytes FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = p_tenant;

    FOR i IN 1..n LOOP
        IF p_expires_at[i] IS NOT NULL AND p_expires_at[i] <= v_now THEN
            state[i] := 'PB400'; code[i] := 'invalid_expires_at'; msg[i] := 'expires_at is in the past.';
        ELSIF p_expires_at[i] IS NOT NULL AND p_deliver_at[i] IS NOT NULL AND p_expires_at[i] <= p_deliver_at[i] THEN
            state[i] := 'PB400'; code[i] := 'invalid_expires_at'; msg[i] := 'expires_at must be later than deliver_at.';
        ELSIF p_deliver_at[i] IS NOT NULL AND v_retention IS NOT NULL
              AND p_deliver_at[i] - v_now > v_retention * interval '1 millisecond' THEN
            state[i] := 'PB400'; code[i] := 'invalid_deliver_at';
            msg[i] := 'deliver_at is further away than the stream''s retention.';
        ELSIF p_sizes[i] > v_max_bytes THEN
            state[i] := 'PB413'; code[i] := 'payload_too_large';
            msg[i] := format('payload is larger than %s bytes.', v_max_bytes);
        END IF;
        IF state[i] IS NOT NULL THEN
            IF p_strict THEN
                RAISE EXCEPTION USING ERRCODE = state[i], DETAIL = code[i], MESSAGE = msg[i];
            END IF;
            outcome[i] := 'refused';
        END IF;
    END LOOP;

    IF v_exists AND EXISTS (SELECT 1 FROM unnest(p_idempotency) k WHERE k IS NOT NULL) THEN
        SELECT coalesce(array_agg(m.idempotency_key), '{}'), coalesce(array_agg(m."offset"), '{}')
        INTO stored_keys, stored_offsets
        FROM stream_messages m WHERE m.stream_id = s.id AND m.idempotency_key = ANY (p_idempotency);
    END IF;
    FOR i IN 1..n LOOP
        CONTINUE WHEN outcome[i] IS NOT NULL;
        IF p_idempotency[i] IS NOT NULL THEN
            v_at := array_position(stored_keys, p_idempotency[i]);
            IF v_at IS NOT NULL THEN
                outcome[i] := 'replayed'; offs[i] := stored_offsets[v_at];
                replayed_offsets := replayed_offsets || stored_offsets[v_at];
                CONTINUE;
            END IF;
            v_at := array_position(seen_keys, p_idempotency[i]);
            IF v_at IS NOT NULL THEN
                outcome[i] := 'replayed'; same[i] := seen_items[v_at];
                CONTINUE;
            END IF;
            seen_keys := seen_keys || p_idempotency[i];
            seen_items := seen_items || i;
        END IF;
        outcome[i] := 'published';
        fresh := fresh || i;
    END LOOP;

    IF cardinality(fresh) > 0 THEN
        IF NOT v_exists THEN
            IF keyed_stream_insert(p_tenant, v_project_id, p_name, NULL, NULL, NULL) IS NULL THEN
                -- another publisher created it meanwhile (and may have used these idempotency keys)
                RETURN QUERY SELECT * FROM keyed_stream_publish(
                    p_tenant, p_key_project, p_project, p_name, p_default_retention_ms, p_default_max_backlog,
                    p_strict, p_keys, p_idempotency, p_deliver_at, p_expires_at, p_sizes, p_ids, p_frames,
                    p_codec, p_raw, p_packed, p_documents);
                RETURN;
            END IF;
            SELECT * INTO s FROM streams WHERE project_id = v_project_id AND name = p_name FOR UPDATE;
        ELSE
            v_cap := coalesce(s.max_backlog, p_default_max_backlog);
            IF v_cap IS NOT NULL THEN
                SELECT max(pending) INTO v_slowest FROM stream_subscriptions WHERE stream_id = s.id;
                IF s.scheduled + coalesce(v_slowest, s.available) >= v_cap THEN
                    RAISE EXCEPTION USING ERRCODE = 'PB429', DETAIL = 'backlog_full',
                        MESSAGE = format('stream %s has reached its backlog cap of %s undelivered messages',
                                         p_name, v_cap);
                END IF;
            END IF;
        END IF;
        IF cardinality(fresh) = n AND p_packed IS NOT NULL THEN
            v_first := log_append(s.partition_id, n, p_codec, p_raw, p_packed);
        ELSE  -- the frames of what is published now, as they are (no compression in SQL)
            SELECT string_agg(p_frames[f], ''::bytea ORDER BY k) INTO v_frames FROM unnest(fresh) WITH ORDINALITY u(f, k);
            v_first := log_append(s.partition_id, cardinality(fresh), 0::smallint, octet_length(v_frames), v_frames);
        END IF;
        FOR k IN 1..cardinality(fresh) LOOP
            offs[fresh[k]] := v_first + k - 1;
        END LOOP;
        v_now := clock_timestamp();
        INSERT INTO stream_messages (stream_id, "offset", msg_id, key, unit, status, idempotency_key, deliver_at,
                                     expires_at, published_at)
        SELECT s.id, offs[f], p_ids[f], p_keys[f],
               CASE WHEN p_keys[f] IS NOT NULL THEN 'k:' || p_keys[f] ELSE 'm:' || offs[f] END,
               CASE WHEN p_deliver_at[f] > v_now THEN 'scheduled' ELSE 'available' END,
               p_idempotency[f], p_deliver_at[f], p_expires_at[f], v_now
        FROM unnest(fresh) AS u(f);
        SELECT count(*) INTO v_ready FROM unnest(fresh) AS u(f) WHERE p_deliver_at[f] IS NULL OR p_deliver_at[f] <= v_now;
        UPDATE streams SET messages = messages + cardinality(fresh), scheduled = scheduled + cardinality(fresh) - v_ready,
                           available = available + v_ready
        WHERE id = s.id;
        IF v_ready > 0 THEN
            PERFORM keyed_stream_enqueue(
                s.id,
                ARRAY(SELECT offs[f] FROM unnest(fresh) AS u(f) WHERE p_deliver_at[f] IS NULL OR p_deliver_at[f] <= v_now),
                ARRAY(SELECT CASE WHEN p_keys[f] IS NOT NULL THEN 'k:' || p_keys[f] ELSE 'm:' || offs[f] END
                      FROM unnest(fresh) AS u(f) WHERE p_deliver_at[f] IS NULL OR p_deliver_at[f] <= v_now),
                NULL);
            IF EXISTS (SELECT 1 FROM waiters WHERE channel = 'stream_' || s.id AND until > clock_timestamp()) THEN
                PERFORM pg_notify('stream_' || s.id, '');
            END IF;
        END IF;
    END IF;

    FOR i IN 1..n LOOP
        IF same[i] IS NOT NULL THEN
            offs[i] := offs[same[i]];
        END IF;
    END LOOP;
    RETURN QUERY
    SELECT 'item'::text, u.i::int, outcome[u.i], state[u.i], code[u.i], msg[u.i], same[u.i], v_project,
           m."offset", m.msg_id, m.key, m.status, m.idempotency_key, m.deliver_at, m.expires_at, m.published_at,
           NULL::smallint, NULL::bytea, NULL::bigint
    FROM generate_series(1, n) AS u(i)
    LEFT JOIN stream_messages m ON m.stream_id = s.id AND m."offset" = offs[u.i]
    ORDER BY u.i;
    IF p_documents AND cardinality(replayed_offsets) > 0 THEN
        RETURN QUERY
        SELECT 'segment'::text, NULL::int, NULL::text, NULL::text, NULL::text, NULL::text, NULL::int, NULL::text,
               g.first_offset, NULL::text, NULL::text, NULL::text, NULL::text, NULL::timestamptz, NULL::timestamptz,
               NULL::timestamptz, g.codec, g.frames, g.ts_ms
        FROM log_segments_at(s.partition_id, replayed_offsets) g;
    END IF;
END $$;
