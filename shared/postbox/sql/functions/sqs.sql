-- The SQS face's hot paths, one round trip each, on the message engine (queues.sql): a send,
-- a receive (standard queues through queue_claim; FIFO queues through sqs_fifo_claim, or
-- sqs_fifo_attempt when the receive names a ReceiveRequestAttemptId) and a change of visibility
-- by receipt; a delete is the queues API's own (queue_delete). Errors a caller may hit are PB-class SQLSTATEs.

-- A FIFO group's turn to take new message ids: a transaction-level lock for each (queue, message
-- group) of the messages about to be inserted (p_queues[i] receives the message with p_headers[i]),
-- taken in lock-key order so two inserts never wait on each other crosswise. Whatever inserts into a
-- FIFO queue (a send, a move task's batch) takes it before its ids are drawn: a group's ids are then
-- drawn and committed in one order, and a receive never hands out a group's later message while an
-- earlier one is still being inserted (its SequenceNumbers only grow). Messages with no group (sent
-- to standard queues) take none.
CREATE OR REPLACE FUNCTION sqs_group_locks(p_queues bigint[], p_headers jsonb[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_key int;
BEGIN
    FOR v_key IN SELECT DISTINCT hashtext(u.q || ':' || (u.h->'sqs'->>'g')) FROM unnest(p_queues, p_headers) u(q, h)
                 WHERE u.h->'sqs'->>'g' IS NOT NULL ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(x'5347'::int, v_key);  -- "SG"
    END LOOP;
END $$;

-- Send: entries with a deduplication id (FIFO) that was seen in the last five minutes are not sent
-- again; each answers the id of the message its first sending made (`duplicate` true).
-- A FIFO send first takes its groups' turns (sqs_group_locks). Standard queues' sends take no lock.
CREATE OR REPLACE FUNCTION sqs_send(
    p_tenant uuid, p_project uuid, p_name text,
    p_messages text[], p_sizes int[], p_delays float8[], p_headers jsonb[], p_dedup text[]
) RETURNS TABLE (sent_id bigint, dispatch_queue bigint, duplicate boolean) LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_n int := cardinality(p_messages);
    v_keep int[] := '{}';
    v_ids bigint[] := '{}';
    v_found bigint;
    v_all bigint[] := array_fill(NULL::bigint, ARRAY[v_n]);
    v_dup boolean[] := array_fill(false, ARRAY[v_n]);
    v_kick bigint;
    v_new boolean;
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    IF p_dedup IS NULL THEN
        RETURN QUERY SELECT i.sent_id, i.dispatch_queue, false FROM queue_insert(
            q, p_tenant, p_messages, p_sizes, (SELECT max(s) FROM unnest(p_sizes) s), p_delays, p_headers, NULL) i;
        RETURN;
    END IF;
    -- Forget some ids past their five minutes (never waiting on a row a concurrent send holds).
    DELETE FROM sqs_dedup WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM sqs_dedup WHERE queue_id = q.id AND expires_at <= clock_timestamp()
        LIMIT 100 FOR UPDATE SKIP LOCKED));
    PERFORM sqs_group_locks(array_fill(q.id, ARRAY[v_n]), p_headers);
    FOR i IN 1 .. v_n LOOP
        v_found := nextval('queue_msg_id_seq');
        v_new := true;
        IF p_dedup[i] IS NOT NULL THEN  -- a concurrent send of the same id waits here for the first
            v_new := NULL;
            INSERT INTO sqs_dedup AS d (queue_id, dedup_id, msg_id, expires_at)
            VALUES (q.id, p_dedup[i], v_found, clock_timestamp() + interval '5 minutes')
            ON CONFLICT (queue_id, dedup_id) DO UPDATE SET msg_id = excluded.msg_id, expires_at = excluded.expires_at
            WHERE d.expires_at <= clock_timestamp()
            RETURNING true INTO v_new;
        END IF;
        IF v_new THEN
            v_keep := v_keep || i;
            v_ids := v_ids || v_found;
        ELSE
            SELECT d.msg_id INTO v_found FROM sqs_dedup d WHERE d.queue_id = q.id AND d.dedup_id = p_dedup[i];
            v_dup[i] := true;
        END IF;
        v_all[i] := v_found;
    END LOOP;
    IF cardinality(v_keep) > 0 THEN
        SELECT max(i.dispatch_queue) INTO v_kick FROM queue_insert(
            q, p_tenant,
            ARRAY(SELECT p_messages[k] FROM unnest(v_keep) k), ARRAY(SELECT p_sizes[k] FROM unnest(v_keep) k),
            (SELECT max(p_sizes[k]) FROM unnest(v_keep) k),
            ARRAY(SELECT p_delays[k] FROM unnest(v_keep) k), ARRAY(SELECT p_headers[k] FROM unnest(v_keep) k),
            v_ids) i;
    END IF;
    FOR i IN 1 .. v_n LOOP
        sent_id := v_all[i];
        dispatch_queue := v_kick;
        duplicate := v_dup[i];
        RETURN NEXT;
    END LOOP;
END $$;

-- A message's id as SQS answers it (MessageId): 5b0c, then the id in hex, in a UUID's form. The
-- receive answers it from the id itself; this is for what SQL writes into a message.
CREATE OR REPLACE FUNCTION sqs_message_id(p_id bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-'
           || substr(h, 21, 12)
    FROM (SELECT '5b0c' || lpad(to_hex(p_id), 28, '0') AS h) x
$$;

-- A FIFO queue's claim, as SQS hands out a FIFO queue's messages: as few message groups as it can,
-- each group's messages together and in order. A group goes out as its visible run: from its head (its
-- oldest message) up to the first of its messages that is not visible (in flight or delayed), so
-- nothing of a group is handed out while an earlier message of it is in flight, and a group whose
-- head is in flight is passed over whole.
-- The candidates are group heads found in id order, each locked as it is found: a head another
-- receive holds is passed over (SKIP LOCKED), so two receives never take the same group and never
-- wait for each other (a group's later messages are locked only by the receive holding its head, and
-- its run ends before the first it cannot lock). Heads are taken until their runs hold p_qty
-- messages, or p_qty heads (no receive takes more groups than messages). They are served in the
-- order they became visible (vt, then id; a group back from a visibility timeout comes after those
-- that were waiting, as in SQS), each group's run whole before the next group's, up to p_qty
-- messages; rows come back in that order. Messages read max_reads times are dead-lettered instead
-- (queue_dead_letter), as SQS moves a FIFO queue's: sent anew (the dead-letter queue's retention
-- counts from the move) and, their deduplication id being the source queue's, deduplicated by their
-- own message id instead.
DROP FUNCTION IF EXISTS sqs_fifo_claim(bigint, int, float8, int, bigint);
CREATE OR REPLACE FUNCTION sqs_fifo_claim(p_queue bigint, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint)
RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb,
               r_first_read_at float8)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_heads_found refcursor;
    h record;
    c int;
    v_at int;
    v_order int[] := '{}';
    v_heads bigint[] := '{}';        -- the candidates' heads, in the order found,
    v_became timestamptz[] := '{}';  -- when each became visible,
    v_from int[] := '{}';            -- and where its run starts in v_ids (runs one after another)
    v_ids bigint[] := '{}';
    v_reads int[] := '{}';
    v_found int := 0;                -- live messages in the runs found
    v_n int;
    v_run bigint[];
    v_locked bigint[];
    v_live bigint[] := '{}';
    v_dead bigint[] := '{}';
