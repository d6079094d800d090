-- The message engine: queues, their waiting messages, their archive, and counters kept by
-- statement-level triggers so every path (send, read, archive, delete, purge, retention,
-- dead-lettering) counts the same way without a full count on any hot path.

CREATE TABLE queues (
    id                     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue_id               uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    tenant_id              uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    project_id             uuid NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name                   text NOT NULL,
    description            text,
    visibility_timeout_sec int  NOT NULL DEFAULT 30,
    max_reads              int,
    dead_letter_queue_id   bigint REFERENCES queues(id),
    retention_days         int,
    app_send               boolean NOT NULL DEFAULT false,
    consumer               jsonb,
    consumer_last_error    text NOT NULL DEFAULT '',
    created_by             text NOT NULL DEFAULT '',
    created_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (project_id, name)
);
CREATE INDEX queues_tenant ON queues (tenant_id);
CREATE INDEX queues_dead_letter ON queues (dead_letter_queue_id) WHERE dead_letter_queue_id IS NOT NULL;

CREATE SEQUENCE queue_msg_id_seq;

-- One row per waiting (visible, delayed or in-flight) message. The primary key is the claim
-- order (fifo by msg_id within a queue); msg_id is global so a dead letter keeps its id.
CREATE TABLE queue_messages (
    queue_id    bigint NOT NULL,
    msg_id      bigint NOT NULL DEFAULT nextval('queue_msg_id_seq'),
    vt          timestamptz NOT NULL,
    read_ct     int  NOT NULL DEFAULT 0,
    enqueued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    message     jsonb,
    headers     jsonb,
    size        int  NOT NULL,
    dead_from   bigint,
    PRIMARY KEY (queue_id, msg_id)
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02);

CREATE TABLE queue_archive (
    queue_id    bigint NOT NULL,
    msg_id      bigint NOT NULL,
    read_ct     int  NOT NULL,
    enqueued_at timestamptz NOT NULL,
    vt          timestamptz NOT NULL,
    archived_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    message     jsonb,
    headers     jsonb,
    size        int  NOT NULL,
    dead        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (queue_id, msg_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX queue_archive_archived_at ON queue_archive USING brin (archived_at);
CREATE INDEX queue_archive_dead ON queue_archive (queue_id, msg_id) WHERE dead;

CREATE TABLE queue_counters (
    queue_id       bigint NOT NULL,
    slot           int    NOT NULL,
    sent           bigint NOT NULL DEFAULT 0,
    removed        bigint NOT NULL DEFAULT 0,
    live_bytes     bigint NOT NULL DEFAULT 0,
    archived_total bigint NOT NULL DEFAULT 0,
    archive_rows   bigint NOT NULL DEFAULT 0,
    archive_bytes  bigint NOT NULL DEFAULT 0,
    dead_total     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue_id, slot)
) WITH (fillfactor = 50);

-- Add deltas to a queue's counters and its tenant's stored bytes, on this backend's slot.
CREATE FUNCTION queue_count(
    p_queue bigint, p_sent bigint, p_removed bigint, p_live_bytes bigint,
    p_archived bigint, p_archive_rows bigint, p_archive_bytes bigint, p_dead bigint
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_slot int := pg_backend_pid() % 8;
    v_tenant uuid;
BEGIN
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
    IF p_live_bytes + p_archive_bytes <> 0 THEN
        SELECT tenant_id INTO v_tenant FROM queues WHERE id = p_queue;
        IF v_tenant IS NOT NULL THEN
            INSERT INTO tenant_storage AS t (tenant_id, slot, stored_bytes)
            VALUES (v_tenant, v_slot, p_live_bytes + p_archive_bytes)
            ON CONFLICT (tenant_id, slot) DO UPDATE SET stored_bytes = t.stored_bytes + excluded.stored_bytes;
        END IF;
    END IF;
END $$;

CREATE FUNCTION queue_messages_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF current_setting('postbox.counted', true) = 'on' THEN  -- the statement counted itself
        RETURN NULL;
    END IF;
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM new_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, r.n, 0, r.b, 0, 0, 0, 0);
    END LOOP;
    -- Dead letters moved here from another queue count as dead in the queue they left.
    FOR r IN SELECT dead_from, count(*) AS n FROM new_rows WHERE dead_from IS NOT NULL GROUP BY dead_from LOOP
        PERFORM queue_count(r.dead_from, 0, 0, 0, 0, 0, 0, r.n);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION queue_messages_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF current_setting('postbox.counted', true) = 'on' THEN  -- the statement counted itself
        RETURN NULL;
    END IF;
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM old_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, r.n, -r.b, 0, 0, 0, 0);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION queue_archive_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF current_setting('postbox.counted', true) = 'on' THEN  -- the statement counted itself
        RETURN NULL;
    END IF;
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b, count(*) FILTER (WHERE dead) AS d
             FROM new_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, 0, 0, r.n - r.d, r.n, r.b, r.d);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION queue_archive_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    IF current_setting('postbox.counted', true) = 'on' THEN  -- the statement counted itself
        RETURN NULL;
    END IF;
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM old_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, 0, 0, 0, -r.n, -r.b, 0);
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER queue_messages_ins AFTER INSERT ON queue_messages
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_messages_inserted();
CREATE TRIGGER queue_messages_del AFTER DELETE ON queue_messages
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_messages_deleted();
CREATE TRIGGER queue_archive_ins AFTER INSERT ON queue_archive
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_archive_inserted();
CREATE TRIGGER queue_archive_del AFTER DELETE ON queue_archive
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION queue_archive_deleted();

