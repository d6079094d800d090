-- A subscription's claims and finishes for either consumer mode, and the queue's own claim and
-- finish routes used by a subscriber.
--
-- On a broadcast queue a subscription has its own delivery of each message (work_subscriptions.sql).
-- On a competing queue it has none: its subscriber claims the queue's messages, competing with
-- every other claimer, through the one claim walk (work_claim) with the subscription's filter,
-- never holding more than max_in_flight; each message it claims records the subscription in
-- `claimed_for`, and ends as any claimed message does.

-- A message row as a condition reads it (the fields work_rule_subject gives a message being published).
CREATE OR REPLACE FUNCTION work_row_subject(m work_messages, p_queue text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'type', m.message_type, 'labels', m.labels, 'body', m.body,
        'priority', jsonb_build_object('tier', (ARRAY['critical', 'high', 'normal', 'low', 'background'])[m.tier + 1],
                                       'score', m.score),
        'content_type', m.content_type, 'correlation_id', m.correlation_id, 'queue', p_queue)
$$;

-- How many of a competing queue's messages a subscription holds now (claims that ran out do not count).
CREATE OR REPLACE FUNCTION work_subscription_held(p_sub uuid) RETURNS int LANGUAGE sql STABLE AS $$
    SELECT count(*)::int FROM work_messages
    WHERE claimed_for = p_sub AND ended_at IS NULL AND state = 'claimed' AND visible_at > clock_timestamp()
$$;

-- A subscription's documents: each message's, with the subscription that holds it.
CREATE OR REPLACE FUNCTION work_with_subscription(p_docs jsonb, p_sub uuid) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(d.doc || jsonb_build_object('subscription_id', p_sub) ORDER BY d.n), '[]')
    FROM jsonb_array_elements(p_docs) WITH ORDINALITY d(doc, n)
$$;

-- Pull for a subscription of either mode: a broadcast queue's deliveries (work_delivery_claim), or
-- a competing queue's messages its filter lets through, up to what max_in_flight leaves (the
-- subscription row is locked, so concurrent pulls cannot overshoot it). A paused subscription
-- claims nothing.
CREATE OR REPLACE FUNCTION work_subscription_claim(p_tenant uuid, p_scope uuid, p_sub uuid, p_n int, p_vt int,
                                                   p_claimer text DEFAULT NULL, p_actor_type text DEFAULT NULL,
                                                   p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    x work_subscriptions;
    q work_queues;
    v_n int;
BEGIN
    x := work_subscription_of(p_tenant, p_scope, p_sub, true);
    SELECT * INTO q FROM work_queues WHERE id = x.queue_id;
    IF q.consumer_mode = 'broadcast' THEN
        RETURN work_delivery_claim(p_tenant, p_scope, p_sub, p_n, p_vt, p_actor_type, p_actor_id);
    END IF;
    PERFORM work_scope_of(p_tenant, x.scope_id);
    IF x.state <> 'active' THEN
        RETURN '[]';
    END IF;
    v_n := least(p_n, x.max_in_flight - work_subscription_held(x.id));
    IF v_n <= 0 THEN
        RETURN '[]';
    END IF;
    RETURN work_with_subscription(
        work_claim_text(p_tenant, x.scope_id, q.queue_id, v_n, p_vt,
                        coalesce(p_claimer, x.subscriber_type || ':' || x.subscriber_id), p_actor_type, p_actor_id, x.id,
                        nullif(nullif(x.filter, 'null'::jsonb), '{}'::jsonb))::jsonb, x.id);
END $$;

-- complete | fail | release for a subscription of either mode: its delivery of a broadcast message
-- (work_delivery_finish), or a competing queue's message it holds, ended as any claimed message
-- (a message it does not hold is not found; one it held that is no longer claimed, not claimed).
CREATE OR REPLACE FUNCTION work_subscription_finish(p_tenant uuid, p_scope uuid, p_sub uuid, p_action text,
                                                    p_item jsonb, p_actor_type text DEFAULT NULL,
                                                    p_actor_id text DEFAULT NULL)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    x work_subscriptions;
    v_mode text;
    m work_messages;
BEGIN
    x := work_subscription_of(p_tenant, p_scope, p_sub, false);
    SELECT consumer_mode INTO v_mode FROM work_queues WHERE id = x.queue_id;
    IF v_mode = 'broadcast' THEN
        RETURN work_delivery_finish(p_tenant, p_scope, p_sub, p_action, p_item, p_actor_type, p_actor_id);
    END IF;
    PERFORM work_scope_of(p_tenant, x.scope_id);
    PERFORM work_journal_lock(x.scope_id);  -- as work_finish takes it: before the message row
    SELECT * INTO m FROM work_messages
    WHERE id = (p_item->>'id')::uuid AND queue_id = x.queue_id AND claimed_for = x.id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_MESSAGE_NOT_FOUND',
            MESSAGE = 'No such message claimed by this subscription.';
    END IF;
    IF m.state <> 'claimed' THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_NOT_CLAIMED',
            MESSAGE = format('Message is %s, not claimed.', m.state);
    END IF;
    IF p_action = 'complete' THEN
        RETURN work_complete_checked(p_tenant, x.scope_id, p_item, p_actor_type, p_actor_id)
               || jsonb_build_object('subscription_id', x.id);
    END IF;
    RETURN work_finish(p_tenant, x.scope_id, p_action, p_item, p_actor_type, p_actor_id)
           || jsonb_build_object('subscription_id', x.id);
END $$;

-- The subscription a request through the queue's own routes speaks for: the one it names
-- (p_sub, which must be a subscription of that queue: else VALIDATION_ERROR on subscription_id),
-- or the one whose subscriber is the caller's work key's subject (several: it must name one).
-- NULL when it names none and its subject subscribes to nothing there.
CREATE OR REPLACE FUNCTION work_subscription_for(p_tenant uuid, p_scope uuid, p_queue bigint, p_sub uuid,
                                                 p_actor_type text, p_actor_id text)
RETURNS uuid LANGUAGE plpgsql STABLE AS $$
DECLARE
    x work_subscriptions;
    v_ids uuid[];
BEGIN
    IF p_sub IS NOT NULL THEN
        x := work_subscription_of(p_tenant, p_scope, p_sub, false);
        IF x.queue_id <> p_queue THEN
            RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR',
                MESSAGE = 'The subscription is not a subscription of this queue.',
                HINT = json_build_object('fields', json_build_array(json_build_object(
                    'field', 'subscription_id', 'message', 'not a subscription of this queue')))::text;
        END IF;
        RETURN x.id;
    END IF;
    IF p_actor_type IS NULL THEN
        RETURN NULL;
    END IF;
    v_ids := ARRAY(SELECT s.id FROM work_subscriptions s
                   WHERE s.queue_id = p_queue AND s.subscriber_type = p_actor_type AND s.subscriber_id = p_actor_id
                   ORDER BY s.created_at, s.id LIMIT 2);
    IF cardinality(v_ids) > 1 THEN
        RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR',
            MESSAGE = 'Your key''s subject has several subscriptions on this queue; name one.',
            HINT = json_build_object('fields', json_build_array(json_build_object(
                'field', 'subscription_id', 'message', 'required: several subscriptions of this subscriber')))::text;
    END IF;
    RETURN v_ids[1];
END $$;

-- The queue's claim route for a caller that may be a subscriber (a subscription named, or a work
-- key): its subscription's claim when it has one on this queue, else the plain claim.
-- p_actor_type/p_actor_id name the work key's subject (NULL for a tenant key naming a subscription).
CREATE OR REPLACE FUNCTION work_claim_as(p_tenant uuid, p_scope uuid, p_queue uuid, p_sub uuid, p_n int, p_vt int,
                                         p_claimer text, p_actor_type text, p_actor_id text, p_subject boolean)
