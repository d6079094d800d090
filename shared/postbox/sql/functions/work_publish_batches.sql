-- The batch extension's publish: up to 100 messages into one queue in one call and one transaction,
-- each published as a single publish is (work_publish_routed: its checks, routing, chunk streams,
-- fan-out, idempotency and depth), each answered on its own.
--
-- A refused entry spoils none of the others: the entries run together under one savepoint; when one
-- is refused, the savepoint is rolled back, that entry keeps its refusal, and the others run again
-- (after the second refusal, each under a savepoint of its own, so a batch of refusals costs no more
-- than one pass each; a batch that is all published takes one). An idempotency key seen earlier in
-- the same batch is a replay of that entry (or its conflict), as it would be across two calls.
-- With p_atomic, the first refusal undoes the whole batch instead, and the answer says which entry
-- it was: nothing is published unless every entry is.

-- One entry's answer as the route reads it: {"ok": true, "replayed", "message": {id, queue_id, state}},
-- or {"ok": false, "error": {"sqlstate", "code", "message", "hint"}} (the fields of the error a
-- single publish raises, mapped by the domain as that one's are).
CREATE OR REPLACE FUNCTION work_publish_refusal(p_state text, p_message text, p_code text, p_hint text)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('ok', false, 'error', jsonb_build_object('sqlstate', p_state, 'code', p_code,
                                                                       'message', p_message, 'hint', p_hint))
$$;

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
    q := work_queue_of(p_scope, p_queue);
    IF q.schema_id IS DISTINCT FROM p_schema THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_SCHEMA_STALE',
            MESSAGE = coalesce(q.schema_id::text, '');
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
