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
--
-- Actors: the hot-path functions take the caller's actor (type, id) as two trailing parameters,
-- defaulting to NULL (old callers still work; their rows have no actor). A publish's actor is the
-- message's source (`source_type`, `source_id` in the message fields, set by the domain).

-- Message ids ordered by time (UUID version 7: 48 bits of Unix milliseconds, then random bits), so
-- messages published together sit together in the primary key. A claim looks its messages up by
-- id, and a completion, which ends the rows, writes a new primary-key entry for each: with random
-- ids each of the 100 lands on its own leaf page, with these on a few. Measured on claim(100) and
-- complete-batch(100): a fifth less database CPU each.
CREATE FUNCTION work_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                                           * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
ALTER TABLE work_messages ALTER COLUMN id SET DEFAULT work_uuid7();

CREATE TABLE work_journal (
    seq            bigint GENERATED ALWAYS AS IDENTITY,
    scope_id       uuid,                 -- NULL: a tenant-level record (API keys)
    tenant_id      uuid NOT NULL,
    at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    event_type     text NOT NULL,        -- scaiqueue.message.completed, scaiqueue.queue.created, ...
    resource_type  text NOT NULL DEFAULT 'message',
    resource_id    text,                 -- NULL for a message: its message_id
    message_id     uuid,
    queue_id       bigint,               -- work_queues.id of a message's queue
    correlation_id text,
    actor_type     text,
    actor_id       text,
    attempts       int,
    outcome        text NOT NULL DEFAULT 'success',
    emit           boolean NOT NULL DEFAULT false,  -- copied into the scope's `_events`
    payload        jsonb                 -- small: reason, seconds, claimed_by, details
) WITH (fillfactor = 100, autovacuum_vacuum_insert_scale_factor = 0.05);
-- One index on the hot path: a scope's rows in order (materialising `_events`, the audit pages).
CREATE INDEX work_journal_scope ON work_journal (scope_id, seq);
-- A correlation chain's trace; messages without a correlation id do not enter it.
CREATE INDEX work_journal_correlation ON work_journal (scope_id, correlation_id, seq)
    WHERE correlation_id IS NOT NULL;

-- How far each scope's `_events` has been materialised from the journal.
CREATE TABLE work_journal_marks (
    scope_id uuid PRIMARY KEY REFERENCES work_scopes(id) ON DELETE CASCADE,
    upto     bigint NOT NULL DEFAULT 0
);

-- A writer of an emitted row holds this (share mode) until it commits; see the header.
CREATE FUNCTION work_journal_lock(p_scope uuid) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock_shared(x'574a'::int, hashtext(p_scope::text));
$$;

-- Write one journal row (the hot paths write theirs inline, set-based).
CREATE FUNCTION work_journal_add(s work_scopes, p_type text, m work_messages, p_actor_type text, p_actor_id text,
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

-- 0013's emitter, kept for any caller: it now journals the event (emitted into `_events` when read).
-- The caller no longer counts it: the materialiser counts what it copies.
CREATE OR REPLACE FUNCTION work_emit(p_scope work_scopes, p_type text, p_msg work_messages, p_extra jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM work_journal_add(p_scope, p_type, p_msg, 'system', 'scaiqueue', true, p_extra);
END $$;

-- Copy the journal's emitted rows past the scope's mark into its `_events` queue, as the event
-- messages 0013 wrote directly: body {event_type, event_id, source, tenant_id, payload, timestamp},
-- the original's correlation id, its id as causation_id. Called by every read of `_events` (and of
-- a correlation chain, which shows events) before it reads, in the same transaction: at most
-- 10,000 a call, the oldest first (a later read brings the rest). Returns how many it copied.
CREATE FUNCTION work_events_sync(p_scope uuid) RETURNS int LANGUAGE plpgsql AS $$
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
CREATE FUNCTION work_scope_synced(p_tenant uuid, p_scope uuid) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE s work_scopes;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    PERFORM work_events_sync(s.id);
    RETURN s.id;
END $$;

-- ---- dead letter --------------------------------------------------------------------------------

-- As in 0013, with the actor who caused it (the consumer whose fail was the last attempt; the
-- system for timeouts and overflow), journalled as `scaiqueue.message.dead_lettered` (emitted).
DROP FUNCTION work_dead_letter(uuid[], text);
CREATE FUNCTION work_dead_letter(p_ids uuid[], p_reason text, p_actor_type text DEFAULT 'system',
                                 p_actor_id text DEFAULT 'scaiqueue')
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    m work_messages;
    s work_scopes;
    v_pending uuid[];
    n int := 0;
BEGIN
    v_pending := ARRAY(SELECT x.id FROM work_messages x WHERE x.id = ANY (p_ids) AND x.state = 'pending');
    -- Counter rows are taken dead letter then queue (by queue).
    FOR m IN
        WITH ended AS (
            UPDATE work_messages w SET state = 'dead_lettered', failure_reason = p_reason,
                   ended_at = clock_timestamp(), updated_at = clock_timestamp(), claim_token = NULL
            WHERE w.id = ANY (p_ids) AND w.state IN ('pending', 'claimed')
            RETURNING w.*
        ) SELECT * FROM ended ORDER BY queue_id, seq
    LOOP
        SELECT * INTO s FROM work_scopes WHERE id = m.scope_id;
        INSERT INTO work_messages (queue_id, scope_id, tenant_id, visible_at, message_type, tier, score, labels,
                                   content_type, body, correlation_id, causation_id, parent_id, source_type,
                                   source_id, max_retries, visibility_timeout_s, hitl_spec, failure_reason)
        VALUES (s.dead_letter_queue_id, m.scope_id, m.tenant_id, clock_timestamp(), m.message_type, m.tier, m.score,
                m.labels, m.content_type, m.body, m.correlation_id, m.id::text, m.parent_id, m.source_type,
                m.source_id, 3, 30, m.hitl_spec, p_reason);
        IF m.queue_id <> s.events_queue_id THEN  -- before the counter rows: see the header
            PERFORM work_journal_lock(s.id);
        END IF;
        PERFORM work_count(s.dead_letter_queue_id, 1, 0, 1, 0, 0);
        PERFORM work_count(m.queue_id, CASE WHEN m.id = ANY (v_pending) THEN -1 ELSE 0 END,
                           CASE WHEN m.id = ANY (v_pending) THEN 0 ELSE -1 END, 0, 0, 1);
        PERFORM work_journal_add(s, 'scaiqueue.message.dead_lettered', m, p_actor_type, p_actor_id,
                                 m.queue_id <> s.events_queue_id, jsonb_build_object('reason', p_reason));
        PERFORM work_route_lifecycle(s, 'message_dead_lettered', m, 0);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- ---- lifecycle routing triggers -----------------------------------------------------------------

-- Rules on a moment of a message's life other than its publish: `message_completed`,
-- `message_failed` (every fail, retried or not) and `message_dead_lettered`. They are evaluated
-- where that moment is journalled, in its transaction, against the message (the same subject as a
-- publish's rules see, in the message's queue). A message at such a moment cannot move (it has
-- ended, or a fail already decided its retry), so the first matching rule acts by publishing a
-- child into its target queue (`route` and `copy` alike): the message's type, labels, body,
-- priority, content type, correlation id and HITL spec, with `parent_id` and `causation_id` the
-- message's id, the labels `routing.trigger` and `routing.rule`, and the rule as its source; the
-- child is then routed by `message_published` rules in its turn (a target in another scope is not
-- routed into: trusts govern publishes only). The 5-hop breaker counts the
-- message's ancestors (its parent_id chain): a message with 5 already is not routed again, and the
-- journal records `scaiqueue.routing.stopped` instead. A child that cannot be published (scope not
-- active, queue paused or full) is not, recorded the same way, and the moment itself still happens.
CREATE FUNCTION work_route_lifecycle(s work_scopes, p_trigger text, m work_messages, p_hops int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    q work_queues;
    c work_queues;
    r work_routing_rules;
    v_msg jsonb;
    v_hops int := p_hops;
    v_parent text := m.parent_id;
    v_why text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_routing_rules WHERE scope_id = s.id AND trigger = p_trigger AND enabled) THEN
        RETURN;
    END IF;
    SELECT * INTO q FROM work_queues WHERE id = m.queue_id;
    v_msg := jsonb_build_object(
        'type', m.message_type, 'labels', m.labels, 'body', m.body, 'content_type', m.content_type,
        'priority', jsonb_build_object('tier', (ARRAY['critical', 'high', 'normal', 'low', 'background'])[m.tier + 1],
                                       'score', m.score),
        'correlation_id', m.correlation_id, 'hitl_spec', m.hitl_spec);
    r := work_first_rule(s.id, p_trigger, q.id, work_rule_subject(v_msg, q.slug));
    IF r.id IS NULL OR r.target_queue IS NULL THEN
        RETURN;
    END IF;
    WHILE v_parent IS NOT NULL AND v_hops < 5 LOOP  -- the message's ancestors, up to 5
        v_hops := v_hops + 1;
        v_parent := (SELECT x.parent_id FROM work_messages x
                     WHERE v_parent ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                       AND x.id = v_parent::uuid);
    END LOOP;
    SELECT * INTO c FROM work_queues WHERE id = r.target_queue;
    IF v_hops >= 5 THEN
        v_why := format('loop breaker: %s hops; rule %s not applied', v_hops, r.name);
    ELSIF c.scope_id <> s.id THEN  -- across scopes only a publish routes (under a trust)
        v_why := format('rule %s not applied: a lifecycle rule routes within its scope', r.name);
    ELSIF s.state <> 'active' OR c.state = 'paused' THEN
        v_why := format('rule %s not applied: the %s is paused', r.name, CASE WHEN c.state = 'paused'
                                                                              THEN 'target queue' ELSE 'scope' END);
    ELSE
        v_msg := jsonb_set(v_msg, '{labels}', m.labels || jsonb_build_object('routing.trigger', p_trigger,
                                                                            'routing.rule', r.name))
                 || jsonb_build_object('parent_id', m.id, 'causation_id', m.id,
                                       'source_type', 'routing_rule', 'source_id', r.id::text);
        BEGIN
            PERFORM work_route(s.tenant_id, s, c, v_msg, r.id::text, v_hops + 1);  -- fans out too
        EXCEPTION WHEN SQLSTATE 'PB429' THEN  -- the target is full: the moment still happens
            v_why := format('rule %s not applied: %s', r.name, SQLERRM);
        END;
    END IF;
    IF v_why IS NOT NULL THEN
        INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id, actor_type,
                                  actor_id, attempts, payload)
        VALUES (s.id, s.tenant_id, 'scaiqueue.routing.stopped', m.id, m.queue_id, m.correlation_id, 'routing_rule',
                r.id::text, m.attempts, jsonb_build_object('trigger', p_trigger, 'rule', r.name, 'reason', v_why));
    END IF;