-- Long-polling readers announce themselves here (by channel) so writers NOTIFY only when someone
-- waits: NOTIFY takes a global lock at commit, and an unconditional one would throttle every writer.
CREATE UNLOGGED TABLE waiters (
    channel text NOT NULL,
    waiter  uuid NOT NULL,
    until   timestamptz NOT NULL,
    PRIMARY KEY (channel, waiter)
);

-- ---- Hot paths as functions: one round trip per call -------------------------------------------
-- Errors a caller may hit are raised with SQLSTATEs of class PB (PB404, PB403, PB413) and mapped to
-- the domain's typed errors in Python. Claims use `LIMIT (SELECT n)` and `= ANY (ARRAY(...))` so
-- the plan stays an index walk in msg_id order whatever the planner's statistics say of the queue.

CREATE FUNCTION queue_find(p_tenant uuid, p_project uuid, p_name text) RETURNS queues
LANGUAGE plpgsql STABLE AS $$
DECLARE q queues;
BEGIN
    SELECT * INTO q FROM queues
    WHERE tenant_id = p_tenant AND name = p_name
      AND project_id = coalesce(p_project, (SELECT id FROM projects WHERE tenant_id = p_tenant AND name = 'default'));
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such queue in this environment.';
    END IF;
    RETURN q;
END $$;

CREATE FUNCTION queue_send(
    p_tenant uuid, p_project uuid, p_name text, p_anonymous boolean,
    p_messages text[], p_sizes int[], p_largest int, p_delay float8, p_headers jsonb
) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    lim plans;
    v_month date := date_trunc('month', clock_timestamp())::date;
    v_n int := cardinality(p_messages);
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    IF p_anonymous AND NOT q.app_send THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such queue in this environment.';
    END IF;
    SELECT p.* INTO lim FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = p_tenant;
    IF p_largest > lim.max_message_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'PB413', DETAIL = 'max_message_bytes',
            MESSAGE = format('The message is over the plan''s %s bytes.', lim.max_message_bytes);
    END IF;
    IF (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
        WHERE tenant_id = p_tenant AND month = v_month) + v_n > lim.messages_month THEN
        RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'messages_month',
            MESSAGE = 'The plan''s monthly messages (queues.messages_month) are used up.';
    END IF;
    IF (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = p_tenant) >= lim.storage_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'storage_bytes',
            MESSAGE = 'The plan''s storage (queues.storage_bytes) is used up.';
    END IF;
    INSERT INTO tenant_monthly_messages AS u (tenant_id, month, slot, messages)
    VALUES (p_tenant, v_month, pg_backend_pid() % 8, v_n)
    ON CONFLICT (tenant_id, month, slot) DO UPDATE SET messages = u.messages + excluded.messages;
    IF EXISTS (SELECT 1 FROM waiters WHERE channel = 'queue_' || q.id AND until > clock_timestamp()) THEN
        PERFORM pg_notify('queue_' || q.id, '');
    END IF;
    RETURN QUERY
    INSERT INTO queue_messages (queue_id, vt, message, headers, size)
    SELECT q.id, clock_timestamp() + p_delay * interval '1 second', u.m::jsonb, p_headers, u.s
    FROM unnest(p_messages, p_sizes) WITH ORDINALITY AS u(m, s, n)
    ORDER BY u.n
    RETURNING msg_id;
END $$;

