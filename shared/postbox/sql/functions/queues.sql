-- Add deltas to a queue's counters and its tenant's stored bytes, each on a slot counter_slot picks.
-- The row is updated where it exists (every call but a slot's first): an INSERT ... ON CONFLICT
-- would lock the row before updating it, a WAL record of its own (54 bytes) a call.
CREATE OR REPLACE FUNCTION queue_count(
    p_queue bigint, p_sent bigint, p_removed bigint, p_live_bytes bigint,
    p_archived bigint, p_archive_rows bigint, p_archive_bytes bigint, p_dead bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_slot int := counter_slot(x'4351'::int, p_queue);  -- "CQ"
    v_tenant uuid;
BEGIN
    UPDATE queue_counters c SET
        sent = c.sent + p_sent,
        removed = c.removed + p_removed,
        live_bytes = c.live_bytes + p_live_bytes,
        archived_total = c.archived_total + p_archived,
        archive_rows = c.archive_rows + p_archive_rows,
        archive_bytes = c.archive_bytes + p_archive_bytes,
        dead_total = c.dead_total + p_dead
    WHERE c.queue_id = p_queue AND c.slot = v_slot;
    IF NOT FOUND THEN
        INSERT INTO queue_counters AS c
            (queue_id, slot, sent, removed, live_bytes, archived_total, archive_rows, archive_bytes, dead_total)
        VALUES (p_queue, v_slot, p_sent, p_removed, p_live_bytes, p_archived, p_archive_rows, p_archive_bytes, p_dead)
        ON CONFLICT (queue_id, slot) DO UPDATE SET
            sent = c.sent + excluded.sent,
            removed = c.removed + excluded.removed,
            live_bytes = c.live_bytes + excluded.live_bytes,
            archived_total = c.archived_total + excluded.archived_total,
            archive_rows = c.archive_rows + excluded.archive_rows,
            archive_bytes = c.archive_bytes + excluded.archive_bytes,
            dead_total = c.dead_total + excluded.dead_total;
    END IF;
    IF p_live_bytes + p_archive_bytes <> 0 THEN
        SELECT tenant_id INTO v_tenant FROM queues WHERE id = p_queue;
        IF v_tenant IS NOT NULL THEN
            INSERT INTO tenant_storage AS t (tenant_id, slot, stored_bytes)
            VALUES (v_tenant, counter_slot(x'4353'::int, counter_key(v_tenant)), p_live_bytes + p_archive_bytes)  -- "CS"
            ON CONFLICT (tenant_id, slot) DO UPDATE SET stored_bytes = t.stored_bytes + excluded.stored_bytes;
        END IF;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION queue_messages_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM new_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, r.n, 0, r.b, 0, 0, 0, 0);
    END LOOP;
    -- Dead letters moved here from another queue count as dead in the queue they left.
    FOR r IN SELECT dead_from, count(*) AS n FROM new_rows WHERE dead_from IS NOT NULL GROUP BY dead_from LOOP
        PERFORM queue_count(r.dead_from, 0, 0, 0, 0, 0, 0, r.n);
    END LOOP;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION queue_messages_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM old_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, r.n, -r.b, 0, 0, 0, 0);
    END LOOP;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION queue_archive_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b, count(*) FILTER (WHERE dead) AS d
             FROM new_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, 0, 0, r.n - r.d, r.n, r.b, r.d);
    END LOOP;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION queue_archive_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM old_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, 0, 0, 0, -r.n, -r.b, 0);
    END LOOP;
    RETURN NULL;
END $$;

