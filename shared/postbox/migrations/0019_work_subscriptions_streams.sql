-- The work surface, part 2: subscriptions, chunk streams, and the publish path that records
-- chunks, routes and fans out.
--
-- A subscription binds a subscriber to a broadcast queue with a filter (the routing condition
-- language). Each message published into a broadcast queue gets one delivery per active
-- subscription whose filter matches, written in the publish transaction; the message itself is
-- then `delivering` (not claimable by plain claims) until every delivery has ended, when it
-- becomes `completed`. A delivery is claimed, completed, failed and released on its own, with its
-- own attempts and claim token, so each subscription processes every message once.
-- Routing runs inside the publish call too: the rules choose the message's queue (and changes)
-- before the one INSERT (work_publish of 0013, unchanged), so a message is never visible in two
-- places or in none.

CREATE TABLE work_subscriptions (
    id               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id         uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    tenant_id        uuid NOT NULL,
    queue_id         bigint NOT NULL REFERENCES work_queues(id) ON DELETE CASCADE,
    subscriber_type  text NOT NULL,
    subscriber_id    text NOT NULL,
    filter           jsonb,
    delivery_mode    text NOT NULL DEFAULT 'pull' CHECK (delivery_mode IN ('pull', 'push')),
    push_url         text,             -- push: where the agent POSTs each delivery
    push_secret      text,             -- push: the HMAC-SHA256 key of its signature (shown once)
    auto_claim       boolean NOT NULL DEFAULT false,
    max_in_flight    int NOT NULL DEFAULT 100,
    state            text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'paused')),
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_subscriptions_queue ON work_subscriptions (queue_id) WHERE state = 'active';
CREATE INDEX work_subscriptions_scope ON work_subscriptions (scope_id, created_at);
CREATE INDEX work_subscriptions_push ON work_subscriptions (id) WHERE delivery_mode = 'push' AND state = 'active';

CREATE TABLE work_deliveries (
    subscription_id  uuid NOT NULL REFERENCES work_subscriptions(id) ON DELETE CASCADE,
    message_id       uuid NOT NULL REFERENCES work_messages(id) ON DELETE CASCADE,
    seq              bigint NOT NULL,  -- the message's, for the order of a pull
    state            text NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'claimed', 'completed', 'dead_lettered', 'expired')),
    visible_at       timestamptz NOT NULL,
    attempts         int NOT NULL DEFAULT 0,
    claim_token      uuid,
    claimed_at       timestamptz,
    failure_reason   text,
    response         jsonb,
    created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at         timestamptz,
    PRIMARY KEY (subscription_id, message_id)
);
CREATE INDEX work_deliveries_pull ON work_deliveries (subscription_id, seq) WHERE state = 'pending';
CREATE INDEX work_deliveries_claimed ON work_deliveries (subscription_id, visible_at) WHERE state = 'claimed';
CREATE INDEX work_deliveries_message ON work_deliveries (message_id);
-- Broadcast messages being delivered are live (`ended_at` is null): the expiry agent finds those
-- with a ttl or deadline through work_messages_expiry. No index names `state`, so a claim stays an
-- in-place (HOT) update.

