-- The work surface, part 2: routing rules, message schemas, and the publish that applies both.
--
-- Routing runs inside the publish call: the rules choose the message's queue (and changes) before
-- the one INSERT, so a message is never visible in two places or in none. A publish is
-- `work_publish_routed`, which evaluates the scope's enabled `message_published` rules and then
-- calls `work_publish` (0013, unchanged) for the queue they chose.
-- Schemas are validated by the caller (JSON Schema needs a validator library); the publish only
-- checks that the caller validated against the schema the queue names now (SCAIQUEUE_SCHEMA_STALE
-- otherwise, which the caller answers by loading that schema and trying again).

-- ---- message schemas ----------------------------------------------------------------------------

CREATE TABLE work_schemas (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     text NOT NULL,
    schema      jsonb NOT NULL,
    deprecated  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, name, version)
);

-- The schema a queue's message bodies must satisfy (none: any body).
ALTER TABLE work_queues ADD COLUMN schema_id uuid REFERENCES work_schemas(id);

-- ---- routing rules ------------------------------------------------------------------------------

CREATE TABLE work_routing_rules (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id     uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name         text NOT NULL,
    description  text,
    priority     int NOT NULL DEFAULT 100,
    enabled      boolean NOT NULL DEFAULT true,
    trigger      text NOT NULL DEFAULT 'message_published',
    conditions   jsonb,                      -- NULL: every message
    action       jsonb NOT NULL,             -- {"type": route|copy|transform|escalate|archive, ...}
    source_queue bigint REFERENCES work_queues(id) ON DELETE CASCADE,  -- NULL: any queue of the scope
    target_queue bigint REFERENCES work_queues(id) ON DELETE CASCADE,  -- route and copy
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_routing_rules_order ON work_routing_rules (scope_id, trigger, priority, created_at);

-- What a rule's conditions see of a message.
CREATE FUNCTION work_rule_subject(p_msg jsonb, p_queue text) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
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
-- {"field": "labels.tier", "op": eq|ne|in|not_in|gt|gte|lt|lte|exists|not_exists, "value": ...}.
-- NULL or {} matches everything. Comparisons compare numbers as numbers (a label holding a number
-- compared with a number too) and strings as strings; anything else does not match.
CREATE FUNCTION work_cond(c jsonb, m jsonb) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
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
CREATE FUNCTION work_rule_apply(p_action jsonb, p_msg jsonb) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
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

-- The first enabled rule of a trigger that matches a message in a queue: by priority, then age.
CREATE FUNCTION work_first_rule(p_scope uuid, p_trigger text, p_queue work_queues, p_msg jsonb)
RETURNS work_routing_rules LANGUAGE sql STABLE AS $$
    SELECT r.* FROM work_routing_rules r
    WHERE r.scope_id = p_scope AND r.trigger = p_trigger AND r.enabled
      AND (r.source_queue IS NULL OR r.source_queue = p_queue.id)
      AND work_cond(r.conditions, work_rule_subject(p_msg, p_queue.slug))
    ORDER BY r.priority, r.created_at, r.id
    LIMIT 1
$$;

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
        r := work_first_rule(s.id, 'message_published', q, v_msg);
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
    IF v_copy_to IS NOT NULL THEN  -- a child in the target queue, routed in its turn
        SELECT * INTO c FROM work_queues WHERE id = v_copy_to;
        PERFORM work_route(p_tenant, s, c,
                           (v_msg - 'idempotency_key') || jsonb_build_object('parent_id', v_id, 'causation_id', v_id),
                           p_source, v_hops + 1);
    END IF;
    RETURN v_answer;
END $$;

-- A publish as the API makes it: routing applied, and the schema the caller validated the body
-- against (p_schema, NULL for none) checked to be the one the queue names now.
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
    IF NOT EXISTS (SELECT 1 FROM work_routing_rules WHERE scope_id = s.id AND trigger = 'message_published'
                   AND enabled) THEN
        RETURN work_publish(p_tenant, p_scope, p_queue, p_msg, p_source);
    END IF;
    RETURN work_route(p_tenant, s, q, p_msg, p_source, 0);
END $$;

-- ---- HITL patterns ------------------------------------------------------------------------------

-- Reusable human-in-the-loop specs with `{{key}}` placeholders, expanded by the caller (plain text
-- substitution, never evaluated). A pattern never changes once registered: register a new version.
CREATE TABLE work_hitl_patterns (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    name        text NOT NULL,
    version     text NOT NULL,
    spec        jsonb NOT NULL,
    parameters  jsonb NOT NULL DEFAULT '[]',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, name, version)
);

