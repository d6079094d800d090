-- A per-queue head hint, so a claim starts its index walk where visible messages begin instead of
-- at the queue's first index entry.
--
-- Archived and deleted messages leave dead entries at the front of queue_messages' primary key
-- until vacuum removes them, and in-flight messages sit there too; a claim that always starts from
-- the front walks all of them, and gets slower with every message drained (38k -> 19k msg/s over
-- three 200k drains in bench/queues.py). A claim now starts at `head`, the id after the last one
-- claimed, and moves it forward. Messages that turn visible again behind the head (a visibility
-- timeout running out, a message sent in a transaction that committed after later ones) are found
-- by a full walk from the front, which a claim makes whenever the last one is older than 250 ms
-- (one claim at a time per queue), so they come back at most that much late. set_vt to under a
-- second and dead letters moved in (they keep their older ids) pull the head back at once.
--
-- A claim never waits for the head row: it moves the head only when it can lock the row at once
-- (another claim moving it meanwhile will have moved it as far), so the row is created with its
-- queue and always exists.

-- A read rewrites each row it claims once (vt, read_ct). At fillfactor 70 a page had room for the
-- new versions of fewer than half its rows, so most claims moved rows to other pages and added
-- index entries (and bottom-up index deletion to clean them). At 50 a page keeps as much free as it
-- holds, so every row on it can be rewritten in place once (a HOT update): read+archive went from
-- 70k to 87k msg/s in bench/queues.py's workload, sends unchanged. New pages only: existing ones
-- keep their packing until vacuum frees them.
ALTER TABLE queue_messages SET (fillfactor = 50);

CREATE TABLE queue_heads (
    queue_id   bigint PRIMARY KEY REFERENCES queues(id) ON DELETE CASCADE,
    head       bigint NOT NULL DEFAULT 0,
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);
INSERT INTO queue_heads (queue_id) SELECT id FROM queues;

