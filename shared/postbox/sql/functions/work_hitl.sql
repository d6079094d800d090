-- What is wrong with a reviewer's response to a HITL spec, as [{field, message}] (empty: fits).
-- The spec's `decision` {field, options} needs response[field] to be one of the options; each of
-- its `input` [{field, kind, required}] needs a value of its kind (text, number, boolean; any
-- other kind takes anything) when required or given.
CREATE OR REPLACE FUNCTION work_hitl_errors(p_spec jsonb, p_response jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
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