RETURNS json LANGUAGE plpgsql AS $$
DECLARE
    q work_queues;
    v_sub uuid;
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    v_sub := work_subscription_for(p_tenant, p_scope, q.id, p_sub, CASE WHEN p_subject THEN p_actor_type END,
                                   p_actor_id);
    IF v_sub IS NULL THEN
        RETURN work_claim(p_tenant, p_scope, p_queue, p_n, p_vt, p_claimer, p_actor_type, p_actor_id);
    END IF;
    RETURN work_subscription_claim(p_tenant, p_scope, v_sub, p_n, p_vt, p_claimer, p_actor_type, p_actor_id)::json;
END $$;

-- The scope's complete | fail | release route for a caller that may be a subscriber: the named
-- subscription's (any queue of the scope), or, for a work key, its subject's delivery of a
-- broadcast message (the one it holds first); else the message's own finish.
CREATE OR REPLACE FUNCTION work_finish_as(p_tenant uuid, p_scope uuid, p_action text, p_item jsonb, p_sub uuid,
                                          p_actor_type text, p_actor_id text, p_subject boolean)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE v_sub uuid := p_sub;
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);
    IF v_sub IS NULL AND p_subject THEN
        SELECT d.subscription_id INTO v_sub
        FROM work_deliveries d JOIN work_subscriptions x ON x.id = d.subscription_id
        WHERE d.message_id = (p_item->>'id')::uuid AND x.scope_id = p_scope
          AND x.subscriber_type = p_actor_type AND x.subscriber_id = p_actor_id
        ORDER BY d.state = 'claimed' DESC, x.created_at, x.id LIMIT 1;
    END IF;
    IF v_sub IS NOT NULL THEN
        RETURN work_subscription_finish(p_tenant, p_scope, v_sub, p_action, p_item, p_actor_type, p_actor_id);
    ELSIF p_action = 'complete' THEN
        RETURN work_complete_checked(p_tenant, p_scope, p_item, p_actor_type, p_actor_id);
    END IF;
    RETURN work_finish(p_tenant, p_scope, p_action, p_item, p_actor_type, p_actor_id);