CREATE FUNCTION queue_head_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO queue_heads (queue_id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER queue_head_created AFTER INSERT ON queues FOR EACH ROW EXECUTE FUNCTION queue_head_created();

-- Pull a queue's head back to `p_id` so the next claim walks from there. Without `p_wait`, a busy
-- head row is left alone (that queue's next full walk finds the message instead).
CREATE FUNCTION queue_head_back(p_queue bigint, p_id bigint, p_wait boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_wait THEN
        UPDATE queue_heads SET head = p_id WHERE queue_id = p_queue AND head > p_id;
    ELSE
        UPDATE queue_heads SET head = p_id
        WHERE queue_id = (SELECT l.queue_id FROM queue_heads l WHERE l.queue_id = p_queue FOR UPDATE SKIP LOCKED)
          AND head > p_id;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION queue_claim(p_queue bigint, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint)
RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb)
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
    SELECT h.head, h.scanned_at INTO v_head, v_scanned FROM queue_heads h WHERE h.queue_id = p_queue;
    v_full := v_scanned IS NULL OR v_scanned < clock_timestamp() - interval '250 milliseconds';
    IF v_full AND v_scanned IS NOT NULL THEN
        -- One full walk at a time per queue: the others claim from the head meanwhile.
        v_full := pg_try_advisory_xact_lock(x'5048'::int, (p_queue % 2147483648)::int);  -- "PH"
    END IF;

    -- The candidates in id order, split into those to hand out and those read max_reads times.
    -- Those handed out are known by their row's ctid, stable while this transaction holds the row
    -- lock, so the update below fetches them directly instead of through the index again.
    SELECT coalesce(array_agg(c.ctid) FILTER (WHERE p_max_reads IS NULL OR c.read_ct < p_max_reads), '{}'),
           coalesce(array_agg(c.msg_id) FILTER (WHERE c.read_ct >= p_max_reads), '{}'),
           max(c.msg_id) + 1
    INTO v_live, v_dead, v_next
    FROM (
        SELECT q.ctid, q.msg_id, q.read_ct FROM queue_messages q
        WHERE q.queue_id = p_queue AND q.msg_id >= CASE WHEN v_full THEN 0 ELSE v_head END
          AND q.vt <= clock_timestamp()
        ORDER BY q.msg_id LIMIT (SELECT p_qty) FOR UPDATE SKIP LOCKED
    ) c;

    -- Dead-letter in the same statement that would have handed them out: to the dead-letter queue
    -- (keeping their ids, so its head comes back to them) or to the archive as dead.
    IF cardinality(v_dead) > 0 THEN
        WITH expired AS (
            DELETE FROM queue_messages m WHERE m.queue_id = p_queue AND m.msg_id = ANY (v_dead) RETURNING m.*
        ), to_dead_letter_queue AS (
            INSERT INTO queue_messages (queue_id, msg_id, vt, read_ct, enqueued_at, message, headers, size, dead_from)
            SELECT p_dlq, e.msg_id, clock_timestamp(), 0, e.enqueued_at, e.message, e.headers, e.size, p_queue
            FROM expired e WHERE p_dlq IS NOT NULL
        )
        INSERT INTO queue_archive (queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size, dead)
        SELECT p_queue, e.msg_id, e.read_ct, e.enqueued_at, e.vt, e.message, e.headers, e.size, true
        FROM expired e WHERE p_dlq IS NULL;
        IF p_dlq IS NOT NULL THEN
            PERFORM queue_head_back(p_dlq, (SELECT min(d) FROM unnest(v_dead) d), false);
        END IF;
    END IF;

    IF cardinality(v_live) > 0 THEN
        RETURN QUERY
        UPDATE queue_messages m
        SET vt = clock_timestamp() + p_vt * interval '1 second', read_ct = m.read_ct + 1
        WHERE m.ctid = ANY (v_live) AND m.queue_id = p_queue
        RETURNING m.msg_id, m.read_ct, date_part('epoch', m.enqueued_at), date_part('epoch', m.vt),
                  m.message, m.headers;
    END IF;

    -- Move the head past what was taken. A claim hiding its messages for under a second leaves it
    -- where it is, so they are found again as soon as they come back. A full walk that filled its
    -- batch may pull the head back to where it found visible messages.
    IF p_vt < 1 THEN
        v_next := NULL;
    END IF;
    IF v_full OR v_next > v_head THEN
        UPDATE queue_heads h SET
            scanned_at = CASE WHEN v_full THEN clock_timestamp() ELSE h.scanned_at END,
            head = CASE
                WHEN v_next IS NULL THEN h.head
                WHEN v_full AND cardinality(v_live) + cardinality(v_dead) = p_qty THEN v_next
                ELSE greatest(h.head, v_next)
            END
        WHERE h.queue_id = (SELECT l.queue_id FROM queue_heads l WHERE l.queue_id = p_queue FOR UPDATE SKIP LOCKED);
    END IF;
END $$;

-- The read of the queues API answers one JSON array of message objects in id order: the client
-- parses one document instead of a row and a jsonb value per message, which was most of the
-- Python time of a read of 100.
DROP FUNCTION queue_read(uuid, uuid, text, int, float8);
CREATE FUNCTION queue_read(p_tenant uuid, p_project uuid, p_name text, p_qty int, p_vt float8) RETURNS json
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

-- An archive answers the archived ids as one array in id order.
DROP FUNCTION queue_archive(uuid, uuid, text, bigint[]);
DROP FUNCTION queue_archive_ids(bigint, bigint[]);
CREATE FUNCTION queue_archive_ids(p_queue bigint, p_ids bigint[]) RETURNS bigint[]
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

CREATE FUNCTION queue_archive(p_tenant uuid, p_project uuid, p_name text, p_ids bigint[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
BEGIN
    RETURN queue_archive_ids((queue_find(p_tenant, p_project, p_name)).id, p_ids);
END $$;
