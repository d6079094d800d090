-- The work surface's lifecycle journal: every moment of a message's life (published, claimed,
-- completed, failed, released, extended, cancelled, dead-lettered, expired) and every management
-- change is written once, as one narrow row of `work_journal`, in the transaction that makes it.
-- That row is both the audit record (the audit routes read the journal) and the source of the
-- scope's events: the `_events` queue is materialised from the journal when it is read (claimed,
-- listed, looked at, counted), not written on every completion. A completion of 100 messages thus
-- writes 100 narrow rows with one index (two when they carry correlation ids) instead of 100 full
-- message rows with eight.
--
-- Exactly once into `_events`: a writer of a row that `_events` will receive (`emit`) holds the
-- scope's journal lock in share mode until it commits; the materialiser takes it exclusively, so
-- once it holds it every emitted row numbered so far has committed, and it copies the rows past
-- the scope's mark (work_journal_marks) and moves the mark, under that lock. Writers that come
-- after wait for it and number their rows past the mark.

-- A writer of an emitted row holds this (share mode) until it commits; see the header.
CREATE OR REPLACE FUNCTION work_journal_lock(p_scope uuid) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock_shared(x'574a'::int, hashtext(p_scope::text));
$$;

-- Write one journal row (the hot paths write theirs inline, set-based).
CREATE OR REPLACE FUNCTION work_journal_add(s work_scopes, p_type text, m work_messages, p_actor_type text, p_actor_id text,
                                 p_emit boolean, p_payload jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_emit THEN
        PERFORM work_journal_lock(s.id);
    END IF;
    INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id, actor_type,
                              actor_id, attempts, emit, payload)
    VALUES (s.id, s.tenant_id, p_type, m.id, m.queue_id, m.correlation_id, p_actor_type, p_actor_id, m.attempts,
            p_emit, p_payload);
END $$;

-- Copy the journal's emitted rows past the scope's mark into its `_events` queue, as the event
-- messages of a scope's events: body {event_type, event_id, source, tenant_id, payload, timestamp},
-- the original's correlation id, its id as causation_id. Called by every read of `_events` (and of
-- a correlation chain, which shows events) before it reads, in the same transaction: at most
-- 10,000 a call, the oldest first (a later read brings the rest). Returns how many it copied.
CREATE OR REPLACE FUNCTION work_events_sync(p_scope uuid) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    v_upto bigint;
    v_last bigint;
    n int;
BEGIN
    v_upto := coalesce((SELECT upto FROM work_journal_marks WHERE scope_id = p_scope), 0);
    -- Nothing committed past the mark: nothing to do, and no lock (what is not committed yet is
    -- not this read's to see).
    IF NOT EXISTS (SELECT 1 FROM work_journal j WHERE j.scope_id = p_scope AND j.seq > v_upto AND j.emit) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(x'574a'::int, hashtext(p_scope::text));
    INSERT INTO work_journal_marks (scope_id) VALUES (p_scope) ON CONFLICT (scope_id) DO NOTHING;
    SELECT upto INTO v_upto FROM work_journal_marks WHERE scope_id = p_scope FOR UPDATE;
    SELECT * INTO s FROM work_scopes WHERE id = p_scope;
    -- At most 10,000 events a read (writers of the scope wait while this transaction holds the
    -- lock): up to the 10,000th emitted row past the mark, or everything when there are fewer.
    v_last := coalesce((SELECT j.seq FROM work_journal j WHERE j.scope_id = p_scope AND j.seq > v_upto AND j.emit
                        ORDER BY j.seq OFFSET 9999 LIMIT 1),
                       (SELECT max(j.seq) FROM work_journal j WHERE j.scope_id = p_scope));
    WITH src AS (
        SELECT j.*, work_uuid7() AS event_id FROM work_journal j
        WHERE j.scope_id = p_scope AND j.seq > v_upto AND j.seq <= v_last AND j.emit
    ), made AS (
        INSERT INTO work_messages (id, queue_id, scope_id, tenant_id, visible_at, message_type, body,
                                   correlation_id, causation_id, source_type, source_id, max_retries,
                                   visibility_timeout_s)
        SELECT e.event_id, s.events_queue_id, s.id, s.tenant_id, clock_timestamp(), e.event_type,
               jsonb_build_object(
                   'event_type', e.event_type, 'event_id', e.event_id,
                   'source', 'scaiqueue/scopes/' || s.id || '/messages/' || e.message_id,
                   'tenant_id', s.tenant_id,
                   'payload', jsonb_build_object(
                       'message_id', e.message_id, 'scope_id', s.id, 'queue_id', q.queue_id,
                       'message_type', m.message_type, 'correlation_id', e.correlation_id, 'attempts', e.attempts)
                       || CASE WHEN e.event_type = 'scaiqueue.message.completed'
                                    AND NOT coalesce(e.payload ? 'response', false)
                               THEN jsonb_build_object('response', m.response) ELSE '{}' END
                       || coalesce(e.payload, '{}'),
                   'timestamp', e.at),
               e.correlation_id, e.message_id::text, 'system', 'scaiqueue', 3, 30
        FROM src e
        LEFT JOIN work_queues q ON q.id = e.queue_id
        LEFT JOIN work_messages m ON m.id = e.message_id
        ORDER BY e.seq
        RETURNING 1
    )
    SELECT count(*) INTO n FROM made;
    UPDATE work_journal_marks SET upto = v_last WHERE scope_id = p_scope;
    IF n > 0 THEN
        PERFORM work_count(s.events_queue_id, n, 0, n, 0, 0);
    END IF;
    RETURN n;
END $$;

-- The scope a request names (as work_scope_of), with its `_events` brought up to date: what the
-- reads of messages, queues and correlation chains call first.
CREATE OR REPLACE FUNCTION work_scope_synced(p_tenant uuid, p_scope uuid) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE s work_scopes;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    PERFORM work_events_sync(s.id);
    RETURN s.id;
END $$;

-- The queue a read names (as work_queue_of, its scope checked as work_scope_of), the scope's
-- `_events` materialised first when that is the queue read.
CREATE OR REPLACE FUNCTION work_queue_synced(p_tenant uuid, p_scope uuid, p_queue uuid) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s work_scopes; q work_queues;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(s.id, p_queue);
    IF q.id = s.events_queue_id THEN
        PERFORM work_events_sync(s.id);
    END IF;
    RETURN q.id;
END $$;

-- The journal's last seq handed out (the end of a walk): no scan needed.
CREATE OR REPLACE FUNCTION work_journal_last_seq() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('work_journal', 'seq')::regclass), 0)
$$;
