-- The work surface's messages: their ids, documents, scope and queue lookups (with the ACL
-- check), publish, dead letter, and the finish of one message or a batch.
--
-- Actors: the hot-path functions take the caller's actor (type, id) as two trailing parameters,
-- defaulting to NULL (a row written without one has no actor). A publish's actor is the
-- message's source (`source_type`, `source_id` in the message fields, set by the domain).
-- Every moment of a message's life is journalled (work_journal.sql).

-- Message ids ordered by time (UUID version 7: 48 bits of Unix milliseconds, then random bits), so
-- messages published together sit together in the primary key. A claim looks its messages up by
-- id, and a completion, which ends the rows, writes a new primary-key entry for each: with random
-- ids each of the 100 lands on its own leaf page, with these on a few. Measured on claim(100) and
-- complete-batch(100): a fifth less database CPU each.
CREATE OR REPLACE FUNCTION work_uuid7() RETURNS uuid LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp())
                                                                           * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- The messages' ids (the column's default calls the function, so it is set here, after it).
ALTER TABLE work_messages ALTER COLUMN id SET DEFAULT work_uuid7();

-- ---- helpers ------------------------------------------------------------------------------------
-- Add deltas to a work queue's counters, on the slot counter_slot picks.
CREATE OR REPLACE FUNCTION work_count(p_queue bigint, p_pending bigint, p_claimed bigint,
                           p_published bigint, p_completed bigint, p_dead bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO work_queue_counters AS c (queue_id, slot, pending, claimed, published, completed, dead_lettered)
    VALUES (p_queue, counter_slot(x'4357'::int, p_queue),  -- "CW"
            p_pending, p_claimed, p_published, p_completed, p_dead)
    ON CONFLICT (queue_id, slot) DO UPDATE SET
        pending = c.pending + excluded.pending,
        claimed = c.claimed + excluded.claimed,
        published = c.published + excluded.published,
        completed = c.completed + excluded.completed,
        dead_lettered = c.dead_lettered + excluded.dead_lettered;
$$;

-- The document of a message, as every route answers it: one definition, a view, turned into JSON
-- by row_to_json (a claim of 100 spends far less building it than with jsonb_build_object per row).
CREATE OR REPLACE VIEW work_message_docs AS
SELECT m.id, q.queue_id, q.slug AS queue_slug, m.scope_id, m.state, m.message_type AS type,
       json_build_object('tier', (ARRAY['critical', 'high', 'normal', 'low', 'background'])[m.tier + 1],
                         'score', m.score) AS priority,
       m.labels, m.content_type, m.body, m.correlation_id, m.causation_id, m.parent_id, m.source_type, m.source_id,
       m.ttl_seconds, m.deadline, m.expires_at, m.max_retries, m.visibility_timeout_s, m.idempotency_key,
       m.hitl_spec, m.attempts, m.claimed_by, m.claim_token, m.claimed_at,
       CASE WHEN m.state = 'claimed' THEN m.visible_at END AS claim_expires_at,
       CASE WHEN m.state = 'pending' THEN m.visible_at END AS visible_at,
       m.failure_reason, m.response, m.created_at, m.updated_at, m.ended_at, m.tenant_id
FROM work_messages m JOIN work_queues q ON q.id = m.queue_id;

-- Under a batch publish (the transaction-local setting `postbox.publish_answers` = 'lean', set by
-- work_publish_batch) the publish functions' answers are lean: {id, queue_id, state}.
CREATE OR REPLACE FUNCTION work_message_doc(p_id uuid) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('postbox.publish_answers', true) = 'lean'
                THEN (SELECT jsonb_build_object('id', m.id, 'queue_id', q.queue_id, 'state', m.state)
                      FROM work_messages m JOIN work_queues q ON q.id = m.queue_id WHERE m.id = p_id)
                ELSE (SELECT to_jsonb(d) FROM work_message_docs d WHERE d.id = p_id) END
$$;

-- The scope a request names, within the caller's tenant (another tenant's is missing), checking the
-- caller when the scope has ACL rows. The hot paths (publish, claim, finish, deliveries) pass the caller
-- as the transaction-local setting `postbox.acl` (work_acl_check's p), set in the FROM of the same
-- statement; a scope without ACL rows costs two integer tests. Only the scope the caller named is
-- checked (a routed publish into another scope is governed by trusts, not by the publisher's ACL).
-- Every hot-path function must keep loading its scope through this function.
CREATE OR REPLACE FUNCTION work_scope_of(p_tenant uuid, p_scope uuid) RETURNS work_scopes LANGUAGE plpgsql STABLE AS $$
DECLARE
    s work_scopes;
    v_caller jsonb;
BEGIN
    SELECT * INTO s FROM work_scopes WHERE id = p_scope AND tenant_id = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_SCOPE_NOT_FOUND', MESSAGE = 'Scope not found.';
    END IF;
    IF s.acl_grants > 0 OR s.acl_queue_entries > 0 THEN
        v_caller := nullif(current_setting('postbox.acl', true), '')::jsonb;
        IF v_caller IS NOT NULL AND (v_caller->>'scope')::uuid = p_scope THEN
            PERFORM work_acl_check(v_caller);
        END IF;
    END IF;
    RETURN s;
END $$;

CREATE OR REPLACE FUNCTION work_queue_of(p_scope uuid, p_queue uuid) RETURNS work_queues LANGUAGE plpgsql STABLE AS $$
DECLARE q work_queues;
BEGIN
    SELECT * INTO q FROM work_queues WHERE queue_id = p_queue AND scope_id = p_scope;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_QUEUE_NOT_FOUND', MESSAGE = 'Queue not found.';
    END IF;
    RETURN q;
END $$;

-- Dead-letter these messages (pending or claimed, already locked by the caller): each ends as
-- `dead_lettered` with the reason, a copy lands pending in its scope's `_dead_letter` queue (its
-- causation_id the original's id), and `scaiqueue.message.dead_lettered` goes to `_events`.
-- With the actor who caused it (the consumer whose fail was the last attempt; the
-- system for timeouts and overflow), journalled as `scaiqueue.message.dead_lettered` (emitted).
CREATE OR REPLACE FUNCTION work_dead_letter(p_ids uuid[], p_reason text, p_actor_type text DEFAULT 'system',
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

-- ---- publish ------------------------------------------------------------------------------------

-- The columns a publish writes for p_msg into queue q of scope s at p_now: each default the
-- queue's, and the claim order computed from its ordering mode (fifo: 0; priority: tier, then
-- score; deadline: its epoch second, none last). One definition for work_publish and a batch's
-- publish of many at once (work_publish_batches.sql).
CREATE OR REPLACE FUNCTION work_new_message(p_tenant uuid, s work_scopes, q work_queues, p_msg jsonb, p_source text,
                                            p_now timestamptz)
RETURNS TABLE (queue_id bigint, scope_id uuid, tenant_id uuid, rank bigint, visible_at timestamptz,
               aged_at timestamptz, message_type text, tier smallint, score int, labels jsonb, content_type text,
               body jsonb, correlation_id text, causation_id text, parent_id text, source_type text,
               source_id text, ttl_seconds int, deadline timestamptz, expires_at timestamptz, max_retries int,
               visibility_timeout_s int, idempotency_key text, hitl_spec jsonb)
LANGUAGE sql STABLE AS $$
    SELECT q.id, s.id, p_tenant, r.rank, greatest(p_now, coalesce((p_msg->>'visible_at')::timestamptz, p_now)),
           CASE WHEN q.ordering = 'priority' AND r.rank > 1024 THEN p_now END,
           coalesce(p_msg->>'type', 'task'), v.tier, v.score, coalesce(p_msg->'labels', '{}'),
           coalesce(p_msg->>'content_type', 'application/json'), p_msg->'body',
           p_msg->>'correlation_id', p_msg->>'causation_id', p_msg->>'parent_id',
           coalesce(p_msg->>'source_type', 'api_key'), coalesce(p_msg->>'source_id', p_source),
           v.ttl, v.deadline, least(p_now + v.ttl * interval '1 second', v.deadline),
           coalesce((p_msg->>'max_retries')::int, q.max_retries),
           coalesce((p_msg->>'visibility_timeout_s')::int, q.visibility_timeout_s),
           p_msg->>'idempotency_key', p_msg->'hitl_spec'
    FROM (SELECT coalesce(array_position(ARRAY['critical', 'high', 'normal', 'low', 'background'],
                                         p_msg#>>'{priority,tier}') - 1, 2)::smallint AS tier,
                 coalesce((p_msg#>>'{priority,score}')::int, 500) AS score,
                 (p_msg->>'deadline')::timestamptz AS deadline,
                 coalesce((p_msg->>'ttl_seconds')::int, q.ttl_seconds) AS ttl) v,
         LATERAL (SELECT CASE q.ordering
                             WHEN 'priority' THEN v.tier * 1024 + (1000 - v.score)
                             WHEN 'deadline' THEN coalesce(floor(extract(epoch FROM v.deadline))::bigint,
                                                           9000000000000000000)
                             ELSE 0 END::bigint AS rank) r
$$;

-- Publish one message (p_msg: the request's fields, defaults filled by the caller where the queue
-- has none). Answers {"message": doc, "replayed": bool}.
-- Journalled: `scaiqueue.message.published` by the message's source (the caller's
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
    v_emit boolean;
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
        -- Its counters alone (a bounded queue counts what changes its depth as it happens).
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
    INSERT INTO work_messages AS w (
        queue_id, scope_id, tenant_id, rank, visible_at, aged_at, message_type, tier, score, labels, content_type,
        body, correlation_id, causation_id, parent_id, source_type, source_id, ttl_seconds, deadline, expires_at,
        max_retries, visibility_timeout_s, idempotency_key, hitl_spec)
    SELECT * FROM work_new_message(p_tenant, s, q, p_msg, p_source, v_now)
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
    PERFORM work_journal_published(s, q, ARRAY[m.id], ARRAY[m.correlation_id], m.source_type, m.source_id, v_emit);
    RETURN jsonb_build_object('message', work_message_doc(m.id), 'replayed', false);
END $$;

-- Each batch item's id as a uuid, in order (NULL where it is not one: that item answers not found),
-- read in SQL so the caller need not parse and send them (p_ids NULL).
CREATE OR REPLACE FUNCTION work_item_ids(p_items jsonb) RETURNS uuid[] LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(array_agg(CASE WHEN x.e->>'id' ~* '^\{?[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\}?$'
                                   THEN (x.e->>'id')::uuid END ORDER BY x.ord), '{}')
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, ord)
$$;

-- ---- complete, fail, release, extend, cancel ----------------------------------------------------

-- Act on one message of a scope; p_item: {id, claim_token?, response?, reason?, seconds?}. Answers
-- the message's document; a refusal raises its error. A claim_token, when given, must be the
-- message's current one: a consumer whose claim ran out and was claimed again cannot act on it.
-- Retry backoff after a fail: 2^(attempts-1) seconds, at most 300. A fail or a release pulls its
-- queue's claim head back to the message, so the next claim finds it at once.
-- With the caller's actor: each action journals its moment (completed, failed,
-- released, extended, cancelled; a fail after the last attempt also dead_lettered). Completions
-- are emitted into `_events` (but not those of `_events`' own messages, whose consumers would
-- otherwise feed themselves).
CREATE OR REPLACE FUNCTION work_finish(p_tenant uuid, p_scope uuid, p_action text, p_item jsonb,
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
    v_moved int;  -- the move its journal row counts (work_journal.sql), NULL when counted here
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
        IF work_counts_now(m.queue_id) THEN
            PERFORM work_count(m.queue_id, 0, -1, 0, 1, 0);
        ELSE
            v_moved := 1;
        END IF;
        v_type := 'completed';
    ELSIF p_action = 'fail' THEN
        v_type := 'failed';
        v_payload := jsonb_build_object('reason', p_item->>'reason', 'retry', m.attempts < m.max_retries);
        PERFORM work_journal_add(s, 'scaiqueue.message.failed', m, p_actor_type, p_actor_id, false, v_payload,
                                 CASE WHEN m.attempts < m.max_retries THEN 1 END);
        IF m.attempts >= m.max_retries THEN
            PERFORM work_dead_letter(ARRAY[m.id], p_item->>'reason', p_actor_type, p_actor_id);
        ELSE
            UPDATE work_messages SET state = 'pending', failure_reason = p_item->>'reason', claim_token = NULL,
                   visible_at = clock_timestamp()
                                + least(300, power(2, greatest(m.attempts - 1, 0))) * interval '1 second',
                   updated_at = clock_timestamp()
            WHERE id = m.id;
            PERFORM work_claim_head_back(m.queue_id, m.seq);
        END IF;
        PERFORM work_route_lifecycle(s, 'message_failed', m, 0);
    ELSIF p_action = 'release' THEN
        UPDATE work_messages SET state = 'pending', attempts = greatest(attempts - 1, 0), claim_token = NULL,
               visible_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE id = m.id RETURNING * INTO m;
        PERFORM work_claim_head_back(m.queue_id, m.seq);
        v_type := 'released';
        v_moved := 1;
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
                                 v_type = 'completed' AND m.queue_id <> s.events_queue_id, v_payload, v_moved);
    END IF;
    IF v_type = 'completed' THEN
        PERFORM work_route_lifecycle(s, 'message_completed', m, 0);
    END IF;
    RETURN work_message_doc(m.id);
END $$;

-- Complete a message as work_finish does, once the response fits the message's HITL spec: a
-- refusal is VALIDATION_ERROR whose HINT holds the [{field, message}] list. A message without a
-- spec (or whose spec asks for nothing: work_hitl_asks) completes with any response.
-- The scope is loaded (and so the caller's ACL checked) first, so a denied actor is refused before
-- anything of the message is looked at.
CREATE OR REPLACE FUNCTION work_complete_checked(p_tenant uuid, p_scope uuid, p_item jsonb,
                                      p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_spec jsonb;
    v_errors jsonb;
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);  -- the caller's ACL first: a denied actor learns nothing of the spec
    SELECT m.hitl_spec INTO v_spec FROM work_messages m
    WHERE m.id = (p_item->>'id')::uuid AND m.scope_id = p_scope AND m.tenant_id = p_tenant AND m.state = 'claimed';
    IF v_spec IS NOT NULL AND work_hitl_asks(v_spec) THEN
        v_errors := work_hitl_errors(v_spec, coalesce(p_item->'response', '{}'));
        IF jsonb_array_length(v_errors) > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR', HINT = v_errors::text,
                MESSAGE = 'The response does not fit the message''s HITL spec.';
        END IF;
    END IF;
    RETURN work_finish(p_tenant, p_scope, 'complete', p_item, p_actor_type, p_actor_id);
END $$;

-- The batch extension's complete, fail and release, set-based: one UPDATE takes every item that
-- holds the current claim (state claimed, token matching when given) and acts on it, with one
-- INSERT for the completed events; the items it did not take are then told why. Each item answers
-- {id, ok, state} or {id, ok: false, error: {code, message}}, in the order given; an id named twice
-- acts once. p_ids holds each item's id as a uuid (NULL where it is not one), parsed by the caller.
-- The items are read once into arrays (reading each item out of the request per row the update's
-- join looks at costs the square of the batch), the update finds each message by its id, and the
-- answers look a message up only for an item that was refused. Journalled set-based with the
-- caller's actor: one journal row per queue (one, but for a batch across queues).
-- The HITL check sits in the update itself (a pass of its own before the batch would cost 100 more
-- message lookups per call, about a tenth of a complete-batch's database time): a message whose
-- spec asks for a decision or an input completes only when its response fits; one that does not
-- stays claimed, and its item answers VALIDATION_ERROR with the spec's errors as `details`. The
-- HITL errors are computed again only for those items.
CREATE OR REPLACE FUNCTION work_finish_batch(p_tenant uuid, p_scope uuid, p_action text, p_items jsonb, p_ids uuid[],
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
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.resp, u.n
            FROM unnest(p_ids, v_toks, v_resps) WITH ORDINALITY u(id, tok, resp, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), done AS (
            UPDATE work_messages w SET state = 'completed', response = g.resp, claim_token = NULL,
                   ended_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
              AND (w.hitl_spec IS NULL OR NOT work_hitl_asks(w.hitl_spec)
                   OR jsonb_array_length(work_hitl_errors(w.hitl_spec, coalesce(g.resp, '{}'))) = 0)
            RETURNING w.id, w.queue_id, w.correlation_id, w.attempts, g.n
        ), journal AS (  -- a row per queue (one, but for a batch that spans queues), entries in item order
            INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, emit, moved,
                                      message_ids, attempts, correlation_ids)
            SELECT s.id, s.tenant_id, d.queue_id, 'scaiqueue.message.completed', p_actor_type, p_actor_id,
                   d.queue_id <> s.events_queue_id, CASE WHEN NOT work_counts_now(d.queue_id) THEN count(*) END,
                   array_agg(d.id ORDER BY d.n), work_journal_compact(array_agg(d.attempts ORDER BY d.n)),
                   work_journal_compact(array_agg(d.correlation_id ORDER BY d.n))
            FROM done d GROUP BY d.queue_id
        )
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}') INTO v_ok, v_okq FROM done d;
    ELSIF p_action = 'release' THEN
        v_state := 'pending';
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.n FROM unnest(p_ids, v_toks) WITH ORDINALITY u(id, tok, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), moved AS (
            UPDATE work_messages w SET state = 'pending', attempts = greatest(w.attempts - 1, 0), claim_token = NULL,
                   visible_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
            RETURNING w.id, w.queue_id, w.seq, w.correlation_id, w.attempts, g.n
        ), journal AS (
            INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, moved,
                                      message_ids, attempts, correlation_ids)
            SELECT s.id, s.tenant_id, d.queue_id, 'scaiqueue.message.released', p_actor_type, p_actor_id, count(*),
                   array_agg(d.id ORDER BY d.n), work_journal_compact(array_agg(d.attempts ORDER BY d.n)),
                   work_journal_compact(array_agg(d.correlation_id ORDER BY d.n))
            FROM moved d GROUP BY d.queue_id
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
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.reason, u.n
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
            RETURNING w.id, w.queue_id, w.seq, w.correlation_id, w.attempts, g.reason, g.n
        ), journal AS (  -- the details differ only by their reason: one when they share it
            INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, moved,
                                      payload, payloads, message_ids, attempts, correlation_ids)
            SELECT s.id, s.tenant_id, d.queue_id, 'scaiqueue.message.failed', p_actor_type, p_actor_id, count(*),
                   CASE WHEN count(DISTINCT coalesce(d.reason, '')) = 1
                        THEN jsonb_build_object('reason', min(d.reason), 'retry', true) END,
                   CASE WHEN count(DISTINCT coalesce(d.reason, '')) > 1
                        THEN array_agg(jsonb_build_object('reason', d.reason, 'retry', true) ORDER BY d.n) END,
                   array_agg(d.id ORDER BY d.n), work_journal_compact(array_agg(d.attempts ORDER BY d.n)),
                   work_journal_compact(array_agg(d.correlation_id ORDER BY d.n))
            FROM moved d GROUP BY d.queue_id
        )
        SELECT coalesce(array_agg(m.id), '{}'), coalesce(array_agg(m.queue_id), '{}'),
               coalesce(array_agg(m.seq), '{}') INTO v_ok, v_okq, v_oks FROM moved m;
    END IF;

    -- The claim heads come back, and a bounded queue's completions are counted (its journal row
    -- counts the others: work_journal.sql), once per queue, in queue order.
    FOR r IN SELECT u.q, count(*) AS n, min(u.seq) AS first FROM unnest(v_okq, v_oks) u(q, seq)
             GROUP BY u.q ORDER BY u.q LOOP
        IF p_action <> 'complete' THEN
            PERFORM work_claim_head_back(r.q, r.first);
        ELSIF work_counts_now(r.q) THEN
            PERFORM work_count(r.q, 0, -r.n, 0, r.n, 0);
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
                       WHEN m.errors IS NOT NULL THEN jsonb_build_object('code', 'VALIDATION_ERROR', 'message',
                            'The response does not fit the message''s HITL spec.', 'details', m.errors)
                       ELSE jsonb_build_object('code', 'SCAIQUEUE_NOT_CLAIMED', 'message',
                            format('Message is %s, or the claim token is not the current claim''s.', m.state)) END
                   FROM (SELECT x.state,
                                CASE WHEN p_action = 'complete' AND x.state = 'claimed'
                                          AND work_hitl_asks(x.hitl_spec)
                                     THEN nullif(work_hitl_errors(x.hitl_spec,
                                                     coalesce(p_items->(a.n::int - 1)->'response', '{}')), '[]')
                                END AS errors
                         FROM (SELECT 1) one
                         LEFT JOIN work_messages x ON x.id = a.id AND x.scope_id = s.id) m))
           END ORDER BY a.n)
    INTO v_out
    FROM (SELECT u.n, u.id, row_number() OVER (PARTITION BY u.id ORDER BY u.n) = 1 AS first
          FROM unnest(p_ids) WITH ORDINALITY u(id, n)) a
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_ok) k(id)) ok ON a.first AND ok.id = a.id
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_dead) k(id)) dl ON a.first AND dl.id = a.id;
    RETURN coalesce(v_out, '[]');
END $$;