-- A delivery as the subscription routes answer it: the message's document with the delivery's
-- own state, attempts, claim and response (the message's own state is `message_state`).
CREATE VIEW work_delivery_docs AS
SELECT d.subscription_id, d.message_id, d.seq,
       to_jsonb(md) || jsonb_build_object(
           'subscription_id', d.subscription_id, 'message_state', md.state, 'state', d.state,
           'attempts', d.attempts, 'claim_token', d.claim_token, 'claimed_at', d.claimed_at,
           'claim_expires_at', CASE WHEN d.state = 'claimed' THEN d.visible_at END,
           'visible_at', CASE WHEN d.state = 'pending' THEN d.visible_at END,
           'failure_reason', d.failure_reason, 'response', d.response, 'ended_at', d.ended_at) AS doc
FROM work_deliveries d JOIN work_message_docs md ON md.id = d.message_id;

-- One delivery per active subscription of a broadcast queue whose filter matches the message just
-- published (p_answer: work_publish's); with any, the message becomes `delivering`.
CREATE FUNCTION work_fan_out(q work_queues, p_answer jsonb, p_msg jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    n int;
BEGIN
    IF q.consumer_mode <> 'broadcast' OR (p_answer->>'replayed')::boolean THEN
        RETURN p_answer;
    END IF;
    v_id := (p_answer#>>'{message,id}')::uuid;
    INSERT INTO work_deliveries (subscription_id, message_id, seq, visible_at)
    SELECT x.id, m.id, m.seq, m.visible_at
    FROM work_messages m, work_subscriptions x
    WHERE m.id = v_id AND m.state = 'pending' AND x.queue_id = q.id AND x.state = 'active'
      AND work_cond(x.filter, work_rule_subject(p_msg, q.slug));
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN
        RETURN p_answer;
    END IF;
    UPDATE work_messages SET state = 'delivering', updated_at = clock_timestamp() WHERE id = v_id;
    PERFORM work_count(q.id, -1, 0, 0, 0, 0);
    RETURN jsonb_build_object('message', work_message_doc(v_id), 'replayed', false);
END $$;

-- ---- the publish path ---------------------------------------------------------------------------

-- Route one publish from queue p_queue after p_hops hops: rules are applied until one ends the
-- walk (transform, escalate, archive, copy) or none matches; route moves on to the target queue
-- and its rules. A 6th route or copy is not applied: the message stays where it is, with the
-- label `routing.stopped` saying why. Answers work_publish's {message, replayed}.
CREATE FUNCTION work_route(p_tenant uuid, s work_scopes, p_queue work_queues, p_msg jsonb, p_source text, p_hops int)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    q work_queues := p_queue;
    r work_routing_rules;
    v_msg jsonb := p_msg;
    v_hops int := p_hops;
    v_copy_to bigint;
    v_archive text;
    v_answer jsonb;
    v_id uuid;
    c work_queues;
BEGIN
    LOOP
        r := work_first_rule(s.id, 'message_published', q.id, work_rule_subject(v_msg, q.slug));
        EXIT WHEN r.id IS NULL;
        IF r.action->>'type' IN ('route', 'copy') AND v_hops >= 5 THEN
            v_msg := jsonb_set(v_msg, '{labels}', coalesce(v_msg->'labels', '{}') || jsonb_build_object(
                'routing.stopped', format('loop breaker: %s hops; rule %s not applied', v_hops, r.name)));
            EXIT;
        END IF;
        CASE r.action->>'type'
            WHEN 'route' THEN
                SELECT * INTO q FROM work_queues WHERE id = r.target_queue;
                v_hops := v_hops + 1;
            WHEN 'copy' THEN
                v_copy_to := r.target_queue;
                EXIT;
            WHEN 'archive' THEN
                v_archive := r.name;
                EXIT;
            ELSE  -- transform, escalate
                v_msg := work_rule_apply(r.action, v_msg);
                EXIT;
        END CASE;
    END LOOP;
    v_answer := work_publish(p_tenant, s.id, q.queue_id, v_msg, p_source);
    IF (v_answer->>'replayed')::boolean THEN
        RETURN v_answer;
    END IF;
    v_id := (v_answer#>>'{message,id}')::uuid;
    IF v_archive IS NOT NULL THEN  -- ends at once, before anyone could claim it (same transaction)
        UPDATE work_messages SET state = 'archived', ended_at = clock_timestamp(), updated_at = clock_timestamp(),
               failure_reason = format('archived by routing rule %s', v_archive)
        WHERE id = v_id;
        PERFORM work_count(q.id, -1, 0, 0, 0, 0);
        RETURN jsonb_build_object('message', work_message_doc(v_id), 'replayed', false);
    END IF;
    v_answer := work_fan_out(q, v_answer, v_msg);
    IF v_copy_to IS NOT NULL THEN  -- a child in the target queue, routed in its turn
        SELECT * INTO c FROM work_queues WHERE id = v_copy_to;
        PERFORM work_route(p_tenant, s, c,
                           (v_msg - 'idempotency_key') || jsonb_build_object('parent_id', v_id, 'causation_id', v_id),
                           p_source, v_hops + 1);
    END IF;
    RETURN v_answer;
END $$;

-- A publish into a queue once its scope, queue and schema are checked: routing applied (when the
-- scope has enabled rules) and fanned out to subscriptions on a broadcast queue.
CREATE FUNCTION work_publish_into(p_tenant uuid, s work_scopes, q work_queues, p_msg jsonb, p_source text)
RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_routing_rules WHERE scope_id = s.id AND trigger = 'message_published'
                   AND enabled) THEN
        RETURN work_fan_out(q, work_publish(p_tenant, s.id, q.queue_id, p_msg, p_source), p_msg);
    END IF;
    RETURN work_route(p_tenant, s, q, p_msg, p_source, 0);
END $$;

-- ---- chunk streams ------------------------------------------------------------------------------

-- A stream: chunks published as messages carrying `stream` {id, seq, final}, assembled in `seq`
-- order. It is `complete` once the final chunk and every chunk before it arrived, `cancelled` when
-- cancelled while open (no chunk is accepted then).
CREATE TABLE work_streams (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope_id     uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    stream_key   text NOT NULL,
    queue_id     bigint REFERENCES work_queues(id) ON DELETE SET NULL,  -- where its first chunk went
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'complete', 'cancelled')),
    chunks       int NOT NULL DEFAULT 0,
    final_seq    int,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at     timestamptz,
    UNIQUE (scope_id, stream_key)
);
CREATE INDEX work_streams_state ON work_streams (scope_id, state, created_at);

CREATE TABLE work_stream_chunks (
    stream      bigint NOT NULL REFERENCES work_streams(id) ON DELETE CASCADE,
    seq         int NOT NULL,
    message_id  uuid NOT NULL REFERENCES work_messages(id) ON DELETE CASCADE,
    PRIMARY KEY (stream, seq)
);
CREATE INDEX work_stream_chunks_message ON work_stream_chunks (message_id);

-- Publish one chunk. The stream row is locked, so chunks of one stream are recorded one at a time:
-- a sequence number seen before answers its original message (replayed; another body is
-- SCAIQUEUE_IDEMPOTENCY_CONFLICT); chunks may arrive in any order; none is accepted past the final
-- one or into a cancelled stream (SCAIQUEUE_INVALID_TRANSITION). The chunk message carries the
-- labels `stream.id`, `stream.seq` and, for the last one, `stream.final`.
CREATE FUNCTION work_stream_chunk(p_tenant uuid, s work_scopes, q work_queues, p_msg jsonb, p_source text)
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

-- A publish as the API makes it: a chunk recorded in its stream, routing applied, fanned out to
-- subscriptions on a broadcast queue, and the schema the caller validated the body against
-- (p_schema, NULL for none) checked to be the one the queue names now (SCAIQUEUE_SCHEMA_STALE
-- otherwise, its message the schema id, which the caller answers by checking the body against
-- that schema and trying again).
CREATE FUNCTION work_publish_routed(p_tenant uuid, p_scope uuid, p_queue uuid, p_msg jsonb, p_source text,
                                    p_schema uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    IF q.schema_id IS DISTINCT FROM p_schema THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_SCHEMA_STALE',
            MESSAGE = coalesce(q.schema_id::text, '');
    END IF;
    IF p_msg ? 'stream' THEN
        RETURN work_stream_chunk(p_tenant, s, q, p_msg, p_source);
    END IF;
    RETURN work_publish_into(p_tenant, s, q, p_msg, p_source);
END $$;

-- ---- deliveries ---------------------------------------------------------------------------------

CREATE FUNCTION work_subscription_of(p_tenant uuid, p_scope uuid, p_sub uuid, p_lock boolean)
RETURNS work_subscriptions LANGUAGE plpgsql AS $$
DECLARE x work_subscriptions;
BEGIN
    IF p_lock THEN
        SELECT * INTO x FROM work_subscriptions
        WHERE id = p_sub AND tenant_id = p_tenant AND (p_scope IS NULL OR scope_id = p_scope) FOR UPDATE;
    ELSE
        SELECT * INTO x FROM work_subscriptions
        WHERE id = p_sub AND tenant_id = p_tenant AND (p_scope IS NULL OR scope_id = p_scope);
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_SUBSCRIPTION_NOT_FOUND',
            MESSAGE = 'Subscription not found.';
    END IF;
    RETURN x;
END $$;

-- Broadcast messages whose deliveries have all ended become `completed` (counted once), or
-- `expired` when past their ttl_seconds or deadline. The message rows are locked after the
-- deliveries (every caller takes deliveries first), so of two deliveries ending at once the later
-- one sees both.
CREATE FUNCTION work_settle(p_ids uuid[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    PERFORM 1 FROM work_messages WHERE id = ANY (p_ids) AND state = 'delivering' ORDER BY id FOR UPDATE;
    FOR r IN
        WITH done AS (
            UPDATE work_messages m
            SET state = CASE WHEN m.expires_at <= clock_timestamp() THEN 'expired' ELSE 'completed' END,
                ended_at = clock_timestamp(), updated_at = clock_timestamp()
            WHERE m.id = ANY (p_ids) AND m.state = 'delivering'
              AND NOT EXISTS (SELECT 1 FROM work_deliveries d WHERE d.message_id = m.id
                              AND d.state IN ('pending', 'claimed'))
            RETURNING m.queue_id, m.state
        ) SELECT queue_id, count(*) AS n FROM done WHERE state = 'completed' GROUP BY queue_id ORDER BY queue_id
    LOOP
        PERFORM work_count(r.queue_id, 0, 0, 0, r.n, 0);
    END LOOP;
END $$;

-- The expiry of broadcast messages: deliveries still open of messages past their ttl_seconds or
-- deadline end `expired`, and so do those messages. Bounded; safe to run twice at once.
CREATE FUNCTION work_expire_deliveries(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE v_ids uuid[];
BEGIN
    v_ids := ARRAY(SELECT m.id FROM work_messages m
                   WHERE m.ended_at IS NULL AND m.state = 'delivering' AND m.expires_at IS NOT NULL
                     AND m.expires_at <= clock_timestamp()
                   ORDER BY m.expires_at LIMIT p_limit);
    UPDATE work_deliveries SET state = 'expired', claim_token = NULL, ended_at = clock_timestamp(),
           updated_at = clock_timestamp()
    WHERE message_id = ANY (v_ids) AND state IN ('pending', 'claimed');
    PERFORM work_settle(v_ids);
    RETURN cardinality(v_ids);
END $$;

-- A subscription's claims whose time ran out: back to pending, or dead-lettered after the last
-- attempt (the message's max_retries).
CREATE FUNCTION work_delivery_recover(p_sub uuid) RETURNS int LANGUAGE plpgsql AS $$
DECLARE v_dead uuid[]; n int;
BEGIN
    WITH moved AS (
        UPDATE work_deliveries d
        SET state = CASE WHEN d.attempts >= m.max_retries THEN 'dead_lettered' ELSE 'pending' END,
            ended_at = CASE WHEN d.attempts >= m.max_retries THEN clock_timestamp() END,
            failure_reason = CASE WHEN d.attempts >= m.max_retries
                                  THEN 'visibility timeout expired after the last attempt'
                                  ELSE 'visibility timeout' END,
            claim_token = NULL, visible_at = clock_timestamp(), updated_at = clock_timestamp()
        FROM work_messages m
        WHERE d.subscription_id = p_sub AND d.state = 'claimed' AND d.visible_at <= clock_timestamp()
          AND m.id = d.message_id
        RETURNING d.message_id, d.state
    )
    SELECT array_agg(message_id) FILTER (WHERE state = 'dead_lettered'), count(*) INTO v_dead, n FROM moved;
    IF v_dead IS NOT NULL THEN
        PERFORM work_settle(v_dead);
    END IF;
    RETURN n;
END $$;

-- Pull: up to p_n pending deliveries of an active subscription, oldest first, claimed for p_vt
-- seconds (each message's visibility_timeout_s when NULL), never more than max_in_flight claimed
-- at once. The subscription row is locked, so concurrent pulls cannot overshoot max_in_flight.
CREATE FUNCTION work_delivery_claim(p_tenant uuid, p_scope uuid, p_sub uuid, p_n int, p_vt int)
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
        RETURNING d.message_id
    )
    SELECT array_agg(c.message_id) INTO v_ids FROM claimed c;
    SELECT jsonb_agg(v.doc ORDER BY v.seq) INTO v_out  -- a new statement: it sees the claims
    FROM work_delivery_docs v WHERE v.subscription_id = x.id AND v.message_id = ANY (v_ids);
    RETURN coalesce(v_out, '[]');
END $$;

-- complete | fail | release one claimed delivery; p_item {id, claim_token?, response?, reason?}.
-- complete checks the response against the message's HITL spec and emits
-- `scaiqueue.message.completed` with the subscription id; fail retries with the message's backoff
-- or, after its max_retries, ends the delivery `dead_lettered` with `scaiqueue.message.dead_lettered`.
CREATE FUNCTION work_delivery_finish(p_tenant uuid, p_scope uuid, p_sub uuid, p_action text, p_item jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    x work_subscriptions;
    d work_deliveries;
    m work_messages;
    v_errors jsonb;
    v_extra jsonb;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    x := work_subscription_of(p_tenant, p_scope, p_sub, false);
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
        v_extra := jsonb_build_object('response', p_item->'response', 'subscription_id', x.id);
        m.attempts := d.attempts;
        PERFORM work_emit(s, 'scaiqueue.message.completed', m, v_extra);
        PERFORM work_count(s.events_queue_id, 1, 0, 1, 0, 0);
    ELSIF p_action = 'fail' AND d.attempts >= m.max_retries THEN
        UPDATE work_deliveries SET state = 'dead_lettered', failure_reason = p_item->>'reason', claim_token = NULL,
               ended_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
        m.attempts := d.attempts;
        PERFORM work_emit(s, 'scaiqueue.message.dead_lettered', m,
                          jsonb_build_object('reason', p_item->>'reason', 'subscription_id', x.id));
        PERFORM work_count(s.events_queue_id, 1, 0, 1, 0, 0);
    ELSIF p_action = 'fail' THEN
        UPDATE work_deliveries SET state = 'pending', failure_reason = p_item->>'reason', claim_token = NULL,
               visible_at = clock_timestamp() + least(300, power(2, greatest(d.attempts - 1, 0))) * interval '1 second',
               updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
    ELSIF p_action = 'release' THEN
        UPDATE work_deliveries SET state = 'pending', attempts = greatest(attempts - 1, 0), claim_token = NULL,
               visible_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE subscription_id = d.subscription_id AND message_id = d.message_id;
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown action.';
    END IF;
    PERFORM work_settle(ARRAY[d.message_id]);
    RETURN (SELECT v.doc FROM work_delivery_docs v WHERE v.subscription_id = x.id AND v.message_id = d.message_id);
END $$;

-- {message_id: bool}: which of these messages the subscription has completed.
CREATE FUNCTION work_delivery_processed(p_tenant uuid, p_sub uuid, p_ids uuid[]) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE x work_subscriptions;
BEGIN
    x := work_subscription_of(p_tenant, NULL, p_sub, false);
    RETURN (SELECT coalesce(jsonb_object_agg(u.id, coalesce(d.state = 'completed', false)), '{}')
            FROM unnest(p_ids) u(id)
            LEFT JOIN work_deliveries d ON d.subscription_id = x.id AND d.message_id = u.id);
END $$;

-- Active push subscriptions with deliveries to post now (pending and visible, or claims whose
-- time ran out): what the push agent works through, oldest subscription first.
CREATE FUNCTION work_push_due(p_limit int)
RETURNS TABLE (id uuid, tenant_id uuid, scope_id uuid, push_url text, push_secret text, max_in_flight int)
LANGUAGE sql STABLE AS $$
    SELECT x.id, x.tenant_id, x.scope_id, x.push_url, x.push_secret, x.max_in_flight
    FROM work_subscriptions x
    WHERE x.delivery_mode = 'push' AND x.state = 'active'
      AND (EXISTS (SELECT 1 FROM work_deliveries d WHERE d.subscription_id = x.id AND d.state = 'pending'
                   AND d.visible_at <= clock_timestamp())
           OR EXISTS (SELECT 1 FROM work_deliveries d WHERE d.subscription_id = x.id AND d.state = 'claimed'
                      AND d.visible_at <= clock_timestamp()))
    ORDER BY x.created_at LIMIT p_limit
$$;