END $$;

-- ---- publish ------------------------------------------------------------------------------------

-- As in 0013, journalled: `scaiqueue.message.published` by the message's source (the caller's
-- actor, `source_type`/`source_id` in p_msg; a tenant key p_source when absent), emitted into
-- `_events` when the scope asks for published events.
CREATE OR REPLACE FUNCTION work_publish(p_tenant uuid, p_scope uuid, p_queue uuid, p_msg jsonb, p_source text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
    m work_messages;
    v_now timestamptz := clock_timestamp();
    v_key text := p_msg->>'idempotency_key';
    v_tier smallint := coalesce(array_position(ARRAY['critical', 'high', 'normal', 'low', 'background'],
                                               p_msg#>>'{priority,tier}') - 1, 2);
    v_score int := coalesce((p_msg#>>'{priority,score}')::int, 500);
    v_deadline timestamptz := (p_msg->>'deadline')::timestamptz;
    v_emit boolean;
    v_ttl int;
    v_rank bigint;
    v_depth bigint;
    v_oldest uuid;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    IF s.state <> 'active' THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_SCOPE_PAUSED',
            MESSAGE = format('Scope is %s; no publishes accepted.', s.state);
    END IF;
    IF q.state = 'paused' THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_QUEUE_PAUSED', MESSAGE = 'Queue is paused.';
    END IF;
    IF v_key IS NOT NULL THEN
        SELECT * INTO m FROM work_messages WHERE queue_id = q.id AND idempotency_key = v_key;
        IF FOUND THEN
            IF m.body IS DISTINCT FROM p_msg->'body' THEN
                RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_IDEMPOTENCY_CONFLICT',
                    MESSAGE = 'Idempotency key seen with a different body.';
            END IF;
            RETURN jsonb_build_object('message', work_message_doc(m.id), 'replayed', true);
        END IF;
    END IF;
    v_emit := s.emit_published AND NOT q.is_system;
    IF v_emit OR q.max_depth > 0 THEN  -- before any counter row (an overflow dead-letters and emits)
        PERFORM work_journal_lock(s.id);
    END IF;
    IF q.max_depth > 0 THEN
        -- One bounded publish at a time per queue, so concurrent ones cannot overshoot max_depth.
        PERFORM pg_advisory_xact_lock(x'5751'::int, (q.id % 2147483648)::int);  -- "WQ"
        SELECT coalesce(sum(pending + claimed), 0) INTO v_depth FROM work_queue_counters WHERE queue_id = q.id;
        IF v_depth >= q.max_depth THEN
            IF q.overflow_policy = 'drop_oldest' THEN
                SELECT id INTO v_oldest FROM work_messages
                WHERE queue_id = q.id AND ended_at IS NULL AND state = 'pending' ORDER BY seq LIMIT 1
                FOR UPDATE SKIP LOCKED;
            END IF;
            IF v_oldest IS NULL THEN
                RAISE EXCEPTION USING ERRCODE = 'PB429', DETAIL = 'SCAIQUEUE_QUEUE_FULL',
                    MESSAGE = 'Queue depth limit reached.';
            END IF;
            PERFORM work_dead_letter(ARRAY[v_oldest], 'overflow: dropped as the oldest pending message');
        END IF;
    END IF;
    v_ttl := coalesce((p_msg->>'ttl_seconds')::int, q.ttl_seconds);
    v_rank := CASE q.ordering
        WHEN 'priority' THEN v_tier * 1024 + (1000 - v_score)
        WHEN 'deadline' THEN coalesce(floor(extract(epoch FROM v_deadline))::bigint, 9000000000000000000)
        ELSE 0 END;
    INSERT INTO work_messages AS w (
        queue_id, scope_id, tenant_id, rank, visible_at, aged_at, message_type, tier, score, labels, content_type,
        body, correlation_id, causation_id, parent_id, source_type, source_id, ttl_seconds, deadline, expires_at,
        max_retries, visibility_timeout_s, idempotency_key, hitl_spec)
    VALUES (
        q.id, s.id, p_tenant, v_rank,
        greatest(v_now, coalesce((p_msg->>'visible_at')::timestamptz, v_now)),
        CASE WHEN q.ordering = 'priority' AND v_rank > 1024 THEN v_now END,
        coalesce(p_msg->>'type', 'task'), v_tier, v_score, coalesce(p_msg->'labels', '{}'),
        coalesce(p_msg->>'content_type', 'application/json'), p_msg->'body',
        p_msg->>'correlation_id', p_msg->>'causation_id', p_msg->>'parent_id',
        coalesce(p_msg->>'source_type', 'api_key'), coalesce(p_msg->>'source_id', p_source),
        v_ttl, v_deadline, least(v_now + v_ttl * interval '1 second', v_deadline),
        coalesce((p_msg->>'max_retries')::int, q.max_retries),
        coalesce((p_msg->>'visibility_timeout_s')::int, q.visibility_timeout_s),
        v_key, p_msg->'hitl_spec')
    ON CONFLICT (queue_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING w.* INTO m;
    IF m.id IS NULL THEN  -- a concurrent publish with the same key won: answer as a replay of it
        SELECT * INTO m FROM work_messages WHERE queue_id = q.id AND idempotency_key = v_key;
        IF m.body IS DISTINCT FROM p_msg->'body' THEN
            RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_IDEMPOTENCY_CONFLICT',
                MESSAGE = 'Idempotency key seen with a different body.';
        END IF;
        RETURN jsonb_build_object('message', work_message_doc(m.id), 'replayed', true);
    END IF;
    INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id, actor_type,
                              actor_id, attempts, emit)
    VALUES (s.id, s.tenant_id, 'scaiqueue.message.published', m.id, q.id, m.correlation_id, m.source_type,
            m.source_id, 0, v_emit);
    PERFORM work_count(q.id, 1, 0, 1, 0, 0);
    RETURN jsonb_build_object('message', work_message_doc(m.id), 'replayed', false);
END $$;

-- ---- claim --------------------------------------------------------------------------------------

-- As in 0017, with the claimer's actor: each claimed message journals `scaiqueue.message.claimed`
-- (one set-based insert; emitted when the scope asks for claimed events). A claim of the scope's
-- `_events` queue first materialises the events journalled since the last read.
DROP FUNCTION work_claim(uuid, uuid, uuid, int, int, text);
CREATE FUNCTION work_claim(p_tenant uuid, p_scope uuid, p_queue uuid, p_n int, p_vt int, p_claimer text,
                           p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS json LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
    v_head bigint;
    v_scanned timestamptz;
    v_full boolean := true;
    v_take tid[];
    v_dead uuid[];
    v_fresh int;
    v_last bigint;
    v_next bigint;
    v_all tid[] := '{}';
    v_pending int := 0;
    v_claimed uuid[];
    v_emit boolean;
BEGIN
    -- Lost in a crash, a claim only makes its messages claimable again (see docs: Durability).
    PERFORM set_config('synchronous_commit', 'off', true);
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    IF s.state IN ('paused', 'archived') OR q.state = 'paused' THEN
        RETURN '[]'::json;
    END IF;
    v_emit := s.emit_claimed AND NOT q.is_system;
    IF q.id = s.events_queue_id THEN
        PERFORM work_events_sync(s.id);
    ELSIF v_emit THEN  -- before any counter row (a dead letter takes it itself, before its counters)
        PERFORM work_journal_lock(s.id);
    END IF;
    IF q.ordering = 'fifo' THEN
        SELECT h.head, h.scanned_at INTO v_head, v_scanned FROM work_claim_heads h WHERE h.queue_id = q.id;
        v_full := v_head IS NULL OR (v_scanned < clock_timestamp() - interval '250 milliseconds'
                                     -- one walk from the front at a time per queue: the others use the head
                                     AND pg_try_advisory_xact_lock(x'5743'::int, (q.id % 2147483648)::int));
    END IF;
    LOOP
        SELECT coalesce(array_agg(c.ctid) FILTER (WHERE c.state = 'pending' OR c.attempts < c.max_retries), '{}'),
               coalesce(array_agg(c.id) FILTER (WHERE c.state = 'claimed' AND c.attempts >= c.max_retries), '{}'),
               count(*) FILTER (WHERE c.state = 'pending'), max(c.seq)
        INTO v_take, v_dead, v_fresh, v_last
        FROM (
            SELECT x.ctid, x.id, x.seq, x.state, x.attempts, x.max_retries FROM work_messages x
            WHERE x.queue_id = q.id AND x.ended_at IS NULL
              AND x.state IN ('pending', 'claimed')  -- not a broadcast message its subscriptions deliver
              AND (x.rank, x.seq) >= (CASE WHEN v_full THEN -9223372036854775808 ELSE 0 END,
                                      CASE WHEN v_full THEN 0 ELSE v_head END)
              AND x.visible_at <= clock_timestamp()
              AND (x.expires_at IS NULL OR x.expires_at > clock_timestamp())
              AND x.ctid <> ALL (v_all)  -- rows this claim holds already (SKIP LOCKED skips only others')
            ORDER BY x.rank, x.seq LIMIT (SELECT p_n - cardinality(v_all)) FOR UPDATE SKIP LOCKED
        ) c;
        v_all := v_all || v_take;
        v_pending := v_pending + v_fresh;
        v_next := greatest(v_next, v_last + 1);
        IF cardinality(v_dead) > 0 THEN
            PERFORM work_dead_letter(v_dead, 'visibility timeout expired after the last attempt');
        END IF;
        EXIT WHEN cardinality(v_all) >= p_n;
        IF cardinality(v_dead) = 0 THEN  -- the walk took all it could
            EXIT WHEN v_full;
            v_full := true;  -- from the head it came short: look behind the head too
        END IF;
    END LOOP;
    IF cardinality(v_all) > 0 THEN
        WITH claimed AS (
            UPDATE work_messages w SET state = 'claimed', attempts = w.attempts + 1, claimed_by = p_claimer,
                   claim_token = gen_random_uuid(), claimed_at = clock_timestamp(), updated_at = clock_timestamp(),
                   visible_at = clock_timestamp() + coalesce(p_vt, w.visibility_timeout_s) * interval '1 second',
                   failure_reason = CASE WHEN w.state = 'claimed' THEN 'visibility timeout' ELSE w.failure_reason END
            WHERE w.ctid = ANY (v_all) AND w.queue_id = q.id
            RETURNING w.id, w.rank, w.seq, w.correlation_id, w.attempts
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                      actor_type, actor_id, attempts, emit, payload)
            SELECT s.id, s.tenant_id, 'scaiqueue.message.claimed', c.id, q.id, c.correlation_id,
                   coalesce(p_actor_type, 'api_key'), coalesce(p_actor_id, p_claimer), c.attempts, v_emit,
                   CASE WHEN v_emit THEN jsonb_build_object('claimed_by', p_claimer) END
            FROM claimed c ORDER BY c.rank, c.seq
        )
        SELECT array_agg(c.id ORDER BY c.rank, c.seq) INTO v_claimed FROM claimed c;
        IF v_pending > 0 THEN
            PERFORM work_count(q.id, -v_pending, v_pending, 0, 0, 0);
        END IF;
    END IF;
    -- Last (so a claim never holds the head row while it waits for anything): move the head past
    -- what was taken, never waiting for its row (a claim holding it moves it as far). A walk from
    -- the front records its time, and, when it filled its batch, may pull the head back to it.
    IF q.ordering = 'fifo' AND (v_full OR v_next > v_head) THEN
        UPDATE work_claim_heads h SET
            scanned_at = CASE WHEN v_full THEN clock_timestamp() ELSE h.scanned_at END,
            head = CASE WHEN v_next IS NULL THEN h.head
                        WHEN v_full AND cardinality(v_all) >= p_n THEN v_next
                        ELSE greatest(h.head, v_next) END
        WHERE h.queue_id = (SELECT l.queue_id FROM work_claim_heads l WHERE l.queue_id = q.id
                            FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_all) = 0 THEN
        RETURN '[]'::json;
    END IF;
    RETURN (SELECT json_agg(d ORDER BY u.n)
            FROM unnest(v_claimed) WITH ORDINALITY u(id, n) JOIN work_message_docs d ON d.id = u.id);
END $$;

-- ---- complete, fail, release, extend, cancel ----------------------------------------------------

-- As in 0017, with the caller's actor: each action journals its moment (completed, failed,
-- released, extended, cancelled; a fail after the last attempt also dead_lettered). Completions
-- are emitted into `_events` (but not those of `_events`' own messages, whose consumers would
-- otherwise feed themselves).
DROP FUNCTION work_finish(uuid, uuid, text, jsonb);
CREATE FUNCTION work_finish(p_tenant uuid, p_scope uuid, p_action text, p_item jsonb,
                            p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    m work_messages;
    v_err text;
    v_msg text;
    v_old text;
    v_type text;
    v_payload jsonb;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    PERFORM work_journal_lock(s.id);  -- before any counter row: a complete or a last fail emits
    SELECT * INTO m FROM work_messages WHERE id = (p_item->>'id')::uuid AND scope_id = s.id FOR UPDATE;
    IF m.id IS NULL THEN
        v_err := 'SCAIQUEUE_MESSAGE_NOT_FOUND'; v_msg := 'Message not found.';
    ELSIF p_action = 'cancel' THEN
        IF m.state NOT IN ('pending', 'claimed') THEN
            v_err := 'SCAIQUEUE_INVALID_TRANSITION'; v_msg := format('A %s message cannot be cancelled.', m.state);
        END IF;
    ELSIF m.state <> 'claimed' THEN
        v_err := 'SCAIQUEUE_NOT_CLAIMED'; v_msg := format('Message is %s, not claimed.', m.state);
    ELSIF (p_item->>'claim_token') IS NOT NULL AND (p_item->>'claim_token') IS DISTINCT FROM m.claim_token::text THEN
        v_err := 'SCAIQUEUE_NOT_CLAIMED'; v_msg := 'The claim token is not the current claim''s.';
    END IF;
    IF v_err IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = CASE WHEN v_err LIKE '%NOT_FOUND' THEN 'PB404' ELSE 'PB409' END,
            DETAIL = v_err, MESSAGE = v_msg;
    END IF;
    v_old := m.state;
    IF p_action = 'complete' THEN
        UPDATE work_messages SET state = 'completed', response = p_item->'response', claim_token = NULL,
               ended_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE id = m.id RETURNING * INTO m;
        PERFORM work_count(m.queue_id, 0, -1, 0, 1, 0);
        v_type := 'completed';
    ELSIF p_action = 'fail' THEN
        v_type := 'failed';
        v_payload := jsonb_build_object('reason', p_item->>'reason', 'retry', m.attempts < m.max_retries);
        PERFORM work_journal_add(s, 'scaiqueue.message.failed', m, p_actor_type, p_actor_id, false, v_payload);
        IF m.attempts >= m.max_retries THEN
            PERFORM work_dead_letter(ARRAY[m.id], p_item->>'reason', p_actor_type, p_actor_id);
        ELSE
            UPDATE work_messages SET state = 'pending', failure_reason = p_item->>'reason', claim_token = NULL,
                   visible_at = clock_timestamp()
                                + least(300, power(2, greatest(m.attempts - 1, 0))) * interval '1 second',
                   updated_at = clock_timestamp()
            WHERE id = m.id;
            PERFORM work_count(m.queue_id, 1, -1, 0, 0, 0);
            PERFORM work_claim_head_back(m.queue_id, m.seq);
        END IF;
        PERFORM work_route_lifecycle(s, 'message_failed', m, 0);
    ELSIF p_action = 'release' THEN
        UPDATE work_messages SET state = 'pending', attempts = greatest(attempts - 1, 0), claim_token = NULL,
               visible_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE id = m.id RETURNING * INTO m;
        PERFORM work_count(m.queue_id, 1, -1, 0, 0, 0);
        PERFORM work_claim_head_back(m.queue_id, m.seq);
        v_type := 'released';
    ELSIF p_action = 'extend' THEN
        UPDATE work_messages
        SET visible_at = greatest(visible_at, clock_timestamp()) + (p_item->>'seconds')::int * interval '1 second',
            updated_at = clock_timestamp()
        WHERE id = m.id;
        v_type := 'extended';
        v_payload := jsonb_build_object('seconds', (p_item->>'seconds')::int);
    ELSIF p_action = 'cancel' THEN
        UPDATE work_messages SET state = 'cancelled', claim_token = NULL, ended_at = clock_timestamp(),
               updated_at = clock_timestamp()
        WHERE id = m.id;
        PERFORM work_count(m.queue_id, CASE WHEN v_old = 'pending' THEN -1 ELSE 0 END,
                           CASE WHEN v_old = 'claimed' THEN -1 ELSE 0 END, 0, 0, 0);
        v_type := 'cancelled';
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown action.';
    END IF;
    IF v_type <> 'failed' THEN
        PERFORM work_journal_add(s, 'scaiqueue.message.' || v_type, m, p_actor_type, p_actor_id,
                                 v_type = 'completed' AND m.queue_id <> s.events_queue_id, v_payload);
    END IF;
    IF v_type = 'completed' THEN
        PERFORM work_route_lifecycle(s, 'message_completed', m, 0);
    END IF;
    RETURN work_message_doc(m.id);
END $$;

-- As in 0020 (the scope loaded, and so the caller's ACL checked, before any HITL spec is read),
-- with the actor.
DROP FUNCTION work_complete_checked(uuid, uuid, jsonb);
CREATE FUNCTION work_complete_checked(p_tenant uuid, p_scope uuid, p_item jsonb,
                                      p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_spec jsonb;
    v_errors jsonb;
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);  -- the caller's ACL first: a denied actor learns nothing of the spec
    SELECT m.hitl_spec INTO v_spec FROM work_messages m
    WHERE m.id = (p_item->>'id')::uuid AND m.scope_id = p_scope AND m.tenant_id = p_tenant AND m.state = 'claimed';
    IF v_spec IS NOT NULL AND (v_spec ? 'decision' OR v_spec ? 'input') THEN
        v_errors := work_hitl_errors(v_spec, coalesce(p_item->'response', '{}'));
        IF jsonb_array_length(v_errors) > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR', HINT = v_errors::text,
                MESSAGE = 'The response does not fit the message''s HITL spec.';
        END IF;
    END IF;
    RETURN work_finish(p_tenant, p_scope, 'complete', p_item, p_actor_type, p_actor_id);
END $$;

-- Each batch item's id as a uuid, in order (NULL where it is not one: that item answers not found),
-- read in SQL so the caller need not parse and send them (p_ids NULL).
CREATE FUNCTION work_item_ids(p_items jsonb) RETURNS uuid[] LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(CASE WHEN x.e->>'id' ~* '^\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?$'
                                   THEN (x.e->>'id')::uuid END ORDER BY x.ord), '{}')
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, ord)
$$;

-- The batch extension's complete, fail and release, as in 0017, journalled set-based with the
-- caller's actor: one insert of narrow journal rows where 0013 inserted a full event message per
-- completion into `_events`.
DROP FUNCTION work_finish_batch(uuid, uuid, text, jsonb, uuid[]);
CREATE FUNCTION work_finish_batch(p_tenant uuid, p_scope uuid, p_action text, p_items jsonb, p_ids uuid[],
                                  p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    v_toks text[];      -- each item's claim_token, response and reason, in order (p_ids: its id)
    v_resps jsonb[];
    v_reasons text[];
    v_ok uuid[] := '{}';
    v_okq bigint[] := '{}';
    v_oks bigint[] := '{}';  -- release, fail: their seqs (the claim heads come back to them)
    v_dead uuid[] := '{}';
    v_state text;
    v_out jsonb;
    v_trigger text;
    lm work_messages;
    r record;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    p_ids := coalesce(p_ids, work_item_ids(p_items));
    IF p_action NOT IN ('complete', 'fail', 'release') THEN
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown batch action.';
    END IF;
    IF p_action <> 'release' THEN  -- before any counter row: completions and last fails emit
        PERFORM work_journal_lock(s.id);
    END IF;
    SELECT array_agg(x.e->>'claim_token' ORDER BY x.ord), array_agg(x.e->'response' ORDER BY x.ord),
           array_agg(x.e->>'reason' ORDER BY x.ord)
    INTO v_toks, v_resps, v_reasons
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, ord);

    IF p_action = 'complete' THEN
        v_state := 'completed';
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.resp
            FROM unnest(p_ids, v_toks, v_resps) WITH ORDINALITY u(id, tok, resp, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), done AS (
            UPDATE work_messages w SET state = 'completed', response = g.resp, claim_token = NULL,
                   ended_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
            RETURNING w.id, w.queue_id, w.correlation_id, w.attempts
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                      actor_type, actor_id, attempts, emit)
            SELECT s.id, s.tenant_id, 'scaiqueue.message.completed', d.id, d.queue_id, d.correlation_id,
                   p_actor_type, p_actor_id, d.attempts, d.queue_id <> s.events_queue_id
            FROM done d
        )
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}') INTO v_ok, v_okq FROM done d;
    ELSIF p_action = 'release' THEN
        v_state := 'pending';
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok FROM unnest(p_ids, v_toks) WITH ORDINALITY u(id, tok, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), moved AS (
            UPDATE work_messages w SET state = 'pending', attempts = greatest(w.attempts - 1, 0), claim_token = NULL,
                   visible_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
            RETURNING w.id, w.queue_id, w.seq, w.correlation_id, w.attempts
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                      actor_type, actor_id, attempts)
            SELECT s.id, s.tenant_id, 'scaiqueue.message.released', d.id, d.queue_id, d.correlation_id,
                   p_actor_type, p_actor_id, d.attempts
            FROM moved d
        )
        SELECT coalesce(array_agg(m.id), '{}'), coalesce(array_agg(m.queue_id), '{}'),
               coalesce(array_agg(m.seq), '{}') INTO v_ok, v_okq, v_oks FROM moved m;
    ELSE  -- fail: back to pending after the backoff, or to the dead letter after the last attempt
        v_state := 'pending';
        SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') INTO v_dead FROM (
            SELECT w.id FROM work_messages w
            JOIN (SELECT DISTINCT ON (u.id) u.id, u.tok FROM unnest(p_ids, v_toks) WITH ORDINALITY u(id, tok, n)
                  WHERE u.id IS NOT NULL ORDER BY u.id, u.n) g ON g.id = w.id
            WHERE w.scope_id = s.id AND w.state = 'claimed' AND (g.tok IS NULL OR g.tok = w.claim_token::text)
              AND w.attempts >= w.max_retries
            ORDER BY w.id FOR UPDATE OF w
        ) w;
        FOR r IN  -- dead letters first: counter rows in the usual order
            SELECT DISTINCT ON (u.id) u.id, u.reason
            FROM unnest(p_ids, v_reasons) WITH ORDINALITY u(id, reason, n) WHERE u.id = ANY (v_dead)
            ORDER BY u.id, u.n
        LOOP
            SELECT * INTO lm FROM work_messages WHERE id = r.id;
            PERFORM work_journal_add(s, 'scaiqueue.message.failed', lm, p_actor_type, p_actor_id, false,
                                     jsonb_build_object('reason', r.reason, 'retry', false));
            PERFORM work_dead_letter(ARRAY[r.id], r.reason, p_actor_type, p_actor_id);
        END LOOP;
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.reason
            FROM unnest(p_ids, v_toks, v_reasons) WITH ORDINALITY u(id, tok, reason, n)
            WHERE u.id IS NOT NULL AND u.id <> ALL (v_dead) ORDER BY u.id, u.n
        ), moved AS (
            UPDATE work_messages w SET state = 'pending', failure_reason = g.reason, claim_token = NULL,
                   visible_at = clock_timestamp()
                                + least(300, power(2, greatest(w.attempts - 1, 0))) * interval '1 second',
                   updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text) AND w.attempts < w.max_retries
            RETURNING w.id, w.queue_id, w.seq, w.correlation_id, w.attempts, g.reason
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                      actor_type, actor_id, attempts, payload)
            SELECT s.id, s.tenant_id, 'scaiqueue.message.failed', d.id, d.queue_id, d.correlation_id,
                   p_actor_type, p_actor_id, d.attempts, jsonb_build_object('reason', d.reason, 'retry', true)
            FROM moved d
        )
        SELECT coalesce(array_agg(m.id), '{}'), coalesce(array_agg(m.queue_id), '{}'),
               coalesce(array_agg(m.seq), '{}') INTO v_ok, v_okq, v_oks FROM moved m;
    END IF;

    -- The counters, once per queue (dead letters counted themselves), taken in queue order.
    FOR r IN SELECT u.q, count(*) AS n, min(u.seq) AS first FROM unnest(v_okq, v_oks) u(q, seq)
             GROUP BY u.q ORDER BY u.q LOOP
        IF p_action = 'complete' THEN
            PERFORM work_count(r.q, 0, -r.n, 0, r.n, 0);
        ELSE
            PERFORM work_count(r.q, r.n, -r.n, 0, 0, 0);
            PERFORM work_claim_head_back(r.q, r.first);
        END IF;
    END LOOP;

    -- Lifecycle routing rules, only when the scope has some for this moment.
    v_trigger := CASE p_action WHEN 'complete' THEN 'message_completed' WHEN 'fail' THEN 'message_failed' END;
    IF v_trigger IS NOT NULL AND EXISTS (SELECT 1 FROM work_routing_rules WHERE scope_id = s.id
                                         AND trigger = v_trigger AND enabled) THEN
        FOR lm IN SELECT * FROM work_messages WHERE id = ANY (v_ok || v_dead) ORDER BY seq LOOP
            PERFORM work_route_lifecycle(s, v_trigger, lm, 0);
        END LOOP;
    END IF;

    -- The answers, in order. When every item acted (so no id was named twice), each is
    -- {id, ok: true, state}, built as text: a fifth of the cost of the general answer below.
    IF cardinality(v_ok) = cardinality(p_ids) AND cardinality(v_dead) = 0 AND cardinality(p_ids) > 0 THEN
        RETURN (SELECT ('[' || string_agg('{"id": "' || u.id || '", "ok": true, "state": "' || v_state || '"}', ', '
                                          ORDER BY u.n) || ']')::jsonb
                FROM unnest(p_ids) WITH ORDINALITY u(id, n));
    END IF;
    -- Each id acts once (its first mention); why the others did not (the message is looked up
    -- only for those).
    SELECT jsonb_agg(CASE
               WHEN ok.id IS NOT NULL THEN jsonb_build_object('id', a.id, 'ok', true, 'state', v_state)
               WHEN dl.id IS NOT NULL THEN jsonb_build_object('id', a.id, 'ok', true, 'state', 'dead_lettered')
               ELSE jsonb_build_object('id', p_items->(a.n::int - 1)->'id', 'ok', false, 'error', (
                   SELECT CASE
                       WHEN m.state IS NULL THEN jsonb_build_object('code', 'SCAIQUEUE_MESSAGE_NOT_FOUND',
                                                                    'message', 'Message not found.')
                       ELSE jsonb_build_object('code', 'SCAIQUEUE_NOT_CLAIMED', 'message',
                            format('Message is %s, or the claim token is not the current claim''s.', m.state)) END
                   FROM (SELECT (SELECT x.state FROM work_messages x WHERE x.id = a.id AND x.scope_id = s.id)
                         AS state) m))
           END ORDER BY a.n)
    INTO v_out
    FROM (SELECT u.n, u.id, row_number() OVER (PARTITION BY u.id ORDER BY u.n) = 1 AS first
          FROM unnest(p_ids) WITH ORDINALITY u(id, n)) a
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_ok) k(id)) ok ON a.first AND ok.id = a.id
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_dead) k(id)) dl ON a.first AND dl.id = a.id;
    RETURN coalesce(v_out, '[]');
