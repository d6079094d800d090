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
    IF q.consumer_mode <> 'broadcast' OR (p_answer->>'replayed')::boolean THEN
        RETURN p_answer;
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

-- Active auto-claimed pull subscriptions with work to assign: a pending delivery that is visible
-- while the subscription has room, or a claim that ran out. Bounded by p_limit per sweep.
CREATE FUNCTION work_auto_claim_due(p_limit int)
RETURNS TABLE (subscription_id uuid, tenant_id uuid, scope_id uuid, max_in_flight int)
LANGUAGE sql STABLE AS $$
    SELECT x.id, x.tenant_id, x.scope_id, x.max_in_flight
    FROM work_subscriptions x
    WHERE x.auto_claim AND x.delivery_mode = 'pull' AND x.state = 'active'
      AND (EXISTS (SELECT 1 FROM work_deliveries d
                   WHERE d.subscription_id = x.id AND d.state = 'claimed' AND d.visible_at <= clock_timestamp())
           OR (EXISTS (SELECT 1 FROM work_deliveries d
                       WHERE d.subscription_id = x.id AND d.state = 'pending' AND d.visible_at <= clock_timestamp())
               AND (SELECT count(*) FROM work_deliveries d
                    WHERE d.subscription_id = x.id AND d.state = 'claimed') < x.max_in_flight))
    ORDER BY x.id
    LIMIT p_limit
$$;

CREATE INDEX work_subscriptions_auto_claim ON work_subscriptions (id)
    WHERE auto_claim AND delivery_mode = 'pull' AND state = 'active';
