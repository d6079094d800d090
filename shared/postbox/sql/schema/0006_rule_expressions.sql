-- A routing rule's conditions as the request wrote them (an expression, or a list of expressions
-- and comparisons), kept beside the JSON form the evaluator reads so the rule reads back as
-- written. NULL: the conditions were written in the JSON form itself.
ALTER TABLE work_routing_rules ADD COLUMN conditions_written jsonb;