END $$;

-- As in 0020 (the scope and the caller's ACL first), with the actor.
DROP FUNCTION work_complete_batch_checked(uuid, uuid, jsonb, uuid[]);
CREATE FUNCTION work_complete_batch_checked(p_tenant uuid, p_scope uuid, p_items jsonb, p_ids uuid[],
                                            p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_bad jsonb;   -- {position: [{field, message}]}
    v_keep jsonb;
    v_keep_ids uuid[];
    v_done jsonb := '[]';
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);  -- the caller's ACL first, even when no item reaches the finish
    p_ids := coalesce(p_ids, work_item_ids(p_items));
    SELECT jsonb_object_agg(b.n::text, b.errs) INTO v_bad FROM (
        SELECT i.n, work_hitl_errors(m.hitl_spec, coalesce(i.e->'response', '{}')) AS errs
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n)
        JOIN work_messages m ON m.id = p_ids[i.n] AND m.scope_id = p_scope AND m.tenant_id = p_tenant
                            AND m.state = 'claimed'
        WHERE m.hitl_spec IS NOT NULL AND (m.hitl_spec ? 'decision' OR m.hitl_spec ? 'input')
    ) b WHERE jsonb_array_length(b.errs) > 0;
    IF v_bad IS NULL THEN
        RETURN work_finish_batch(p_tenant, p_scope, 'complete', p_items, p_ids, p_actor_type, p_actor_id);
    END IF;
    SELECT coalesce(jsonb_agg(i.e ORDER BY i.n), '[]'), array_agg(p_ids[i.n] ORDER BY i.n) INTO v_keep, v_keep_ids
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n) WHERE NOT v_bad ? i.n::text;
    IF jsonb_array_length(v_keep) > 0 THEN
        v_done := work_finish_batch(p_tenant, p_scope, 'complete', v_keep, v_keep_ids, p_actor_type, p_actor_id);
    END IF;
    RETURN (SELECT jsonb_agg(CASE WHEN v_bad ? t.n::text
                THEN jsonb_build_object('id', t.e->'id', 'ok', false, 'error', jsonb_build_object(
                     'code', 'VALIDATION_ERROR', 'message', 'The response does not fit the message''s HITL spec.',
                     'details', v_bad->(t.n::text)))
                ELSE v_done->(t.k::int - 1) END ORDER BY t.n)
            FROM (SELECT i.n, i.e, count(*) FILTER (WHERE NOT v_bad ? i.n::text) OVER (ORDER BY i.n) AS k
                  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n)) t);