BEGIN
    -- Each head comes with the next p_qty - 1 messages of its group (a message without a group, sent
    -- through the queues API, is a group alone).
    OPEN v_heads_found FOR
        SELECT m.msg_id, m.read_ct, m.vt, n.ids, n.reads, n.vts FROM queue_messages m
        LEFT JOIN LATERAL (
            SELECT array_agg(x.msg_id ORDER BY x.msg_id) AS ids, array_agg(x.read_ct ORDER BY x.msg_id) AS reads,
                   array_agg(x.vt ORDER BY x.msg_id) AS vts
            FROM (SELECT b.msg_id, b.read_ct, b.vt FROM queue_messages b
                  WHERE b.queue_id = p_queue AND (b.headers->'sqs'->>'g') = (m.headers->'sqs'->>'g')
                    AND b.msg_id > m.msg_id
                  ORDER BY b.msg_id LIMIT p_qty - 1) x
        ) n ON true
        WHERE m.queue_id = p_queue AND m.vt <= v_now
          AND NOT EXISTS (
              SELECT 1 FROM queue_messages b
              WHERE b.queue_id = p_queue AND (b.headers->'sqs'->>'g') = (m.headers->'sqs'->>'g')
                AND b.msg_id < m.msg_id)
        ORDER BY m.msg_id FOR UPDATE OF m SKIP LOCKED;
    LOOP
        FETCH v_heads_found INTO h;
        EXIT WHEN NOT FOUND;
        v_heads := v_heads || h.msg_id;
        v_became := v_became || h.vt;
        v_from := v_from || (cardinality(v_ids) + 1);
        v_ids := v_ids || h.msg_id;
        v_reads := v_reads || h.read_ct;
        v_n := CASE WHEN p_max_reads IS NULL OR h.read_ct < p_max_reads THEN 1 ELSE 0 END;
        -- The group's visible run: up to its first message not visible, p_qty live ones at most.
        FOR i IN 1 .. coalesce(cardinality(h.ids), 0) LOOP
            EXIT WHEN v_n >= p_qty OR h.vts[i] > v_now;
            v_ids := v_ids || h.ids[i];
            v_reads := v_reads || h.reads[i];
            IF p_max_reads IS NULL OR h.reads[i] < p_max_reads THEN
                v_n := v_n + 1;
            END IF;
        END LOOP;
        v_found := v_found + v_n;
        EXIT WHEN v_found >= p_qty OR cardinality(v_heads) >= p_qty;
    END LOOP;
    CLOSE v_heads_found;
    v_from := v_from || (cardinality(v_ids) + 1);
    -- The candidates in the order their heads became visible (an insertion sort: p_qty at most).
    FOR c IN 1 .. cardinality(v_heads) LOOP
        v_at := c;
        WHILE v_at > 1 AND (v_became[v_order[v_at - 1]], v_heads[v_order[v_at - 1]]) > (v_became[c], v_heads[c]) LOOP
            v_at := v_at - 1;
        END LOOP;
        v_order := v_order[1 : v_at - 1] || c || v_order[v_at : c - 1];
    END LOOP;
    FOREACH c IN ARRAY v_order LOOP
        EXIT WHEN cardinality(v_live) >= p_qty;
        v_run := v_ids[v_from[c] : v_from[c + 1] - 1];
        IF cardinality(v_run) > 1 THEN
            v_locked := ARRAY(SELECT m.msg_id FROM queue_messages m
                              WHERE m.queue_id = p_queue AND m.msg_id = ANY (v_run[2:]) AND m.vt <= v_now
                              FOR UPDATE SKIP LOCKED);
        END IF;
        FOR i IN 1 .. cardinality(v_run) LOOP
            EXIT WHEN cardinality(v_live) >= p_qty OR (i > 1 AND NOT v_run[i] = ANY (v_locked));
            IF p_max_reads IS NOT NULL AND v_reads[v_from[c] + i - 1] >= p_max_reads THEN
                v_dead := v_dead || v_run[i];
            ELSE
                v_live := v_live || v_run[i];
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(v_dead) > 0 THEN
        PERFORM queue_dead_letter(p_queue, v_dead, p_dlq);
    END IF;
    IF cardinality(v_dead) > 0 AND p_dlq IS NOT NULL THEN
        UPDATE queue_messages m
        SET enqueued_at = clock_timestamp(),
            headers = CASE WHEN jsonb_typeof(m.headers->'sqs') = 'object' AND m.headers->'sqs' ? 'd'
                           THEN jsonb_set(m.headers, '{sqs,d}', to_jsonb(sqs_message_id(m.msg_id))) ELSE m.headers END
        WHERE m.queue_id = p_dlq AND m.msg_id = ANY (v_dead);
    END IF;
    IF cardinality(v_live) > 0 THEN
        RETURN QUERY
        WITH claimed AS (
            UPDATE queue_messages m
            SET vt = v_now + p_vt * interval '1 second', read_ct = m.read_ct + 1,
                first_read_at = coalesce(m.first_read_at, now())  -- the transaction's start: what sqs_receive answers
            WHERE m.queue_id = p_queue AND m.msg_id = ANY (v_live)
            RETURNING m.msg_id, m.read_ct, date_part('epoch', m.enqueued_at) AS sent, date_part('epoch', m.vt) AS vt,
                      m.message, m.headers, date_part('epoch', m.first_read_at) AS first
        )
        SELECT t.msg_id, t.read_ct, t.sent, t.vt, t.message, t.headers, t.first FROM claimed t
        ORDER BY array_position(v_live, t.msg_id);
    END IF;