END $$;

-- Deleting a subscription of a competing queue releases what it holds, at once, as a release by
-- the deleter would (so the other claimers need not wait for those claims to run out).
CREATE OR REPLACE FUNCTION work_subscription_release(p_tenant uuid, p_scope uuid, p_sub uuid,
                                                     p_actor_type text DEFAULT NULL, p_actor_id text DEFAULT NULL)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    PERFORM work_journal_lock(p_scope);  -- as work_finish takes it: before the message rows
    FOR r IN SELECT id FROM work_messages
             WHERE claimed_for = p_sub AND ended_at IS NULL AND state = 'claimed' ORDER BY id FOR UPDATE LOOP
        PERFORM work_finish(p_tenant, p_scope, 'release', jsonb_build_object('id', r.id), p_actor_type, p_actor_id);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- {message_id: bool}: which of these messages the subscription has completed (its delivery of a
-- broadcast message, or a competing queue's message it claimed and completed).
CREATE OR REPLACE FUNCTION work_subscription_processed(p_tenant uuid, p_sub uuid, p_ids uuid[]) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE x work_subscriptions;
BEGIN
    x := work_subscription_of(p_tenant, NULL, p_sub, false);
    IF (SELECT consumer_mode FROM work_queues WHERE id = x.queue_id) = 'broadcast' THEN
        RETURN work_delivery_processed(p_tenant, p_sub, p_ids);
    END IF;
    RETURN (SELECT coalesce(jsonb_object_agg(u.id, coalesce(m.state = 'completed', false)), '{}')
            FROM unnest(p_ids) u(id)
            LEFT JOIN work_messages m ON m.id = u.id AND m.queue_id = x.queue_id AND m.claimed_for = x.id);
END $$;

-- A message just published into a competing queue (p_answer: work_publish's), claimed at once for
-- an active auto-claimed pull subscription whose filter lets it through and that holds fewer than
-- max_in_flight (the one holding fewest, then the oldest), as the work-auto-claim agent would.
-- The subscriptions are locked, so concurrent publishes cannot assign more than max_in_flight; one
-- another transaction holds is skipped (the agent assigns what waits).
-- The claim is journalled (not emitted: the publish has written counter rows, and the journal lock
-- must come before them). The publisher is answered the message claimed, without the claim token.
CREATE OR REPLACE FUNCTION work_assign_published(q work_queues, p_answer jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    m work_messages;
    x work_subscriptions;
    v_ids uuid[];
    v_now timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO m FROM work_messages WHERE id = (p_answer#>>'{message,id}')::uuid AND state = 'pending'
      AND visible_at <= v_now AND (expires_at IS NULL OR expires_at > v_now);
    IF NOT FOUND THEN
        RETURN p_answer;
    END IF;
    -- Never waiting for one (a claim holds its subscription while it takes the journal lock and
    -- counter rows this publish may hold already): one being claimed for is skipped, and the agent
    -- assigns later. Counted in a statement after the locks, so what it holds is up to date.
    v_ids := ARRAY(SELECT s.id FROM work_subscriptions s
                   WHERE s.queue_id = q.id AND s.state = 'active' AND s.auto_claim AND s.delivery_mode = 'pull'
                   ORDER BY s.id FOR UPDATE SKIP LOCKED);
    SELECT s.* INTO x FROM work_subscriptions s
    WHERE s.id = ANY (v_ids)
      AND work_cond(nullif(nullif(s.filter, 'null'::jsonb), '{}'::jsonb), work_row_subject(m, q.slug))
      AND work_subscription_held(s.id) < s.max_in_flight
    ORDER BY work_subscription_held(s.id), s.created_at, s.id LIMIT 1;
    IF x.id IS NULL THEN
        RETURN p_answer;
    END IF;
    UPDATE work_messages SET state = 'claimed', attempts = attempts + 1,
           claimed_by = x.subscriber_type || ':' || x.subscriber_id, claim_token = gen_random_uuid(),
           claimed_at = v_now, claimed_for = x.id, updated_at = v_now,
           visible_at = v_now + visibility_timeout_s * interval '1 second'
    WHERE id = m.id RETURNING * INTO m;
    PERFORM work_count(q.id, -1, 1, 0, 0, 0);
    INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, payload, message_ids,
                              attempts, correlation_ids)
    VALUES (m.scope_id, m.tenant_id, q.id, 'scaiqueue.message.claimed', 'system', 'work-auto-claim',
            jsonb_build_object('subscription_id', x.id), ARRAY[m.id], ARRAY[m.attempts],
            CASE WHEN m.correlation_id IS NOT NULL THEN ARRAY[m.correlation_id] END);
    RETURN jsonb_build_object('message', work_message_doc(m.id) - 'claim_token', 'replayed', false);
END $$;