-- A statement that counts itself (a send, an archive move) sets postbox.counted for its duration,
-- and these triggers stand aside: tested in their WHEN, so the trigger function is not even called.
CREATE OR REPLACE TRIGGER queue_messages_ins AFTER INSERT ON queue_messages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('postbox.counted', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION queue_messages_inserted();

CREATE OR REPLACE TRIGGER queue_messages_del AFTER DELETE ON queue_messages
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    WHEN (current_setting('postbox.counted', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION queue_messages_deleted();

CREATE OR REPLACE TRIGGER queue_archive_ins AFTER INSERT ON queue_archive
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('postbox.counted', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION queue_archive_inserted();

CREATE OR REPLACE TRIGGER queue_archive_del AFTER DELETE ON queue_archive
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT
    WHEN (current_setting('postbox.counted', true) IS DISTINCT FROM 'on') EXECUTE FUNCTION queue_archive_deleted();

-- ---- Hot paths as functions: one round trip per call -------------------------------------------
-- Errors a caller may hit are raised with SQLSTATEs of class PB (PB404, PB403, PB413) and mapped to
-- the domain's typed errors in Python. Claims use `LIMIT (SELECT n)` and `= ANY (ARRAY(...))` so
-- the plan stays an index walk in msg_id order whatever the planner's statistics say of the queue.

-- The caller always names the project (the key's own, or its tenant's `default`, which the domain
-- layer resolves once): the default-project lookup lives in one place, in Python.
CREATE OR REPLACE FUNCTION queue_find(p_tenant uuid, p_project uuid, p_name text) RETURNS queues
LANGUAGE plpgsql STABLE AS $$
DECLARE q queues;
BEGIN
    SELECT * INTO q FROM queues WHERE tenant_id = p_tenant AND project_id = p_project AND name = p_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such queue in this environment.';
    END IF;
    RETURN q;
END $$;

CREATE OR REPLACE FUNCTION queue_head_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_heads (queue_id) VALUES (NEW.id);
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER queue_head_created AFTER INSERT ON queues FOR EACH ROW EXECUTE FUNCTION queue_head_created();

-- Pull a queue's head back to `p_id` so the next claim walks from there (the claim-head rule:
-- claim_heads.sql). Without `p_wait`, a busy head row is left alone (that queue's next full walk
-- finds the message instead).
CREATE OR REPLACE FUNCTION queue_head_back(p_queue bigint, p_id bigint, p_wait boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_wait THEN
        UPDATE queue_heads SET head = claim_head_back(head, p_id)
        WHERE queue_id = p_queue AND claim_head_back(head, p_id) < head;
    ELSE
        UPDATE queue_heads SET head = claim_head_back(head, p_id)
        WHERE queue_id = (SELECT l.queue_id FROM queue_heads l WHERE l.queue_id = p_queue FOR UPDATE SKIP LOCKED)
          AND claim_head_back(head, p_id) < head;
    END IF;
END $$;

-- Take the kick if it is free; true when this caller took it (and must start the dispatch).
CREATE OR REPLACE FUNCTION consumer_kick_take(p_queue bigint, p_seconds float8) RETURNS boolean
LANGUAGE sql AS $$
    INSERT INTO consumer_kicks AS k (queue_id, until)
    VALUES (p_queue, clock_timestamp() + p_seconds * interval '1 second')
    ON CONFLICT (queue_id) DO UPDATE SET until = excluded.until WHERE k.until <= clock_timestamp()
    RETURNING true
$$;

-- Move what a queue's counter rows hold back (their pending sends: usage_pending_max_*, tenancy.sql)
-- into its tenant's monthly messages and stored bytes: the row of one slot, or of every slot when
-- p_slot is null (before the queue's counters are deleted with it). Of a row's pending messages,
-- the last p_recent were sent this month, the rest in its pending_month.
CREATE OR REPLACE FUNCTION queue_usage_fold(p_queue bigint, p_slot int, p_recent bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tenant uuid := (SELECT tenant_id FROM queues WHERE id = p_queue);
    v_month date := date_trunc('month', clock_timestamp())::date;
    r record;
BEGIN
    FOR r IN SELECT c.slot, c.pending_messages, c.pending_bytes, c.pending_month FROM queue_counters c
             WHERE c.queue_id = p_queue AND (p_slot IS NULL OR c.slot = p_slot)
               AND (c.pending_messages <> 0 OR c.pending_bytes <> 0)
             ORDER BY c.slot FOR UPDATE LOOP
        UPDATE queue_counters SET pending_messages = 0, pending_bytes = 0, pending_month = NULL
        WHERE queue_id = p_queue AND slot = r.slot;
        INSERT INTO tenant_monthly_messages AS u (tenant_id, month, slot, messages)
        SELECT v_tenant, f.month, counter_slot(x'434d'::int, counter_key(v_tenant)), f.n  -- "CM"
        FROM (VALUES (r.pending_month, r.pending_messages - p_recent), (v_month, p_recent)) f(month, n)
        WHERE f.n > 0
        ON CONFLICT (tenant_id, month, slot) DO UPDATE SET messages = u.messages + excluded.messages;
        IF r.pending_bytes <> 0 THEN
            INSERT INTO tenant_storage AS t (tenant_id, slot, stored_bytes)
            VALUES (v_tenant, counter_slot(x'4353'::int, counter_key(v_tenant)), r.pending_bytes)  -- "CS"
            ON CONFLICT (tenant_id, slot) DO UPDATE SET stored_bytes = t.stored_bytes + excluded.stored_bytes;
        END IF;
    END LOOP;
END $$;

-- A send counts itself with one row write: p_n messages of p_bytes on queue p_queue's counters, on
-- the slot counter_slot picks, where they are also held back for the tenant's usage (pending) until
-- the row holds usage_pending_max_*() or messages of an earlier month; then this send folds the row
-- (queue_usage_fold) and the answer is true. Its insert's trigger stood aside (postbox.counted).
-- The row is updated where it exists, as in queue_count (no lock record before the update).
-- It answers a value so that a caller can call it in a plain expression (`:=`), which costs no
-- query of its own as PERFORM does.
DROP FUNCTION IF EXISTS queue_count_sent(bigint, bigint, bigint);
CREATE OR REPLACE FUNCTION queue_count_sent(p_queue bigint, p_n bigint, p_bytes bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_month date := date_trunc('month', clock_timestamp())::date;
    v_slot int := counter_slot(x'4351'::int, p_queue);  -- "CQ"
    v_held_messages bigint;
    v_held_bytes bigint;
    v_held_month date;
BEGIN
    UPDATE queue_counters c SET
        sent = c.sent + p_n,
        live_bytes = c.live_bytes + p_bytes,
        pending_messages = c.pending_messages + p_n,
        pending_bytes = c.pending_bytes + p_bytes,
        pending_month = coalesce(c.pending_month, v_month)
    WHERE c.queue_id = p_queue AND c.slot = v_slot
    RETURNING c.pending_messages, c.pending_bytes, c.pending_month
    INTO v_held_messages, v_held_bytes, v_held_month;
    IF NOT FOUND THEN
        INSERT INTO queue_counters AS c (queue_id, slot, sent, live_bytes, pending_messages, pending_bytes, pending_month)
        VALUES (p_queue, v_slot, p_n, p_bytes, p_n, p_bytes, v_month)
        ON CONFLICT (queue_id, slot) DO UPDATE SET
            sent = c.sent + excluded.sent,
            live_bytes = c.live_bytes + excluded.live_bytes,
            pending_messages = c.pending_messages + excluded.pending_messages,
            pending_bytes = c.pending_bytes + excluded.pending_bytes,
            pending_month = coalesce(c.pending_month, excluded.pending_month)
        RETURNING c.pending_messages, c.pending_bytes, c.pending_month
        INTO v_held_messages, v_held_bytes, v_held_month;
    END IF;
    IF v_held_messages >= usage_pending_max_messages() OR v_held_bytes >= usage_pending_max_bytes()
       OR v_held_month <> v_month THEN
        PERFORM queue_usage_fold(p_queue, v_slot, CASE WHEN v_held_month <> v_month THEN p_n ELSE 0 END);
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- queue_insert appends messages to queue `q` (already found) within the plan's limits, counts them
-- (queue_count_sent), wakes long polls and answers, beside each new id, the queue's id when this
-- send took the kick: a queue with an enabled consumer and no dispatch on its way. A queue without a
-- consumer pays nothing (the queue row is already in hand); a busy consumer costs one primary-key
-- read. Each message has its own delay and headers; `p_ids`, when given, are ids already drawn
-- from queue_msg_id_seq (in order), else each row draws its own.
--
-- Every statement a call runs costs its executor's start-up (each scan's relation and index
-- opened) whatever it then reads, which for a single message is most of a send's time in the
-- server: so the limits, the long-poll check and the batch's bytes come from one statement, and
-- each IF whose condition would need a query of its own is entered only when a plain test on values
-- in hand says the query matters (a queue without a consumer never runs the kick's).
CREATE OR REPLACE FUNCTION queue_insert(
    q queues, p_tenant uuid, p_messages text[], p_sizes int[], p_largest int,
    p_delays float8[], p_headers jsonb[], p_ids bigint[]
) RETURNS TABLE (sent_id bigint, dispatch_queue bigint) LANGUAGE plpgsql AS $$
DECLARE
    v_n int := cardinality(p_messages);
    v_kick boolean := false;
    v_within boolean;
    v_waiting boolean;
    v_bytes bigint;
    v_ignored text;
    v_folded boolean;
BEGIN
    SELECT (SELECT w.within FROM plan_within(p_tenant, p_largest, v_n) w),
           EXISTS (SELECT 1 FROM waiters WHERE channel = 'queue_' || q.id AND until > clock_timestamp()),
           (SELECT sum(s) FROM unnest(p_sizes) s)
    INTO v_within, v_waiting, v_bytes;
    IF v_within IS NOT TRUE THEN  -- near a limit, or over one
        PERFORM plan_check(p_tenant, p_largest, v_n);
    END IF;
    IF v_waiting THEN
        PERFORM pg_notify('queue_' || q.id, '');
    END IF;
    IF q.consumer IS NOT NULL AND v_n > 0 THEN
        IF (SELECT min(d) FROM unnest(p_delays) d) <= 0
           AND (q.consumer->>'enabled')::boolean IS NOT FALSE AND coalesce(q.consumer->>'function_name', '') <> ''
           AND NOT EXISTS (SELECT 1 FROM consumer_kicks WHERE queue_id = q.id AND until > clock_timestamp()) THEN
            v_kick := coalesce(consumer_kick_take(q.id, 90), false);
        END IF;
    END IF;
    v_ignored := set_config('postbox.counted', 'on', true);  -- queue_count_sent counts the insert
    IF p_ids IS NULL THEN
        RETURN QUERY
        INSERT INTO queue_messages (queue_id, vt, message, headers, size)
        SELECT q.id, clock_timestamp() + u.d * interval '1 second', u.m::jsonb, u.h, u.s
        FROM unnest(p_messages, p_sizes, p_delays, p_headers) WITH ORDINALITY AS u(m, s, d, h, n)
        ORDER BY u.n
        RETURNING queue_messages.msg_id, CASE WHEN v_kick THEN q.id END;
    ELSE
        RETURN QUERY
        INSERT INTO queue_messages (queue_id, msg_id, vt, message, headers, size)
        SELECT q.id, u.i, clock_timestamp() + u.d * interval '1 second', u.m::jsonb, u.h, u.s
        FROM unnest(p_messages, p_sizes, p_delays, p_headers, p_ids) AS u(m, s, d, h, i)
        RETURNING queue_messages.msg_id, CASE WHEN v_kick THEN q.id END;
    END IF;
    v_ignored := set_config('postbox.counted', 'off', true);
    IF v_n > 0 THEN
        v_folded := queue_count_sent(q.id, v_n, v_bytes);
    END IF;
END $$;

-- The queues API's send: one delay and one headers value for every message of the batch.
CREATE OR REPLACE FUNCTION queue_send(
    p_tenant uuid, p_project uuid, p_name text, p_anonymous boolean,
    p_messages text[], p_sizes int[], p_largest int, p_delay float8, p_headers jsonb
) RETURNS TABLE (sent_id bigint, dispatch_queue bigint) LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_n int := cardinality(p_messages);
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    IF p_anonymous AND NOT q.app_send THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such queue in this environment.';
    END IF;
    RETURN QUERY SELECT * FROM queue_insert(q, p_tenant, p_messages, p_sizes, p_largest,
                                            array_fill(p_delay, ARRAY[v_n]), array_fill(p_headers, ARRAY[v_n]), NULL);
END $$;

-- Messages read max_reads times leave queue p_queue: to the dead-letter queue p_dlq (keeping their
-- ids, so its head comes back to them) or, without one, to the archive as dead. A dead letter starts
-- its reads again, unless its queue is one SQS made or changed (it has SQS attributes): SQS keeps a
-- dead letter's receive count and first receive, and a message SQS sent records the queue it came
-- from (`dq` in its `sqs` headers: DeadLetterQueueSourceArn).
CREATE OR REPLACE FUNCTION queue_dead_letter(p_queue bigint, p_dead bigint[], p_dlq bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_sqs_source text;
BEGIN
    IF p_dlq IS NOT NULL THEN
        SELECT q.name INTO v_sqs_source FROM queues q JOIN sqs_queues s ON s.queue_id = q.id WHERE q.id = p_queue;
    END IF;
    WITH expired AS (
        DELETE FROM queue_messages m WHERE m.queue_id = p_queue AND m.msg_id = ANY (p_dead) RETURNING m.*
    ), to_dead_letter_queue AS (
        INSERT INTO queue_messages (queue_id, msg_id, vt, read_ct, enqueued_at, message, headers, size, dead_from,
                                    first_read_at)
        SELECT p_dlq, e.msg_id, clock_timestamp(), CASE WHEN v_sqs_source IS NULL THEN 0 ELSE e.read_ct END,
               e.enqueued_at, e.message,
               CASE WHEN v_sqs_source IS NOT NULL AND jsonb_typeof(e.headers->'sqs') = 'object'
                    THEN jsonb_set(e.headers, '{sqs,dq}', to_jsonb(v_sqs_source)) ELSE e.headers END,
               e.size, p_queue, CASE WHEN v_sqs_source IS NOT NULL THEN e.first_read_at END
        FROM expired e WHERE p_dlq IS NOT NULL
    )
    INSERT INTO queue_archive (queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size, dead)
    SELECT p_queue, e.msg_id, e.read_ct, e.enqueued_at, e.vt, e.message, e.headers, e.size, true
    FROM expired e WHERE p_dlq IS NULL;
    IF p_dlq IS NOT NULL THEN
        PERFORM queue_head_back(p_dlq, (SELECT min(d) FROM unnest(p_dead) d), false);
    END IF;
END $$;

-- Claim up to p_qty visible messages of queue p_queue for p_vt seconds. A claimed message already
-- read max_reads times is dead-lettered by the same statement instead of being handed out: moved
-- to the dead-letter queue (keeping its id) or archived as dead (a move lost in a crash is simply
-- made again by the next read).
-- Each message comes with when it was first handed out (this claim's start, for a first read).
DROP FUNCTION IF EXISTS queue_claim(bigint, int, float8, int, bigint);
CREATE OR REPLACE FUNCTION queue_claim(p_queue bigint, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint)
RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb,
               r_first_read_at float8)
LANGUAGE plpgsql AS $$
DECLARE
    v_head    bigint;
    v_scanned timestamptz;
    v_full    boolean;
    v_live    tid[];
    v_dead    bigint[];
    v_next    bigint;
BEGIN
    -- A claim does not wait for its WAL flush: lost in a crash, it only makes the messages
    -- visible again (at-least-once delivery holds). Sends, archives, deletes and pops still wait.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- From the head, or from the front (the claim-head rule: claim_heads.sql).
    SELECT h.head, h.scanned_at INTO v_head, v_scanned FROM queue_heads h WHERE h.queue_id = p_queue;
    v_full := claim_head_full(v_scanned, x'5048'::int, p_queue);  -- "PH"

    -- The candidates in id order, split into those to hand out and those read max_reads times.
    -- Those handed out are known by their row's ctid, stable while this transaction holds the row
    -- lock, so the update below fetches them directly instead of through the index again.
    SELECT coalesce(array_agg(c.ctid) FILTER (WHERE p_max_reads IS NULL OR c.read_ct < p_max_reads), '{}'),
           coalesce(array_agg(c.msg_id) FILTER (WHERE c.read_ct >= p_max_reads), '{}'),
           max(c.msg_id) + 1
    INTO v_live, v_dead, v_next
    FROM (
        SELECT q.ctid, q.msg_id, q.read_ct FROM queue_messages q
        WHERE q.queue_id = p_queue AND q.msg_id >= claim_head_from(v_head, v_full)
          AND q.vt <= clock_timestamp()
        ORDER BY q.msg_id LIMIT (SELECT p_qty) FOR UPDATE SKIP LOCKED
    ) c;

    -- Dead-letter in the same call that would have handed them out (queue_dead_letter).
    IF cardinality(v_dead) > 0 THEN
        PERFORM queue_dead_letter(p_queue, v_dead, p_dlq);
    END IF;

    IF cardinality(v_live) > 0 THEN
        RETURN QUERY
        UPDATE queue_messages m
        SET vt = clock_timestamp() + p_vt * interval '1 second', read_ct = m.read_ct + 1,
            first_read_at = coalesce(m.first_read_at, now())  -- the transaction's start: what sqs_receive answers
        WHERE m.ctid = ANY (v_live) AND m.queue_id = p_queue
        RETURNING m.msg_id, m.read_ct, date_part('epoch', m.enqueued_at), date_part('epoch', m.vt),
                  m.message, m.headers, date_part('epoch', m.first_read_at);
    END IF;

    -- Move the head past what was taken (claim_heads.sql). A claim hiding its messages for under a
    -- second leaves it where it is, so they are found again as soon as they come back.
    IF p_vt < 1 THEN
        v_next := NULL;
    END IF;
    IF claim_head_moves(v_head, v_next, v_full) THEN
        UPDATE queue_heads h SET
            scanned_at = claim_head_scanned(h.scanned_at, v_full),
            head = claim_head_next(h.head, v_next, v_full, cardinality(v_live) + cardinality(v_dead) = p_qty)
        WHERE h.queue_id = (SELECT l.queue_id FROM queue_heads l WHERE l.queue_id = p_queue FOR UPDATE SKIP LOCKED);
    END IF;
END $$;

-- The read of the queues API answers one JSON array of message objects in id order: the client
-- parses one document instead of a row and a jsonb value per message, which was most of the
-- Python time of a read of 100.
CREATE OR REPLACE FUNCTION queue_read(p_tenant uuid, p_project uuid, p_name text, p_qty int, p_vt float8) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE q queues;
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    RETURN (
        SELECT coalesce(json_agg(m ORDER BY m.msg_id), '[]')
        FROM (SELECT c.r_msg_id AS msg_id, c.r_read_ct AS read_ct, c.r_enqueued_at AS enqueued_at, c.r_vt AS vt,
                     c.r_message AS message, c.r_headers AS headers
              FROM queue_claim(q.id, p_qty, coalesce(p_vt, q.visibility_timeout_sec), q.max_reads,
                               q.dead_letter_queue_id) c) m
    );
END $$;

-- Move waiting messages to the archive; returns the ids that were waiting in this queue.
-- A move leaves the queue's stored bytes (and its tenant's) unchanged, so it counts itself with one
-- counter update and tells the two statement triggers it fires to stand aside (postbox.counted).
CREATE OR REPLACE FUNCTION queue_archive_ids(p_queue bigint, p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_n bigint; v_bytes bigint;
BEGIN
    PERFORM set_config('postbox.counted', 'on', true);  -- the two statement triggers stand aside
    WITH moved AS (
        DELETE FROM queue_messages WHERE queue_id = p_queue AND msg_id = ANY (p_ids) RETURNING *
    ), archived AS (
        INSERT INTO queue_archive (queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size)
        SELECT queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size FROM moved
        RETURNING msg_id, size
    )
    SELECT coalesce(array_agg(msg_id ORDER BY msg_id), '{}'), count(*), coalesce(sum(size), 0)
    INTO v_ids, v_n, v_bytes FROM archived;
    PERFORM set_config('postbox.counted', 'off', true);
    IF v_n > 0 THEN
        PERFORM queue_count(p_queue, 0, v_n, -v_bytes, v_n, v_n, v_bytes, 0);
    END IF;
    RETURN v_ids;
END $$;

CREATE OR REPLACE FUNCTION queue_archive(p_tenant uuid, p_project uuid, p_name text, p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
BEGIN
    RETURN queue_archive_ids((queue_find(p_tenant, p_project, p_name)).id, p_ids);
END $$;

-- Delete waiting messages of a queue found by name, in one round trip; returns, in order, the ids
-- that were waiting there (the statement triggers count what left).
CREATE OR REPLACE FUNCTION queue_delete(p_tenant uuid, p_project uuid, p_name text, p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[];
BEGIN
    WITH gone AS (
        DELETE FROM queue_messages
        WHERE queue_id = (queue_find(p_tenant, p_project, p_name)).id AND msg_id = ANY (p_ids)
        RETURNING msg_id
    )
    SELECT coalesce(array_agg(msg_id ORDER BY msg_id), '{}') INTO v_ids FROM gone;
    RETURN v_ids;
END $$;