END $$;

-- A FIFO receive naming a ReceiveRequestAttemptId: a retry within five minutes of the receive that
-- recorded the id (sqs_fifo_attempt_keep) answers that receive's messages again, in the same order,
-- with their read counts (so the same receipt handles), hidden for p_vt seconds from now, while every
-- one of them is still waiting with the read count and the visibility deadline that receive (or its
-- last retry) gave it. Once one was deleted, had its visibility changed or was received again, or
-- after the five minutes, the attempt is spent: it is forgotten and this receive claims afresh
-- (sqs_fifo_claim), its messages then being the attempt's. Receives naming one attempt take turns, by a
-- lock of the attempt's taken first: a retry sent while the receive it retries still runs (its client
-- timed out) waits for it and answers its messages, where it found no attempt yet and claimed others.
DROP FUNCTION IF EXISTS sqs_fifo_attempt(bigint, text, int, float8, int, bigint);
CREATE OR REPLACE FUNCTION sqs_fifo_attempt(
    p_queue bigint, p_attempt text, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint
) RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb,
               r_first_read_at float8)
LANGUAGE plpgsql AS $$
DECLARE
    a sqs_receive_attempts;
BEGIN
    PERFORM pg_advisory_xact_lock(x'5341'::int, hashtext(p_queue || ':' || p_attempt));  -- "SA"
    -- Forget some attempts past their five minutes (never waiting on a row another receive holds).
    DELETE FROM sqs_receive_attempts WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM sqs_receive_attempts WHERE queue_id = p_queue AND expires_at <= clock_timestamp()
        LIMIT 100 FOR UPDATE SKIP LOCKED));
    SELECT * INTO a FROM sqs_receive_attempts WHERE queue_id = p_queue AND attempt_id = p_attempt FOR UPDATE;
    IF FOUND THEN
        IF a.expires_at > clock_timestamp() AND cardinality(a.msg_ids) = (
            SELECT count(*) FROM (
                SELECT 1 FROM queue_messages m JOIN unnest(a.msg_ids, a.read_cts, a.vts) u(id, n, vt) ON m.msg_id = u.id
                WHERE m.queue_id = p_queue AND m.read_ct = u.n AND m.vt = u.vt
                FOR UPDATE OF m) untouched) THEN
            RETURN QUERY
            WITH again AS (
                UPDATE queue_messages m SET vt = clock_timestamp() + p_vt * interval '1 second'
                WHERE m.queue_id = p_queue AND m.msg_id = ANY (a.msg_ids)
                RETURNING m.msg_id, m.read_ct, date_part('epoch', m.enqueued_at) AS sent,
                          date_part('epoch', m.vt) AS vt, m.message, m.headers, date_part('epoch', m.first_read_at) AS first
            )
            SELECT g.msg_id, g.read_ct, g.sent, g.vt, g.message, g.headers, g.first FROM again g
            ORDER BY array_position(a.msg_ids, g.msg_id);
            RETURN;
        END IF;
        DELETE FROM sqs_receive_attempts WHERE queue_id = p_queue AND attempt_id = p_attempt;
    END IF;
    RETURN QUERY SELECT * FROM sqs_fifo_claim(p_queue, p_qty, p_vt, p_max_reads, p_dlq);