END $$;

-- ---- agents -------------------------------------------------------------------------------------

-- As in 0017; a claim that ran out and goes back to pending journals `scaiqueue.message.released`
-- by the system (payload reason `visibility timeout`).
CREATE OR REPLACE FUNCTION work_recover(p_queue bigint, p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_back uuid[];
    v_dead uuid[];
    r record;
BEGIN
    SELECT coalesce(array_agg(c.id) FILTER (WHERE c.attempts < c.max_retries), '{}'),
           coalesce(array_agg(c.id) FILTER (WHERE c.attempts >= c.max_retries), '{}')
    INTO v_back, v_dead
    FROM (SELECT x.id, x.attempts, x.max_retries
          FROM (SELECT p_queue AS queue_id WHERE p_queue IS NOT NULL
                UNION ALL
                SELECT k.queue_id FROM work_queue_counters k WHERE p_queue IS NULL
                GROUP BY k.queue_id HAVING sum(k.claimed) > 0) k
          CROSS JOIN LATERAL (
              SELECT y.id, y.attempts, y.max_retries FROM work_messages y
              WHERE y.queue_id = k.queue_id AND y.ended_at IS NULL AND y.state = 'claimed'
                AND y.visible_at <= clock_timestamp()
              ORDER BY y.rank, y.seq LIMIT p_limit FOR UPDATE SKIP LOCKED) x
          LIMIT p_limit) c;
    IF cardinality(v_dead) > 0 THEN
        -- The scopes' journal locks before any counter row (dead letters emit), in one order.
        PERFORM work_journal_lock(x.scope_id)
        FROM (SELECT DISTINCT w.scope_id FROM work_messages w WHERE w.id = ANY (v_dead) ORDER BY 1) x;
        PERFORM work_dead_letter(v_dead, 'visibility timeout expired after the last attempt');
    END IF;
    IF cardinality(v_back) > 0 THEN
        FOR r IN
            WITH moved AS (
                UPDATE work_messages SET state = 'pending', visible_at = clock_timestamp(), claim_token = NULL,
                       failure_reason = 'visibility timeout', updated_at = clock_timestamp()
                WHERE id = ANY (v_back)
                RETURNING id, queue_id, seq, scope_id, tenant_id, correlation_id, attempts
            ), journal AS (
                INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                          actor_type, actor_id, attempts, payload)
                SELECT d.scope_id, d.tenant_id, 'scaiqueue.message.released', d.id, d.queue_id, d.correlation_id,
                       'system', 'work-visibility-timeout', d.attempts, '{"reason": "visibility timeout"}'
                FROM moved d
            )
            SELECT queue_id, count(*) AS n, min(seq) AS first FROM moved GROUP BY queue_id ORDER BY queue_id
        LOOP
            PERFORM work_count(r.queue_id, r.n, -r.n, 0, 0, 0);
            PERFORM work_claim_head_back(r.queue_id, r.first);
        END LOOP;
    END IF;
    RETURN cardinality(v_back) + cardinality(v_dead);
