-- The batch extension's publish: up to 100 messages into one queue in one call and one transaction,
-- each published as a single publish is (work_publish_routed: its checks, routing, chunk streams,
-- fan-out, idempotency and depth), each answered on its own.
--
-- Into a plain queue (work_publish_plain: nothing a publish does there but write the message, its
-- journal row and its count) the entries are written together, set-based: one INSERT of their rows,
-- one of their journal rows, one count (work_publish_set). Otherwise each runs through the single
-- publish's functions, and a refused entry spoils none of the others: the entries run together
-- under one savepoint; when one is refused, the savepoint is rolled back, that entry keeps its
-- refusal, and the others run again (after the second refusal, each under a savepoint of its own,
-- so a batch of refusals costs no more than one pass each; a batch that is all published takes one).
-- Either way an idempotency key seen earlier in the same batch is a replay of that entry (or its
-- conflict), as it would be across two calls. With p_atomic, the first refusal undoes the whole
-- batch instead, and the answer says which entry it was: nothing is published unless every entry is.

-- One entry's answer as the route reads it: {"ok": true, "replayed", "message": {id, queue_id, state}},
-- or {"ok": false, "error": {"sqlstate", "code", "message", "hint"}} (the fields of the error a
-- single publish raises, mapped by the domain as that one's are).
CREATE OR REPLACE FUNCTION work_publish_refusal(p_state text, p_message text, p_code text, p_hint text)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('ok', false, 'error', jsonb_build_object('sqlstate', p_state, 'code', p_code,
                                                                       'message', p_message, 'hint', p_hint))
$$;

-- Whether a batch's publish into q is plain: the scope active, the queue not paused and without a
-- depth limit, no publish-time routing rule in the scope (work_publish_into), a competing queue no
-- auto-claiming subscription takes from (work_fan_out), no chunk of a stream (work_publish_routed).
-- What a single publish would do there is then exactly what work_publish_set does.
CREATE OR REPLACE FUNCTION work_publish_plain(s work_scopes, q work_queues, p_msgs jsonb) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT s.state = 'active' AND q.state <> 'paused' AND q.max_depth = 0 AND q.consumer_mode = 'competing'
       AND NOT EXISTS (SELECT 1 FROM work_routing_rules r
                       WHERE r.scope_id = s.id AND r.trigger = 'message_published' AND r.enabled)
       AND NOT EXISTS (SELECT 1 FROM work_subscriptions x WHERE x.queue_id = q.id AND x.state = 'active'
                       AND x.auto_claim AND x.delivery_mode = 'pull')
       AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(p_msgs) e WHERE e.value ? 'stream')
$$;

-- A plain batch's publish, set-based, answering each entry as work_publish would: its rows written
-- by one INSERT (work_new_message's columns, in the entries' order, so their claim order is theirs),
-- their journal rows by one more, their count once. An entry whose idempotency key names a message
-- of the queue (one published before, earlier in this batch, or by a concurrent publish that
-- committed first) is that message's replay, or SCAIQUEUE_IDEMPOTENCY_CONFLICT for another body.
CREATE OR REPLACE FUNCTION work_publish_set(p_tenant uuid, s work_scopes, q work_queues, p_msgs jsonb,
                                            p_source text)
RETURNS jsonb[] LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_emit boolean := s.emit_published AND NOT q.is_system;
    v_out jsonb[] := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_msgs)]);
    v_ids uuid[] := '{}';
    v_corr text[] := '{}';
    v_types text[] := '{}';
    v_actors text[] := '{}';
    r record;
