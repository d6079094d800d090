-- Publish one chunk. The stream row is locked, so chunks of one stream are recorded one at a time:
-- a sequence number seen before answers its original message (replayed; another body is
-- SCAIQUEUE_IDEMPOTENCY_CONFLICT); chunks may arrive in any order; none is accepted past the final
-- one or into a cancelled stream (SCAIQUEUE_INVALID_TRANSITION). The chunk message carries the
-- labels `stream.id`, `stream.seq` and, for the last one, `stream.final`.
CREATE OR REPLACE FUNCTION work_stream_chunk(p_tenant uuid, s work_scopes, q work_queues, p_msg jsonb, p_source text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    st work_streams;
    v_key text := p_msg#>>'{stream,id}';
    v_seq int := (p_msg#>>'{stream,seq}')::int;
    v_final boolean := coalesce((p_msg#>>'{stream,final}')::boolean, false);
    v_dup uuid;
    v_answer jsonb;
    v_msg jsonb;
BEGIN
    INSERT INTO work_streams (scope_id, stream_key, queue_id) VALUES (s.id, v_key, q.id)
    ON CONFLICT (scope_id, stream_key) DO NOTHING;
    SELECT * INTO st FROM work_streams WHERE scope_id = s.id AND stream_key = v_key FOR UPDATE;
    SELECT message_id INTO v_dup FROM work_stream_chunks WHERE stream = st.id AND seq = v_seq;
    IF v_dup IS NOT NULL THEN
        IF (SELECT body FROM work_messages WHERE id = v_dup) IS DISTINCT FROM p_msg->'body' THEN
            RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_IDEMPOTENCY_CONFLICT',
                MESSAGE = format('Chunk %s of stream %s was published with a different body.', v_seq, v_key);
        END IF;
        RETURN jsonb_build_object('message', work_message_doc(v_dup), 'replayed', true);
    END IF;
    IF st.state = 'cancelled' THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_INVALID_TRANSITION',
            MESSAGE = format('Stream %s is cancelled.', v_key);
    END IF;
    IF (st.final_seq IS NOT NULL AND (v_seq > st.final_seq OR v_final))
       OR (v_final AND EXISTS (SELECT 1 FROM work_stream_chunks WHERE stream = st.id AND seq > v_seq)) THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_INVALID_TRANSITION',
            MESSAGE = format('Chunk %s does not fit stream %s: its final chunk is %s.', v_seq, v_key,
                             coalesce(st.final_seq, (SELECT max(seq) FROM work_stream_chunks WHERE stream = st.id)));
    END IF;
    v_msg := jsonb_set(p_msg, '{labels}', coalesce(p_msg->'labels', '{}') || jsonb_build_object(
        'stream.id', v_key, 'stream.seq', v_seq::text) || CASE WHEN v_final THEN '{"stream.final": "true"}'::jsonb
                                                                ELSE '{}' END);
    v_answer := work_publish_into(p_tenant, s, q, v_msg, p_source);
    INSERT INTO work_stream_chunks (stream, seq, message_id) VALUES (st.id, v_seq, (v_answer#>>'{message,id}')::uuid);
    UPDATE work_streams
    SET chunks = chunks + 1, final_seq = CASE WHEN v_final THEN v_seq ELSE final_seq END,
        state = CASE WHEN coalesce(CASE WHEN v_final THEN v_seq END, final_seq) = chunks THEN 'complete' ELSE state END,
        ended_at = CASE WHEN coalesce(CASE WHEN v_final THEN v_seq END, final_seq) = chunks THEN clock_timestamp() END,
        updated_at = clock_timestamp()
    WHERE id = st.id;
    RETURN v_answer;
END $$;
