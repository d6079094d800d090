-- The parts of a HITL spec a reviewer's response must fit, in order, whichever way the spec is
-- written: keyed (`decision` {field, options}, `input` [{field, kind, required}]) or as
-- `sections` ([{type: context|decision|input, ...}], each decision and input section one part).
-- kind is 'decision' or 'input'; part is the object naming the field.
CREATE OR REPLACE FUNCTION work_hitl_parts(p_spec jsonb) RETURNS TABLE (n bigint, kind text, part jsonb)
LANGUAGE sql IMMUTABLE AS $$
    SELECT 0, 'decision', p_spec->'decision' WHERE jsonb_typeof(p_spec->'decision') = 'object'
    UNION ALL
    SELECT i.n, 'input', i.f
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_spec->'input') = 'array' THEN p_spec->'input'
                                   ELSE '[]' END) WITH ORDINALITY AS i(f, n)
    UNION ALL
    SELECT 1000000 + x.n, x.f->>'type', x.f
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_spec->'sections') = 'array' THEN p_spec->'sections'
                                   ELSE '[]' END) WITH ORDINALITY AS x(f, n)
    WHERE jsonb_typeof(x.f) = 'object' AND x.f->>'type' IN ('decision', 'input')
$$;

-- Whether a spec asks the reviewer for anything (a decision or an input, keyed or as sections): a
-- message whose spec does not completes with any response, without its errors being computed.
CREATE OR REPLACE FUNCTION work_hitl_asks(p_spec jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_spec ?| ARRAY['decision', 'input', 'sections'], false)
$$;

-- What is wrong with a reviewer's response to a HITL spec, as [{field, message}] (empty: fits).
-- A decision {field, options} needs response[field] to be one of the options (present, without
-- options); an input {field, kind, required} needs a value of its kind (text, number, boolean;
-- any other kind, or none, takes anything) when required (`true`) or given. One pass over the
-- parts: a pass per kind costs about twice the time.
CREATE OR REPLACE FUNCTION work_hitl_errors(p_spec jsonb, p_response jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object('field', 'response.' || (p.part->>'field'), 'message',
                                  CASE WHEN p.kind = 'input' AND x.v IS NOT NULL THEN 'must be ' || x.kind
                                       WHEN p.kind = 'decision' AND jsonb_typeof(p.part->'options') = 'array'
                                       THEN 'must be one of ' || (p.part->'options')::text
                                       ELSE 'required' END) ORDER BY p.n), '[]')
    FROM work_hitl_parts(p_spec) p
    CROSS JOIN LATERAL (SELECT nullif(p_response->(p.part->>'field'), 'null'::jsonb) AS v, p.part->>'kind' AS kind) x
    WHERE p.part->>'field' IS NOT NULL
      AND CASE WHEN p.kind = 'decision'
               THEN NOT CASE WHEN jsonb_typeof(p.part->'options') = 'array'
                             THEN coalesce(jsonb_typeof(x.v) = 'string' AND p.part->'options' @> jsonb_build_array(x.v), false)
                             ELSE x.v IS NOT NULL END
               ELSE (x.v IS NULL AND p.part->'required' = 'true'::jsonb)
                    OR (x.v IS NOT NULL AND x.kind IN ('text', 'number', 'boolean')
                        AND jsonb_typeof(x.v) <> CASE x.kind WHEN 'text' THEN 'string' ELSE x.kind END) END
$$;