BEGIN
    IF v_emit THEN  -- before any counter row, as work_publish takes it
        PERFORM work_journal_lock(s.id);
    END IF;
    FOR r IN
        WITH entries AS (
            SELECT e.n::int AS n, e.m, work_uuid7() AS id
            FROM jsonb_array_elements(p_msgs) WITH ORDINALITY e(m, n)
            WHERE jsonb_typeof(e.m) = 'object'
              AND NOT EXISTS (SELECT 1 FROM work_messages k
                              WHERE k.queue_id = q.id AND k.idempotency_key = e.m->>'idempotency_key')
        ), made AS (
            INSERT INTO work_messages AS w (
                id, queue_id, scope_id, tenant_id, rank, visible_at, aged_at, message_type, tier, score, labels,
                content_type, body, correlation_id, causation_id, parent_id, source_type, source_id, ttl_seconds,
                deadline, expires_at, max_retries, visibility_timeout_s, idempotency_key, hitl_spec)
            SELECT e.id, x.* FROM entries e CROSS JOIN LATERAL work_new_message(p_tenant, s, q, e.m, p_source, v_now) x
            ORDER BY e.n
            ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
            RETURNING w.id, w.correlation_id, w.source_type, w.source_id
        )
        SELECT e.n, d.id, d.correlation_id, d.source_type, d.source_id
        FROM made d JOIN entries e ON e.id = d.id ORDER BY e.n
    LOOP
        v_out[r.n] := jsonb_build_object('ok', true, 'replayed', false, 'message',
                                         jsonb_build_object('id', r.id, 'queue_id', q.queue_id, 'state', 'pending'));
        v_ids := v_ids || r.id;
        v_corr := v_corr || r.correlation_id;
        v_types := v_types || r.source_type;
        v_actors := v_actors || r.source_id;
    END LOOP;
    -- One journal row for the batch (one per publisher named, in the batch's order), as a single
    -- publish writes one: it also counts their move into the queue's depth (work_journal.sql).
    FOR r IN
        SELECT u.t, u.a, array_agg(u.id ORDER BY u.o) AS ids, array_agg(u.c ORDER BY u.o) AS cs
        FROM unnest(v_ids, v_corr, v_types, v_actors) WITH ORDINALITY u(id, c, t, a, o)
        GROUP BY u.t, u.a ORDER BY min(u.o)
    LOOP
        PERFORM work_journal_published(s, q, r.ids, r.cs, r.t, r.a, v_emit);
    END LOOP;
    FOR r IN
        SELECT e.n, m.id, m.state, m.body IS DISTINCT FROM e.m->'body' AS other
        FROM jsonb_array_elements(p_msgs) WITH ORDINALITY e(m, n)
        JOIN work_messages m ON m.queue_id = q.id AND m.idempotency_key = e.m->>'idempotency_key'
        WHERE jsonb_typeof(e.m) = 'object' AND v_out[e.n] IS NULL
    LOOP
        v_out[r.n] := CASE WHEN r.other
            THEN work_publish_refusal('PB409', 'Idempotency key seen with a different body.',
                                      'SCAIQUEUE_IDEMPOTENCY_CONFLICT', NULL)
            ELSE jsonb_build_object('ok', true, 'replayed', true, 'message',
                                    jsonb_build_object('id', r.id, 'queue_id', q.queue_id, 'state', r.state)) END;
    END LOOP;
    RETURN v_out;
END $$;

-- p_msgs: a JSON array of messages as work_publish_routed takes them (null for an entry the caller
-- refused already: its answer stays null). The scope, the queue, the caller's ACL and the queue's
-- schema (p_schema, as work_publish_routed checks it) are the whole call's: a refusal there is the
-- call's error. While it runs, the publish functions answer lean documents (work_message_doc).
CREATE OR REPLACE FUNCTION work_publish_batch(p_tenant uuid, p_scope uuid, p_queue uuid, p_msgs jsonb, p_source text,
                                              p_schema uuid, p_atomic boolean DEFAULT false)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
    v_out jsonb[] := array_fill(NULL::jsonb, ARRAY[jsonb_array_length(p_msgs)]);
    v_todo int[];        -- entries (0-based) not yet answered, in order
    v_chunk int[];       -- those run under the next savepoint
    v_refusals int := 0;
    v_undone boolean := false;
    v_at int;
    v_answer jsonb;
    v_state text;
    v_message text;
    v_code text;
    v_hint text;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_to_publish(p_scope, p_queue, p_schema);
    IF work_publish_plain(s, q, p_msgs) THEN
        BEGIN
            v_out := work_publish_set(p_tenant, s, q, p_msgs, p_source);
            IF p_atomic AND EXISTS (SELECT 1 FROM unnest(v_out) a WHERE NOT (a->>'ok')::boolean) THEN
                RAISE EXCEPTION USING ERRCODE = 'PBUND';  -- undo the batch, keeping its answers
            END IF;
        EXCEPTION WHEN SQLSTATE 'PBUND' THEN
            v_undone := true;
        END;
        RETURN jsonb_build_object('undone', v_undone, 'entries', to_jsonb(v_out));
    END IF;
    PERFORM set_config('postbox.publish_answers', 'lean', true);
    v_todo := ARRAY(SELECT e.n::int - 1 FROM jsonb_array_elements(p_msgs) WITH ORDINALITY e(m, n)
                    WHERE jsonb_typeof(e.m) = 'object' ORDER BY e.n);
    WHILE cardinality(v_todo) > 0 LOOP
        v_chunk := CASE WHEN v_refusals < 2 OR p_atomic THEN v_todo ELSE v_todo[1:1] END;
        BEGIN
            FOREACH v_at IN ARRAY v_chunk LOOP
                v_answer := CASE WHEN p_msgs->v_at ? 'stream'
                                 THEN work_stream_chunk(p_tenant, s, q, p_msgs->v_at, p_source)
                                 ELSE work_publish_into(p_tenant, s, q, p_msgs->v_at, p_source) END;
                v_out[v_at + 1] := jsonb_build_object('ok', true, 'replayed', v_answer->'replayed',
                                                      'message', v_answer->'message');
            END LOOP;
            v_todo := v_todo[cardinality(v_chunk) + 1:];
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_message = MESSAGE_TEXT, v_code = PG_EXCEPTION_DETAIL,
                                    v_hint = PG_EXCEPTION_HINT;
            IF v_state NOT LIKE 'PB%' THEN
                RAISE;  -- not a refusal: the whole call fails (and is run again if the database broke it off)
            END IF;
            v_out[v_at + 1] := work_publish_refusal(v_state, v_message, v_code, nullif(v_hint, ''));
            v_undone := p_atomic;  -- the savepoint held the whole batch: nothing of it is left
            EXIT WHEN v_undone;
            v_todo := array_remove(v_todo, v_at);
            v_refusals := v_refusals + 1;
        END;
    END LOOP;
    PERFORM set_config('postbox.publish_answers', '', true);  -- the rest of the transaction answers in full
    RETURN jsonb_build_object('undone', v_undone, 'entries', to_jsonb(v_out));
END $$;