-- Claim up to p_qty visible messages of queue p_queue for p_vt seconds. A claimed message already
-- read max_reads times is dead-lettered by the same statement instead of being handed out: moved
-- to the dead-letter queue (keeping its id) or archived as dead (a move lost in a crash is simply
-- made again by the next read).
CREATE FUNCTION queue_claim(p_queue bigint, p_qty int, p_vt float8, p_max_reads int, p_dlq bigint)
RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb)
LANGUAGE plpgsql AS $$
BEGIN
    -- A claim does not wait for its WAL flush: lost in a crash, it only makes the messages
    -- visible again (at-least-once delivery holds). Sends, archives, deletes and pops still wait.
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_max_reads IS NULL THEN
        RETURN QUERY
        WITH cand AS (
            SELECT c.msg_id FROM queue_messages c
            WHERE c.queue_id = p_queue AND c.vt <= clock_timestamp()
            ORDER BY c.msg_id LIMIT (SELECT p_qty) FOR UPDATE SKIP LOCKED
        )
        UPDATE queue_messages m
        SET vt = clock_timestamp() + p_vt * interval '1 second', read_ct = m.read_ct + 1
        WHERE m.queue_id = p_queue AND m.msg_id = ANY (ARRAY(SELECT cand.msg_id FROM cand))
        RETURNING m.msg_id, m.read_ct, extract(epoch FROM m.enqueued_at)::float8,
                  extract(epoch FROM m.vt)::float8, m.message, m.headers;
        RETURN;
    END IF;
    RETURN QUERY
    WITH cand AS (
        SELECT c.msg_id, c.read_ct FROM queue_messages c
        WHERE c.queue_id = p_queue AND c.vt <= clock_timestamp()
        ORDER BY c.msg_id LIMIT (SELECT p_qty) FOR UPDATE SKIP LOCKED
    ), expired AS (
        DELETE FROM queue_messages m
        WHERE m.queue_id = p_queue
          AND m.msg_id = ANY (ARRAY(SELECT cand.msg_id FROM cand WHERE cand.read_ct >= p_max_reads))
        RETURNING m.*
    ), to_dead_letter_queue AS (
        INSERT INTO queue_messages (queue_id, msg_id, vt, read_ct, enqueued_at, message, headers, size, dead_from)
        SELECT p_dlq, e.msg_id, clock_timestamp(), 0, e.enqueued_at, e.message, e.headers, e.size, p_queue
        FROM expired e WHERE p_dlq IS NOT NULL
    ), to_dead_archive AS (
        INSERT INTO queue_archive (queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size, dead)
        SELECT p_queue, e.msg_id, e.read_ct, e.enqueued_at, e.vt, e.message, e.headers, e.size, true
        FROM expired e WHERE p_dlq IS NULL
    )
    UPDATE queue_messages m
    SET vt = clock_timestamp() + p_vt * interval '1 second', read_ct = m.read_ct + 1
    WHERE m.queue_id = p_queue
      AND m.msg_id = ANY (ARRAY(SELECT cand.msg_id FROM cand WHERE cand.read_ct < p_max_reads))
    RETURNING m.msg_id, m.read_ct, extract(epoch FROM m.enqueued_at)::float8,
              extract(epoch FROM m.vt)::float8, m.message, m.headers;
END $$;

CREATE FUNCTION queue_read(p_tenant uuid, p_project uuid, p_name text, p_qty int, p_vt float8)
RETURNS TABLE (r_msg_id bigint, r_read_ct int, r_enqueued_at float8, r_vt float8, r_message jsonb, r_headers jsonb)
LANGUAGE plpgsql AS $$
DECLARE q queues;
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    RETURN QUERY SELECT * FROM queue_claim(q.id, p_qty, coalesce(p_vt, q.visibility_timeout_sec),
                                           q.max_reads, q.dead_letter_queue_id);
END $$;

-- Move waiting messages to the archive; returns the ids that were waiting in this queue.
-- A move leaves the queue's stored bytes (and its tenant's) unchanged, so it counts itself with one
-- counter update and tells the two statement triggers it fires to stand aside (postbox.counted).
CREATE FUNCTION queue_archive_ids(p_queue bigint, p_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE v_ids bigint[]; v_n bigint; v_bytes bigint;
BEGIN
    PERFORM set_config('postbox.counted', 'on', true);
    WITH moved AS (
        DELETE FROM queue_messages WHERE queue_id = p_queue AND msg_id = ANY (p_ids) RETURNING *
    ), archived AS (
        INSERT INTO queue_archive (queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size)
        SELECT queue_id, msg_id, read_ct, enqueued_at, vt, message, headers, size FROM moved
        RETURNING msg_id, size
    )
    SELECT array_agg(msg_id), count(*), coalesce(sum(size), 0) INTO v_ids, v_n, v_bytes FROM archived;
    PERFORM set_config('postbox.counted', 'off', true);
    IF v_n > 0 THEN
        PERFORM queue_count(p_queue, 0, v_n, -v_bytes, v_n, v_n, v_bytes, 0);
    END IF;
    RETURN QUERY SELECT unnest(coalesce(v_ids, '{}'));
END $$;

CREATE FUNCTION queue_archive(p_tenant uuid, p_project uuid, p_name text, p_ids bigint[]) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT queue_archive_ids((queue_find(p_tenant, p_project, p_name)).id, p_ids);
END $$;