END $$;

-- Record what a FIFO receive naming p_attempt handed out (p_ids in the order it answered them,
-- claimed or answered again by sqs_fifo_attempt in this transaction): each message's read count and
-- its new visibility deadline. A retry answered the same keeps the attempt's five minutes; a fresh
-- claim starts them.
CREATE OR REPLACE FUNCTION sqs_fifo_attempt_keep(p_queue bigint, p_attempt text, p_ids bigint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO sqs_receive_attempts (queue_id, attempt_id, msg_ids, read_cts, vts, expires_at)
    SELECT p_queue, p_attempt, array_agg(m.msg_id ORDER BY k.n), array_agg(m.read_ct ORDER BY k.n),
           array_agg(m.vt ORDER BY k.n), clock_timestamp() + interval '5 minutes'
    FROM unnest(p_ids) WITH ORDINALITY k(id, n)
    JOIN queue_messages m ON m.queue_id = p_queue AND m.msg_id = k.id
    HAVING count(*) > 0
    ON CONFLICT (queue_id, attempt_id) DO UPDATE
    SET msg_ids = excluded.msg_ids, read_cts = excluded.read_cts, vts = excluded.vts
$$;

-- A receive's claim: a FIFO queue's group-ordered walk (through its ReceiveRequestAttemptId when the
-- receive names one), any other queue's the message engine's own, so the receive builds its answer
-- once, whichever claimed.
DROP FUNCTION IF EXISTS sqs_claim(bigint, int, float8, int, bigint);
DROP FUNCTION IF EXISTS sqs_claim(bigint, boolean, text, int, float8, int, bigint);
CREATE OR REPLACE FUNCTION sqs_claim(
    p_queue bigint, p_fifo boolean, p_attempt text, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint
) RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb,
               r_first_read_at float8)