END $$;

-- As in 0017; each message that expires journals `scaiqueue.message.expired` by the system.
CREATE OR REPLACE FUNCTION work_expire(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r record; n int := 0;
BEGIN
    FOR r IN
        WITH doomed AS (
            SELECT x.id, x.queue_id, x.state FROM work_messages x
            WHERE x.ended_at IS NULL AND x.expires_at IS NOT NULL AND x.expires_at <= clock_timestamp()
              AND x.state IN ('pending', 'claimed')  -- a broadcast message ends with its deliveries
            ORDER BY x.expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), ended AS (
            UPDATE work_messages m SET state = 'expired', claim_token = NULL, ended_at = clock_timestamp(),
                   updated_at = clock_timestamp()
            FROM doomed d WHERE m.id = d.id
            RETURNING m.id, m.scope_id, m.tenant_id, m.correlation_id, m.attempts, d.queue_id, d.state
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                      actor_type, actor_id, attempts)
            SELECT e.scope_id, e.tenant_id, 'scaiqueue.message.expired', e.id, e.queue_id, e.correlation_id,
                   'system', 'work-expiry', e.attempts
            FROM ended e
        )
        SELECT queue_id, count(*) FILTER (WHERE state = 'pending') AS p, count(*) FILTER (WHERE state = 'claimed') AS c
        FROM ended GROUP BY queue_id ORDER BY queue_id
    LOOP
        PERFORM work_count(r.queue_id, -r.p, -r.c, 0, 0, 0);
        n := n + r.p + r.c;
    END LOOP;
    RETURN n;
