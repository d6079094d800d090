-- The work surface, part 2: the registries a publish consults. Message schemas (a queue names the
-- one its bodies must satisfy), routing rules with their condition language, and HITL patterns
-- with the check of a reviewer's response at complete. The publish path that applies rules and
-- fans out to subscriptions is in 0019.
-- Schemas are validated by the caller (JSON Schema needs a validator library); the publish only
-- checks that the caller validated against the schema the queue names now.

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

-- The first enabled rule of a trigger that matches a message (its subject, work_rule_subject)
-- arriving in a queue: by priority, then age.
CREATE FUNCTION work_first_rule(p_scope uuid, p_trigger text, p_queue bigint, p_subject jsonb)
RETURNS work_routing_rules LANGUAGE sql STABLE AS $$
    SELECT r.* FROM work_routing_rules r
    WHERE r.scope_id = p_scope AND r.trigger = p_trigger AND r.enabled
      AND (r.source_queue IS NULL OR r.source_queue = p_queue)
      AND work_cond(r.conditions, p_subject)
    ORDER BY r.priority, r.created_at, r.id
    LIMIT 1
$$;

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

-- complete-batch with the same check: items whose response does not fit their message's HITL
-- spec answer VALIDATION_ERROR (with the fields in `details`) and change nothing; the others go
-- through work_finish_batch, their answers kept in the order given.
CREATE FUNCTION work_complete_batch_checked(p_tenant uuid, p_scope uuid, p_items jsonb, p_ids uuid[])
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_bad jsonb;   -- {position: [{field, message}]}
    v_keep jsonb;
    v_keep_ids uuid[];
    v_done jsonb := '[]';
BEGIN
    SELECT jsonb_object_agg(b.n::text, b.errs) INTO v_bad FROM (
        SELECT i.n, work_hitl_errors(m.hitl_spec, coalesce(i.e->'response', '{}')) AS errs
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n)
        JOIN work_messages m ON m.id = p_ids[i.n] AND m.scope_id = p_scope AND m.tenant_id = p_tenant
                            AND m.state = 'claimed'
        WHERE m.hitl_spec IS NOT NULL AND (m.hitl_spec ? 'decision' OR m.hitl_spec ? 'input')
    ) b WHERE jsonb_array_length(b.errs) > 0;
    IF v_bad IS NULL THEN
        RETURN work_finish_batch(p_tenant, p_scope, 'complete', p_items, p_ids);
    END IF;
    SELECT coalesce(jsonb_agg(i.e ORDER BY i.n), '[]'), array_agg(p_ids[i.n] ORDER BY i.n) INTO v_keep, v_keep_ids
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n) WHERE NOT v_bad ? i.n::text;
    IF jsonb_array_length(v_keep) > 0 THEN
        v_done := work_finish_batch(p_tenant, p_scope, 'complete', v_keep, v_keep_ids);
    END IF;
    RETURN (SELECT jsonb_agg(CASE WHEN v_bad ? t.n::text
                THEN jsonb_build_object('id', t.e->'id', 'ok', false, 'error', jsonb_build_object(
                     'code', 'VALIDATION_ERROR', 'message', 'The response does not fit the message''s HITL spec.',
                     'details', v_bad->(t.n::text)))
                ELSE v_done->(t.k::int - 1) END ORDER BY t.n)
            FROM (SELECT i.n, i.e, count(*) FILTER (WHERE NOT v_bad ? i.n::text) OVER (ORDER BY i.n) AS k
                  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i(e, n)) t);
END $$;