-- What is wrong with a reviewer's response to a HITL spec, as [{field, message}] (empty: fits).
-- The spec's `decision` {field, options} needs response[field] to be one of the options; each of
-- its `input` [{field, kind, required}] needs a value of its kind (text, number, boolean; any
-- other kind takes anything) when required or given.
CREATE FUNCTION work_hitl_errors(p_spec jsonb, p_response jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(e.err ORDER BY e.n), '[]') FROM (
        SELECT 0 AS n, jsonb_build_object('field', 'response.' || (p_spec#>>'{decision,field}'), 'message',
                    CASE WHEN jsonb_typeof(p_spec#>'{decision,options}') = 'array'
                         THEN 'must be one of ' || (p_spec#>'{decision,options}')::text ELSE 'required' END) AS err
        FROM (SELECT nullif(p_response->(p_spec#>>'{decision,field}'), 'null'::jsonb) AS v) d
        WHERE jsonb_typeof(p_spec->'decision') = 'object' AND p_spec#>>'{decision,field}' IS NOT NULL
          AND NOT CASE WHEN jsonb_typeof(p_spec#>'{decision,options}') = 'array'
                       THEN coalesce(jsonb_typeof(d.v) = 'string'
                                     AND p_spec#>'{decision,options}' @> jsonb_build_array(d.v), false)
                       ELSE d.v IS NOT NULL END
        UNION ALL
        SELECT i.n, jsonb_build_object('field', 'response.' || (i.f->>'field'), 'message',
                    CASE WHEN v IS NULL THEN 'required' ELSE 'must be ' || (i.f->>'kind') END)
        FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_spec->'input') = 'array' THEN p_spec->'input'
                                       ELSE '[]' END) WITH ORDINALITY AS i(f, n)
        CROSS JOIN LATERAL (SELECT nullif(p_response->(i.f->>'field'), 'null'::jsonb) AS v) x
        WHERE (v IS NULL AND coalesce((i.f->>'required')::boolean, false))
           OR (v IS NOT NULL AND (i.f->>'kind') IN ('text', 'number', 'boolean')
               AND jsonb_typeof(v) <> CASE i.f->>'kind' WHEN 'text' THEN 'string' ELSE i.f->>'kind' END)
    ) e
$$;

-- Complete a message as work_finish does, once the response fits the message's HITL spec: a
-- refusal is VALIDATION_ERROR whose HINT holds the [{field, message}] list. A message without a
-- spec (or whose spec has neither decision nor input) completes with any response.
CREATE FUNCTION work_complete_checked(p_tenant uuid, p_scope uuid, p_item jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_spec jsonb;
    v_errors jsonb;
BEGIN
    SELECT m.hitl_spec INTO v_spec FROM work_messages m
    WHERE m.id = (p_item->>'id')::uuid AND m.scope_id = p_scope AND m.tenant_id = p_tenant AND m.state = 'claimed';
    IF v_spec IS NOT NULL AND (v_spec ? 'decision' OR v_spec ? 'input') THEN
        v_errors := work_hitl_errors(v_spec, coalesce(p_item->'response', '{}'));
        IF jsonb_array_length(v_errors) > 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'PB422', DETAIL = 'VALIDATION_ERROR', HINT = v_errors::text,
                MESSAGE = 'The response does not fit the message''s HITL spec.';
        END IF;
    END IF;
    RETURN work_finish(p_tenant, p_scope, 'complete', p_item);
END $$;
