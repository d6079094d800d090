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
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b FROM old_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, r.n, -r.b, 0, 0, 0, 0);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION queue_archive_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT queue_id, count(*) AS n, sum(size) AS b, count(*) FILTER (WHERE dead) AS d
             FROM new_rows GROUP BY queue_id LOOP
        PERFORM queue_count(r.queue_id, 0, 0, 0, r.n - r.d, r.n, r.b, r.d);
    END LOOP;
    RETURN NULL;
END $$;

CREATE FUNCTION queue_archive_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
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
