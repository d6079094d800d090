-- Broadcast messages being delivered are live (`ended_at` is null): the expiry agent finds those
-- with a ttl or deadline through work_messages_expiry. No index names `state`, so a claim stays an
-- in-place (HOT) update.

-- A delivery as the subscription routes answer it: the message's document with the delivery's
-- own state, attempts, claim and response (the message's own state is `message_state`).
CREATE OR REPLACE VIEW work_delivery_docs AS
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
--
-- Subscriptions with `auto_claim`: a pull subscriber's deliveries are claimed for it as they
-- arrive (assigned work, like a reviewer's inbox), instead of waiting for it to claim them.
--
-- The fan-out of a publish writes an auto-claimed subscription's delivery already `claimed`
-- (attempt 1, a claim token, the message's visibility timeout) while the subscription holds fewer
-- than `max_in_flight`; the rest wait `pending` and the `work-auto-claim` agent assigns them as
-- claims end, along with those whose claim ran out. Auto-claimed subscriptions are locked by the
-- fan-out, so concurrent publishes cannot assign more than `max_in_flight`. A push subscription is
-- always claimed by its delivery agent; auto_claim changes nothing there.
CREATE OR REPLACE FUNCTION work_fan_out(q work_queues, p_answer jsonb, p_msg jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
    v_now timestamptz := clock_timestamp();
    n int;
BEGIN
    IF (p_answer->>'replayed')::boolean THEN
        RETURN p_answer;
    ELSIF q.consumer_mode <> 'broadcast' THEN  -- a competing queue: an auto-claimed subscription may take it
        IF NOT EXISTS (SELECT 1 FROM work_subscriptions x WHERE x.queue_id = q.id AND x.state = 'active'
                       AND x.auto_claim AND x.delivery_mode = 'pull') THEN
            RETURN p_answer;
        END IF;
        RETURN work_assign_published(q, p_answer);
    END IF;
    v_id := (p_answer#>>'{message,id}')::uuid;
    PERFORM 1 FROM work_subscriptions x
    WHERE x.queue_id = q.id AND x.state = 'active' AND x.auto_claim AND x.delivery_mode = 'pull'
    ORDER BY x.id FOR UPDATE;
    INSERT INTO work_deliveries (subscription_id, message_id, seq, state, visible_at, attempts, claim_token,
                                 claimed_at)
    SELECT x.id, m.id, m.seq,
           CASE WHEN a.assign THEN 'claimed' ELSE 'pending' END,
           CASE WHEN a.assign THEN v_now + m.visibility_timeout_s * interval '1 second' ELSE m.visible_at END,
           CASE WHEN a.assign THEN 1 ELSE 0 END,
           CASE WHEN a.assign THEN gen_random_uuid() END,
           CASE WHEN a.assign THEN v_now END
    FROM work_messages m, work_subscriptions x,
         LATERAL (SELECT CASE WHEN x.auto_claim AND x.delivery_mode = 'pull' AND m.visible_at <= v_now
                              AND (m.expires_at IS NULL OR m.expires_at > v_now)
                         THEN (SELECT count(*) FROM work_deliveries d
                               WHERE d.subscription_id = x.id AND d.state = 'claimed') < x.max_in_flight
                         ELSE false END AS assign) a
    WHERE m.id = v_id AND m.state = 'pending' AND x.queue_id = q.id AND x.state = 'active'
      AND work_cond(x.filter, work_rule_subject(p_msg, q.slug));
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n = 0 THEN
        RETURN p_answer;
    END IF;
    UPDATE work_messages SET state = 'delivering', updated_at = v_now WHERE id = v_id;
    PERFORM work_count(q.id, -1, 0, 0, 0, 0);
    RETURN jsonb_build_object('message', work_message_doc(v_id), 'replayed', false);
END $$;

-- ---- deliveries ---------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION work_subscription_of(p_tenant uuid, p_scope uuid, p_sub uuid, p_lock boolean)
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
CREATE OR REPLACE FUNCTION work_settle(p_ids uuid[]) RETURNS void LANGUAGE plpgsql AS $$
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
CREATE OR REPLACE FUNCTION work_expire_deliveries(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
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
CREATE OR REPLACE FUNCTION work_delivery_recover(p_sub uuid) RETURNS int LANGUAGE plpgsql AS $$
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
-- With the actor: each delivery claimed journals `scaiqueue.message.claimed` with its
-- subscription in the payload.
CREATE OR REPLACE FUNCTION work_delivery_claim(p_tenant uuid, p_scope uuid, p_sub uuid, p_n int, p_vt int,
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
    ), journal AS (  -- one row (a broadcast queue's deliveries move no counter)
        INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, payload,
                                  message_ids, attempts, correlation_ids)
        SELECT s.id, s.tenant_id, x.queue_id, 'scaiqueue.message.claimed', p_actor_type, p_actor_id,
               jsonb_build_object('subscription_id', x.id), array_agg(c.message_id ORDER BY c.seq),
               work_journal_compact(array_agg(c.attempts ORDER BY c.seq)),
               work_journal_compact(array_agg(c.correlation_id ORDER BY c.seq))
        FROM claimed c HAVING count(*) > 0
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
-- Journalled with the actor: completed (emitted, with the response and the subscription), failed,
-- released, and dead_lettered (emitted) after the last attempt.
CREATE OR REPLACE FUNCTION work_delivery_finish(p_tenant uuid, p_scope uuid, p_sub uuid, p_action text, p_item jsonb,
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
        IF m.hitl_spec IS NOT NULL AND work_hitl_asks(m.hitl_spec) THEN
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

-- {message_id: bool}: which of these messages the subscription has completed.
CREATE OR REPLACE FUNCTION work_delivery_processed(p_tenant uuid, p_sub uuid, p_ids uuid[]) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE x work_subscriptions;
BEGIN
    x := work_subscription_of(p_tenant, NULL, p_sub, false);
    RETURN (SELECT coalesce(jsonb_object_agg(u.id, coalesce(d.state = 'completed', false)), '{}')
            FROM unnest(p_ids) u(id)
            LEFT JOIN work_deliveries d ON d.subscription_id = x.id AND d.message_id = u.id);
END $$;

-- A subscription of a competing queue has work to take when the queue has pending messages and it
-- holds fewer than max_in_flight (whether its filter lets any through, its claim finds out).
CREATE OR REPLACE FUNCTION work_competing_due(x work_subscriptions) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT q.consumer_mode = 'competing'
           AND (SELECT coalesce(sum(d.pending), 0) FROM work_queue_depths(ARRAY[q.id]) d) > 0
           AND work_subscription_held(x.id) < x.max_in_flight
    FROM work_queues q WHERE q.id = x.queue_id
$$;

-- Active push subscriptions with deliveries to post now (pending and visible, or claims whose
-- time ran out): what the push agent works through, oldest subscription first.
CREATE OR REPLACE FUNCTION work_push_due(p_limit int)
RETURNS TABLE (id uuid, tenant_id uuid, scope_id uuid, push_url text, push_secret text, max_in_flight int)
LANGUAGE sql STABLE AS $$
    -- Taken by turns over the tenants (each one's oldest, then each one's second, ...): one tenant's
    -- many subscriptions, always due, never fill a run's p_limit and leave another's out for good.
    SELECT due.id, due.tenant_id, due.scope_id, due.push_url, due.push_secret, due.max_in_flight
    FROM (SELECT x.id, x.tenant_id, x.scope_id, x.push_url, x.push_secret, x.max_in_flight, x.created_at,
                 row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.created_at, x.id) AS turn
          FROM work_subscriptions x
          WHERE x.delivery_mode = 'push' AND x.state = 'active'
            AND (EXISTS (SELECT 1 FROM work_deliveries d WHERE d.subscription_id = x.id AND d.state = 'pending'
                         AND d.visible_at <= clock_timestamp())
                 OR EXISTS (SELECT 1 FROM work_deliveries d WHERE d.subscription_id = x.id AND d.state = 'claimed'
                            AND d.visible_at <= clock_timestamp())
                 OR work_competing_due(x))) due
    ORDER BY due.turn, due.created_at, due.id LIMIT p_limit
$$;

-- Active auto-claimed pull subscriptions with work to assign: a pending delivery that is visible
-- while the subscription has room, or a claim that ran out. Bounded by p_limit per sweep.
CREATE OR REPLACE FUNCTION work_auto_claim_due(p_limit int)
RETURNS TABLE (subscription_id uuid, tenant_id uuid, scope_id uuid, max_in_flight int)
LANGUAGE sql STABLE AS $$
    -- By turns over the tenants, as work_push_due: one tenant's many due subscriptions never fill a
    -- run's p_limit and leave another's unassigned for good.
    SELECT due.id, due.tenant_id, due.scope_id, due.max_in_flight
    FROM (SELECT x.id, x.tenant_id, x.scope_id, x.max_in_flight,
                 row_number() OVER (PARTITION BY x.tenant_id ORDER BY x.id) AS turn
          FROM work_subscriptions x
          WHERE x.auto_claim AND x.delivery_mode = 'pull' AND x.state = 'active'
            AND (EXISTS (SELECT 1 FROM work_deliveries d
                         WHERE d.subscription_id = x.id AND d.state = 'claimed' AND d.visible_at <= clock_timestamp())
                 OR (EXISTS (SELECT 1 FROM work_deliveries d
                             WHERE d.subscription_id = x.id AND d.state = 'pending' AND d.visible_at <= clock_timestamp())
                     AND (SELECT count(*) FROM work_deliveries d
                          WHERE d.subscription_id = x.id AND d.state = 'claimed') < x.max_in_flight)
                 OR work_competing_due(x))) due
    ORDER BY due.turn, due.id
    LIMIT p_limit
$$;