LANGUAGE plpgsql AS $$
BEGIN
    IF p_fifo AND p_attempt IS NOT NULL THEN
        RETURN QUERY SELECT * FROM sqs_fifo_attempt(p_queue, p_attempt, p_qty, p_vt, p_max_reads, p_dlq);
    ELSIF p_fifo THEN
        RETURN QUERY SELECT * FROM sqs_fifo_claim(p_queue, p_qty, p_vt, p_max_reads, p_dlq);
    ELSE
        RETURN QUERY SELECT * FROM queue_claim(p_queue, p_qty, p_vt, p_max_reads, p_dlq);
    END IF;
END $$;

-- Receive: one JSON array of the messages claimed (a FIFO queue's in the order its claim answered
-- them, a standard queue's in id order), each with when it was first handed out (as the claim left
-- it: kept from an earlier receive, else this one's start).
-- A standard queue ignores p_attempt (the ReceiveRequestAttemptId), as SQS does.
DROP FUNCTION IF EXISTS sqs_receive(uuid, uuid, text, int, float8);
CREATE OR REPLACE FUNCTION sqs_receive(p_tenant uuid, p_project uuid, p_name text, p_qty int, p_vt float8,
                                       p_attempt text)
RETURNS json LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_vt float8;
    v_fifo boolean;
    v_answer json;
    v_ids bigint[];
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    v_vt := coalesce(p_vt, q.visibility_timeout_sec);
    v_fifo := coalesce((SELECT s.fifo FROM sqs_queues s WHERE s.queue_id = q.id), false);
    SELECT coalesce(json_agg(json_build_object(
               'id', c.r_msg_id, 'n', c.r_read_ct, 'sent', c.r_enqueued_at, 'body', c.r_message,
               'h', c.r_headers, 'first', c.r_first_read_at)
               ORDER BY CASE WHEN v_fifo THEN c.n ELSE c.r_msg_id END), '[]'),
           array_agg(c.r_msg_id ORDER BY c.n)
    INTO v_answer, v_ids
    FROM sqs_claim(q.id, v_fifo, p_attempt, p_qty, v_vt, q.max_reads, q.dead_letter_queue_id) WITH ORDINALITY
         c(r_msg_id, r_read_ct, r_enqueued_at, r_vt, r_message, r_headers, r_first_read_at, n);
    IF v_fifo AND p_attempt IS NOT NULL AND v_ids IS NOT NULL THEN
        PERFORM sqs_fifo_attempt_keep(q.id, p_attempt, v_ids);
    END IF;
    RETURN v_answer;
END $$;

-- Delete by receipt is the queues API's delete (queue_delete, queues.sql) on a standard queue: a
-- message already gone is no error, as in SQS.
DROP FUNCTION IF EXISTS sqs_delete(uuid, uuid, text, bigint[]);

-- Delete by receipt on a FIFO queue: for each (id, read count), 'ok' when the message was deleted or
-- is gone, else 'expired': SQS deletes a FIFO queue's message only while the receive that gave the
-- receipt still holds it (in flight, not received again since), so a message whose group has gone on
-- to another consumer is never deleted by the one that let it go.
CREATE OR REPLACE FUNCTION sqs_fifo_delete(p_tenant uuid, p_project uuid, p_name text, p_ids bigint[], p_read_cts int[])
RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_out text[];
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    WITH wanted AS (
        SELECT u.id, u.n, u.i FROM unnest(p_ids, p_read_cts) WITH ORDINALITY u(id, n, i)
    ), gone AS (
        DELETE FROM queue_messages m USING wanted w
        WHERE m.queue_id = q.id AND m.msg_id = w.id AND m.read_ct = w.n AND m.vt > clock_timestamp()
        RETURNING m.msg_id
    )
    SELECT array_agg(CASE WHEN w.id IN (SELECT g.msg_id FROM gone g)
                            OR NOT EXISTS (SELECT 1 FROM queue_messages x WHERE x.queue_id = q.id AND x.msg_id = w.id)
                          THEN 'ok' ELSE 'expired' END ORDER BY w.i)
    INTO v_out FROM wanted w;
    RETURN v_out;
END $$;

-- Change visibility by receipt: for each (id, read count) the outcome: 'ok', 'gone' (no such
-- message waiting), 'stale' (received again since that receipt) or 'not_in_flight' (visible now).
-- Made visible at once (under a second), a message pulls the claim head back to itself.
CREATE OR REPLACE FUNCTION sqs_change_visibility(
    p_tenant uuid, p_project uuid, p_name text, p_ids bigint[], p_read_cts int[], p_vts float8[]
) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_out text[] := '{}';
    v_row record;
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    FOR i IN 1 .. cardinality(p_ids) LOOP
        SELECT m.read_ct, m.vt > clock_timestamp() AS hidden INTO v_row
        FROM queue_messages m WHERE m.queue_id = q.id AND m.msg_id = p_ids[i] FOR UPDATE;
        IF NOT FOUND THEN
            v_out := v_out || 'gone'::text;
        ELSIF v_row.read_ct <> p_read_cts[i] THEN
            v_out := v_out || 'stale'::text;
        ELSIF NOT v_row.hidden THEN
            v_out := v_out || 'not_in_flight'::text;
        ELSE
            IF p_vts[i] < 1 THEN
                PERFORM queue_head_back(q.id, p_ids[i], true);
            END IF;
            UPDATE queue_messages SET vt = clock_timestamp() + p_vts[i] * interval '1 second'
            WHERE queue_id = q.id AND msg_id = p_ids[i];
            v_out := v_out || 'ok'::text;
        END IF;
    END LOOP;
    RETURN v_out;
END $$;
