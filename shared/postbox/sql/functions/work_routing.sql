-- What a rule's conditions see of a message.
CREATE OR REPLACE FUNCTION work_rule_subject(p_msg jsonb, p_queue text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object(
        'type', coalesce(p_msg->>'type', 'task'),
        'labels', coalesce(p_msg->'labels', '{}'),
        'body', p_msg->'body',
        'priority', jsonb_build_object('tier', coalesce(p_msg#>>'{priority,tier}', 'normal'),
                                       'score', coalesce(p_msg#>'{priority,score}', '500')),
        'content_type', coalesce(p_msg->>'content_type', 'application/json'),
        'correlation_id', p_msg->'correlation_id',
        'queue', p_queue)
$$;

-- A condition against a subject: {"all": [...]}, {"any": [...]}, {"not": c}, or
-- {"field": "labels.tier", "op": eq|ne|in|not_in|gt|gte|lt|lte|contains|exists|not_exists, "value": ...}.
-- NULL or {} matches everything. Comparisons compare numbers as numbers (a label holding a number
-- compared with a number too) and strings as strings; anything else does not match. `contains`:
-- a string holds the value as a substring, an array holds it as an element, an object as a key.
CREATE OR REPLACE FUNCTION work_cond(c jsonb, m jsonb) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v jsonb;
    w jsonb := c->'value';
    op text := c->>'op';
    a numeric;
    b numeric;
BEGIN
    IF c IS NULL OR c = 'null'::jsonb OR c = '{}'::jsonb THEN
        RETURN true;
    ELSIF c ? 'all' THEN
        RETURN NOT EXISTS (SELECT 1 FROM jsonb_array_elements(c->'all') e WHERE NOT work_cond(e, m));
    ELSIF c ? 'any' THEN
        RETURN EXISTS (SELECT 1 FROM jsonb_array_elements(c->'any') e WHERE work_cond(e, m));
    ELSIF c ? 'not' THEN
        RETURN NOT work_cond(c->'not', m);
    END IF;
    v := m #> string_to_array(c->>'field', '.');
    IF v = 'null'::jsonb THEN
        v := NULL;
    END IF;
    IF op = 'exists' THEN RETURN v IS NOT NULL; END IF;
    IF op = 'not_exists' THEN RETURN v IS NULL; END IF;
    IF op = 'eq' THEN RETURN coalesce(v = w, false); END IF;
    IF op = 'ne' THEN RETURN v IS NULL OR v <> w; END IF;
    IF op = 'in' THEN
        RETURN v IS NOT NULL AND EXISTS (SELECT 1 FROM jsonb_array_elements(w) e WHERE e = v);
    END IF;
    IF op = 'not_in' THEN
        RETURN v IS NULL OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(w) e WHERE e = v);
    END IF;
    IF op = 'contains' THEN
        RETURN CASE jsonb_typeof(v)
                   WHEN 'string' THEN jsonb_typeof(w) = 'string' AND strpos(v #>> '{}', w #>> '{}') > 0
                   WHEN 'array' THEN EXISTS (SELECT 1 FROM jsonb_array_elements(v) e WHERE e = w)
                   WHEN 'object' THEN jsonb_typeof(w) = 'string' AND v ? (w #>> '{}')
                   ELSE false END;
    END IF;
    IF v IS NULL THEN RETURN false; END IF;
    IF jsonb_typeof(w) = 'number' AND (jsonb_typeof(v) = 'number'
                                       OR (jsonb_typeof(v) = 'string' AND v #>> '{}' ~ '^-?[0-9]+(\.[0-9]+)?$')) THEN
        a := (v #>> '{}')::numeric;
        b := (w #>> '{}')::numeric;
    ELSIF jsonb_typeof(w) = 'string' AND jsonb_typeof(v) = 'string' THEN
        RETURN CASE op WHEN 'gt' THEN v #>> '{}' > w #>> '{}' WHEN 'gte' THEN v #>> '{}' >= w #>> '{}'
                       WHEN 'lt' THEN v #>> '{}' < w #>> '{}' WHEN 'lte' THEN v #>> '{}' <= w #>> '{}'
                       ELSE false END;
    ELSE
        RETURN false;
    END IF;
    RETURN CASE op WHEN 'gt' THEN a > b WHEN 'gte' THEN a >= b WHEN 'lt' THEN a < b WHEN 'lte' THEN a <= b
                   ELSE false END;
END $$;

-- A transform or escalate action applied to the message fields of a publish.
CREATE OR REPLACE FUNCTION work_rule_apply(p_action jsonb, p_msg jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_msg jsonb := p_msg;
    v_tiers text[] := ARRAY['critical', 'high', 'normal', 'low', 'background'];
    v_now int := coalesce(array_position(v_tiers, p_msg#>>'{priority,tier}'), 3);
    v_to int;
BEGIN
    IF p_action->>'type' = 'transform' THEN
        v_msg := jsonb_set(v_msg, '{labels}',
                           (coalesce(v_msg->'labels', '{}') || coalesce(p_action->'set_labels', '{}'))
                           - coalesce(ARRAY(SELECT jsonb_array_elements_text(p_action->'remove_labels')), '{}'));
        IF p_action ? 'message_type' THEN
            v_msg := jsonb_set(v_msg, '{type}', p_action->'message_type');
        END IF;
        IF p_action ? 'priority' THEN
            v_msg := jsonb_set(v_msg, '{priority}',
                               jsonb_build_object('tier', v_tiers[v_now], 'score', coalesce(v_msg#>'{priority,score}', '500'))
                               || (p_action->'priority'));
        END IF;
    ELSIF p_action->>'type' = 'escalate' THEN
        v_to := coalesce(array_position(v_tiers, p_action->>'tier'), greatest(v_now - 1, 1));
        v_msg := jsonb_set(v_msg, '{priority}',
                           jsonb_build_object('tier', v_tiers[least(v_now, v_to)],
                                              'score', coalesce(v_msg#>'{priority,score}', '500')));
    END IF;
    RETURN v_msg;
END $$;

-- The first enabled rule of a trigger that matches a message (its subject, work_rule_subject)
-- arriving in a queue: by priority, then age.
CREATE OR REPLACE FUNCTION work_first_rule(p_scope uuid, p_trigger text, p_queue bigint, p_subject jsonb)
RETURNS work_routing_rules LANGUAGE sql STABLE AS $$
    SELECT r.* FROM work_routing_rules r
    WHERE r.scope_id = p_scope AND r.trigger = p_trigger AND r.enabled
      AND (r.source_queue IS NULL OR r.source_queue = p_queue)
      AND work_cond(r.conditions, p_subject)
    ORDER BY r.priority, r.created_at, r.id
    LIMIT 1
$$;

-- A publish into a queue once its scope, queue and schema are checked: routing applied (when the
-- scope has enabled rules) and fanned out to subscriptions on a broadcast queue.
CREATE OR REPLACE FUNCTION work_publish_into(p_tenant uuid, s work_scopes, q work_queues, p_msg jsonb, p_source text)
RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_routing_rules WHERE scope_id = s.id AND trigger = 'message_published'
                   AND enabled) THEN
        RETURN work_fan_out(q, work_publish(p_tenant, s.id, q.queue_id, p_msg, p_source), p_msg);
    END IF;
    RETURN work_route(p_tenant, s, q, p_msg, p_source, 0);
END $$;


-- Route one publish from queue p_queue after p_hops hops: rules are applied until one ends the
-- walk (transform, escalate, archive, copy) or none matches; route moves on to the target queue
-- and its rules. A 6th route or copy is not applied: the message stays where it is, with the
-- label `routing.stopped` saying why. Answers work_publish's {message, replayed}.
-- Route one publish, also across scopes: a route or copy whose target queue is in
-- another scope is applied only when a trust lets this scope send this message type into that
-- queue (work_trust_of, checked again at every routing, so a revoked trust stops it at once);
-- otherwise the message stays where it is with the label `routing.refused` saying why. Past the
-- border the target scope's rules apply. Under a trust with identity_mode `scope` the message that
-- lands there names the sending scope as its source (`source_type` scope, `source_id` its id).
CREATE OR REPLACE FUNCTION work_route(p_tenant uuid, s work_scopes, p_queue work_queues, p_msg jsonb, p_source text,
                                      p_hops int)
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
    t work_queues;
    v_mode text;
    v_as_scope uuid;
    v_copy_scope work_scopes;
    v_copy_as uuid;
    v_child jsonb;
BEGIN
    LOOP
        r := work_first_rule(s.id, 'message_published', q.id, work_rule_subject(v_msg, q.slug));
        EXIT WHEN r.id IS NULL;
        IF r.action->>'type' IN ('route', 'copy') AND v_hops >= 5 THEN
            v_msg := jsonb_set(v_msg, '{labels}', coalesce(v_msg->'labels', '{}') || jsonb_build_object(
                'routing.stopped', format('loop breaker: %s hops; rule %s not applied', v_hops, r.name)));
            EXIT;
        END IF;
        IF r.action->>'type' IN ('route', 'copy') THEN
            SELECT * INTO t FROM work_queues WHERE id = r.target_queue;
            IF t.scope_id <> s.id THEN
                v_mode := work_trust_of(s.id, t.scope_id, t.queue_id, coalesce(v_msg->>'type', 'task'));
                IF v_mode IS NULL THEN
                    v_msg := jsonb_set(v_msg, '{labels}', coalesce(v_msg->'labels', '{}') || jsonb_build_object(
                        'routing.refused', format('rule %s: scope %s is not trusted to send this message into queue %s',
                                                  r.name, s.id, t.queue_id)));
                    EXIT;
                END IF;
            END IF;
        END IF;
        CASE r.action->>'type'
            WHEN 'route' THEN
                IF t.scope_id <> s.id THEN
                    IF v_mode = 'scope' THEN
                        v_as_scope := s.id;
                    END IF;
                    SELECT * INTO s FROM work_scopes WHERE id = t.scope_id;
                END IF;
                q := t;
                v_hops := v_hops + 1;
            WHEN 'copy' THEN
                v_copy_to := r.target_queue;
                IF t.scope_id <> s.id THEN
                    SELECT * INTO v_copy_scope FROM work_scopes WHERE id = t.scope_id;
                    IF v_mode = 'scope' THEN
                        v_copy_as := s.id;
                    END IF;
                ELSE
                    v_copy_scope := s;
                END IF;
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
    IF v_as_scope IS NOT NULL THEN
        UPDATE work_messages SET source_type = 'scope', source_id = v_as_scope::text WHERE id = v_id;
        v_answer := jsonb_build_object('message', work_message_doc(v_id), 'replayed', false);
    END IF;
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
        v_child := work_route(p_tenant, v_copy_scope, c,
                              (v_msg - 'idempotency_key') || jsonb_build_object('parent_id', v_id, 'causation_id', v_id),
                              p_source, v_hops + 1);
        IF v_copy_as IS NOT NULL THEN
            UPDATE work_messages SET source_type = 'scope', source_id = v_copy_as::text
            WHERE id = (v_child#>>'{message,id}')::uuid;
        END IF;
    END IF;
    RETURN v_answer;
END $$;

-- The queue a publish goes to, when its schema is the one the caller checked the bodies against;
-- else SCAIQUEUE_SCHEMA_STALE naming the queue's schema (the caller learns it and checks again).
CREATE OR REPLACE FUNCTION work_queue_to_publish(p_scope uuid, p_queue uuid, p_schema uuid) RETURNS work_queues
LANGUAGE plpgsql AS $$
DECLARE
    q work_queues;
BEGIN
    q := work_queue_of(p_scope, p_queue);
    IF q.schema_id IS DISTINCT FROM p_schema THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'SCAIQUEUE_SCHEMA_STALE',
            MESSAGE = coalesce(q.schema_id::text, '');
    END IF;
    RETURN q;
END $$;

-- A publish as the API makes it: a chunk recorded in its stream, routing applied, fanned out to
-- subscriptions on a broadcast queue, and the schema the caller validated the body against
-- (p_schema, NULL for none) checked to be the one the queue names now (SCAIQUEUE_SCHEMA_STALE
-- otherwise, its message the schema id, which the caller answers by checking the body against
-- that schema and trying again).
CREATE OR REPLACE FUNCTION work_publish_routed(p_tenant uuid, p_scope uuid, p_queue uuid, p_msg jsonb, p_source text,
                                    p_schema uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_to_publish(p_scope, p_queue, p_schema);
    IF p_msg ? 'stream' THEN
        RETURN work_stream_chunk(p_tenant, s, q, p_msg, p_source);
    END IF;
    RETURN work_publish_into(p_tenant, s, q, p_msg, p_source);
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
-- message's ancestors (its parent_id chain, within its tenant: a parent_id naming another tenant's
-- message ends the chain there): a message with 5 already is not routed again, and the
-- journal records `scaiqueue.routing.stopped` instead. A child that cannot be published (scope not
-- active, queue paused or full) is not, recorded the same way, and the moment itself still happens.
CREATE OR REPLACE FUNCTION work_route_lifecycle(s work_scopes, p_trigger text, m work_messages, p_hops int)
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
    WHILE v_parent IS NOT NULL AND v_hops < 5 LOOP  -- the message's ancestors in its tenant, up to 5
        v_hops := v_hops + 1;
        v_parent := (SELECT x.parent_id FROM work_messages x
                     WHERE v_parent ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                       AND x.id = v_parent::uuid AND x.tenant_id = s.tenant_id);
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
        PERFORM work_journal_add(s, 'scaiqueue.routing.stopped', m, 'routing_rule', r.id::text, false,
                                 jsonb_build_object('trigger', p_trigger, 'rule', r.name, 'reason', v_why));
    END IF;
END $$;