END $$;

-- The archiver, as in 0013, and the journal's retention: journal rows older than 90 days (the
-- audit log's retention), each scope's `_events` materialised first so no event is lost.
CREATE OR REPLACE FUNCTION work_archive(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int; k int; v_scope uuid;
BEGIN
    WITH doomed AS (
        SELECT m.id FROM work_messages m JOIN work_scopes s ON s.id = m.scope_id
        WHERE m.ended_at IS NOT NULL AND m.ended_at < clock_timestamp() - make_interval(days => s.retention_days)
        ORDER BY m.ended_at LIMIT p_limit FOR UPDATE OF m SKIP LOCKED
    )
    DELETE FROM work_messages w USING doomed d WHERE w.id = d.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Scopes whose oldest journal row is past the retention (one index probe per scope).
    FOR v_scope IN
        SELECT s.id FROM work_scopes s
        WHERE (SELECT j.at FROM work_journal j WHERE j.scope_id = s.id ORDER BY j.seq LIMIT 1)
              < clock_timestamp() - interval '90 days'
        ORDER BY s.id LIMIT 100
    LOOP
        PERFORM work_events_sync(v_scope);
        DELETE FROM work_journal j
        USING (SELECT x.ctid FROM work_journal x WHERE x.scope_id = v_scope ORDER BY x.seq LIMIT p_limit) d
        WHERE j.ctid = d.ctid AND j.at < clock_timestamp() - interval '90 days';
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    RETURN n;
END $$;

-- ---- subscriptions' deliveries ------------------------------------------------------------------

-- As in 0019, with the actor: each delivery claimed journals `scaiqueue.message.claimed` with its
-- subscription in the payload.
DROP FUNCTION work_delivery_claim(uuid, uuid, uuid, int, int);
CREATE FUNCTION work_delivery_claim(p_tenant uuid, p_scope uuid, p_sub uuid, p_n int, p_vt int,
                                    p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    x work_subscriptions;
    v_n int;
    v_ids uuid[];
    v_out jsonb;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    x := work_subscription_of(p_tenant, p_scope, p_sub, true);
    IF x.state <> 'active' OR s.state IN ('paused', 'archived') THEN
        RETURN '[]';
    END IF;
    PERFORM work_delivery_recover(x.id);
    SELECT least(p_n, x.max_in_flight - count(*)) INTO v_n
    FROM work_deliveries WHERE subscription_id = x.id AND state = 'claimed';
    IF v_n <= 0 THEN
        RETURN '[]';
    END IF;
    WITH picked AS (
        SELECT d.message_id FROM work_deliveries d JOIN work_messages m ON m.id = d.message_id
        WHERE d.subscription_id = x.id AND d.state = 'pending' AND d.visible_at <= clock_timestamp()
          AND (m.expires_at IS NULL OR m.expires_at > clock_timestamp())
        ORDER BY d.seq LIMIT v_n FOR UPDATE OF d SKIP LOCKED
    ), claimed AS (
        UPDATE work_deliveries d SET state = 'claimed', attempts = d.attempts + 1, claim_token = gen_random_uuid(),
               claimed_at = clock_timestamp(), updated_at = clock_timestamp(),
               visible_at = clock_timestamp() + coalesce(p_vt, m.visibility_timeout_s) * interval '1 second'
        FROM picked p, work_messages m
        WHERE d.subscription_id = x.id AND d.message_id = p.message_id AND m.id = p.message_id
        RETURNING d.message_id, d.attempts, m.queue_id, m.correlation_id, d.seq
    ), journal AS (
        INSERT INTO work_journal (scope_id, tenant_id, event_type, message_id, queue_id, correlation_id,
                                  actor_type, actor_id, attempts, payload)
        SELECT s.id, s.tenant_id, 'scaiqueue.message.claimed', c.message_id, c.queue_id, c.correlation_id,
               p_actor_type, p_actor_id, c.attempts, jsonb_build_object('subscription_id', x.id)
        FROM claimed c ORDER BY c.seq
    )
    SELECT array_agg(c.message_id) INTO v_ids FROM claimed c;
    SELECT jsonb_agg(v.doc ORDER BY v.seq) INTO v_out  -- a new statement: it sees the claims
    FROM work_delivery_docs v WHERE v.subscription_id = x.id AND v.message_id = ANY (v_ids);
    RETURN coalesce(v_out, '[]');
END $$;

-- As in 0019, journalled with the actor: completed (emitted, with the response and the
-- subscription), failed, released, and dead_lettered (emitted) after the last attempt.
DROP FUNCTION work_delivery_finish(uuid, uuid, uuid, text, jsonb);
CREATE FUNCTION work_delivery_finish(p_tenant uuid, p_scope uuid, p_sub uuid, p_action text, p_item jsonb,
                                     p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    x work_subscriptions;
    d work_deliveries;
    m work_messages;
    v_errors jsonb;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    x := work_subscription_of(p_tenant, p_scope, p_sub, false);
    PERFORM work_journal_lock(s.id);
    SELECT * INTO d FROM work_deliveries
    WHERE subscription_id = x.id AND message_id = (p_item->>'id')::uuid FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_MESSAGE_NOT_FOUND',
            MESSAGE = 'No such message delivered to this subscription.';
    END IF;
    IF d.state <> 'claimed' OR ((p_item->>'claim_token') IS NOT NULL
                                AND (p_item->>'claim_token') IS DISTINCT FROM d.claim_token::text) THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_NOT_CLAIMED',
            MESSAGE = format('The delivery is %s, or the claim token is not the current claim''s.', d.state);
    END IF;
    SELECT * INTO m FROM work_messages WHERE id = d.message_id;
    m.attempts := d.attempts;
    IF p_action = 'complete' THEN
        IF m.hitl_spec IS NOT NULL AND (m.hitl_spec ? 'decision' OR m.hitl_spec ? 'input') THEN
            v_errors := work_hitl_errors(m.hitl_spec, coalesce(p_item->'response', '{}'));
            IF jsonb_array_length(v_errors) > 0 THEN
                RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR', HINT = v_errors::text,
                    MESSAGE = 'The response does not fit the message''s HITL spec.';
            END IF;
        END IF;
        UPDATE work_deliveries SET state = 'completed', response = p_item->'response', claim_token = NULL,
               ended_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
        PERFORM work_journal_add(s, 'scaiqueue.message.completed', m, p_actor_type, p_actor_id, true,
                                 jsonb_build_object('response', p_item->'response', 'subscription_id', x.id));
    ELSIF p_action = 'fail' AND d.attempts >= m.max_retries THEN
        UPDATE work_deliveries SET state = 'dead_lettered', failure_reason = p_item->>'reason', claim_token = NULL,
               ended_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
        PERFORM work_journal_add(s, 'scaiqueue.message.failed', m, p_actor_type, p_actor_id, false,
                                 jsonb_build_object('reason', p_item->>'reason', 'retry', false,
                                                    'subscription_id', x.id));
        PERFORM work_journal_add(s, 'scaiqueue.message.dead_lettered', m, p_actor_type, p_actor_id, true,
                                 jsonb_build_object('reason', p_item->>'reason', 'subscription_id', x.id));
    ELSIF p_action = 'fail' THEN
        UPDATE work_deliveries SET state = 'pending', failure_reason = p_item->>'reason', claim_token = NULL,
               visible_at = clock_timestamp() + least(300, power(2, greatest(d.attempts - 1, 0))) * interval '1 second',
               updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
        PERFORM work_journal_add(s, 'scaiqueue.message.failed', m, p_actor_type, p_actor_id, false,
                                 jsonb_build_object('reason', p_item->>'reason', 'retry', true,
                                                    'subscription_id', x.id));
    ELSIF p_action = 'release' THEN
        UPDATE work_deliveries SET state = 'pending', attempts = greatest(attempts - 1, 0), claim_token = NULL,
               visible_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
        PERFORM work_journal_add(s, 'scaiqueue.message.released', m, p_actor_type, p_actor_id, false,
                                 jsonb_build_object('subscription_id', x.id));
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown action.';
    END IF;
    PERFORM work_settle(ARRAY[d.message_id]);
    RETURN (SELECT v.doc FROM work_delivery_docs v WHERE v.subscription_id = x.id AND v.message_id = d.message_id);
END $$;

-- The queue a read names (as work_queue_of, its scope checked as work_scope_of), the scope's
-- `_events` materialised first when that is the queue read.
CREATE FUNCTION work_queue_synced(p_tenant uuid, p_scope uuid, p_queue uuid) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s work_scopes; q work_queues;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(s.id, p_queue);
    IF q.id = s.events_queue_id THEN
        PERFORM work_events_sync(s.id);
    END IF;
    RETURN q.id;
END $$;
