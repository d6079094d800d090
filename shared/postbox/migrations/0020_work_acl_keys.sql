-- The work surface's access control: work API keys (rows of api_keys with role `work`), scope
-- grants, per-queue allow/deny entries, and trusted scopes for cross-scope routing.
--
-- Work keys resolve through the same one-query lookup as every key. A work key holds only its
-- `allowed_operations` (kept in `scopes`); its role `work` ranks below `read`, so no other surface
-- accepts it. Rotation keeps the old hash in `previous_hash` until `previous_valid_until`.
--
-- The ACL is checked by `work_acl_check(caller)` in the same statement that loads the scope (one
-- round trip): on the hot paths from work_scope_of, which reads the caller from a transaction-local
-- setting; elsewhere called in the FROM beside the loader. The counters on work_scopes, kept by
-- triggers, say whether a scope has anything to look at, so a scope without ACL rows costs nothing.

-- ---- work API keys ------------------------------------------------------------------------------

ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check
    CHECK (role IN ('read', 'write', 'manage', 'anon', 'work'));
ALTER TABLE api_keys
    ADD COLUMN subject_type         text,
    ADD COLUMN subject_id           text,
    ADD COLUMN key_type             text,
    ADD COLUMN allowed_scopes       uuid[],     -- NULL: every scope of the tenant
    ADD COLUMN ip_allowlist         text[],     -- CIDRs; NULL: any address
    ADD COLUMN grace_period_seconds int NOT NULL DEFAULT 0,
    ADD COLUMN previous_hash        bytea,      -- the key before the last rotation ...
    ADD COLUMN previous_valid_until timestamptz, -- ... accepted until then
    ADD COLUMN rotated_at           timestamptz,
    ADD COLUMN revoked_reason       text;
CREATE INDEX api_keys_previous ON api_keys (previous_hash) WHERE previous_hash IS NOT NULL;

-- ---- ACL ----------------------------------------------------------------------------------------

ALTER TABLE work_scopes
    ADD COLUMN acl_grants        int NOT NULL DEFAULT 0,  -- rows in work_acl_grants for the scope
    ADD COLUMN acl_queue_entries int NOT NULL DEFAULT 0;  -- rows in work_queue_acl for the scope

CREATE TABLE work_acl_grants (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    actor_type  text NOT NULL,
    actor_id    text NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'publisher', 'consumer', 'manager')),
    conditions  jsonb,                   -- NULL or {"not_before"?, "not_after"?}
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_acl_grants_actor ON work_acl_grants (scope_id, actor_type, actor_id);

CREATE TABLE work_queue_acl (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id    uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    queue_id    bigint NOT NULL REFERENCES work_queues(id) ON DELETE CASCADE,
    actor_type  text NOT NULL,
    actor_id    text NOT NULL,
    role        text NOT NULL CHECK (role IN ('viewer', 'publisher', 'consumer', 'manager')),
    effect      text NOT NULL DEFAULT 'allow' CHECK (effect IN ('allow', 'deny')),
    conditions  jsonb,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX work_queue_acl_actor ON work_queue_acl (queue_id, actor_type, actor_id);
CREATE INDEX work_queue_acl_scope ON work_queue_acl (scope_id, created_at);

CREATE TABLE work_trusted_scopes (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    scope_id        uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    target_scope_id uuid NOT NULL REFERENCES work_scopes(id) ON DELETE CASCADE,
    direction       text NOT NULL DEFAULT 'outbound' CHECK (direction IN ('outbound', 'inbound', 'both')),
    allowed_types   text[],              -- NULL: any message type
    allowed_queues  uuid[],              -- queues of the receiving scope; NULL: any
    identity_mode   text NOT NULL DEFAULT 'source' CHECK (identity_mode IN ('source', 'scope')),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (scope_id, target_scope_id)
);
CREATE INDEX work_trusted_scopes_target ON work_trusted_scopes (target_scope_id);

-- The counters the fast path reads, kept on every insert and delete (cascades included).
CREATE FUNCTION work_acl_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_scope uuid := CASE TG_OP WHEN 'INSERT' THEN NEW.scope_id ELSE OLD.scope_id END;
    v_step int := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
BEGIN
    IF TG_TABLE_NAME = 'work_acl_grants' THEN
        UPDATE work_scopes SET acl_grants = greatest(acl_grants + v_step, 0) WHERE id = v_scope;
    ELSE
        UPDATE work_scopes SET acl_queue_entries = greatest(acl_queue_entries + v_step, 0) WHERE id = v_scope;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER work_acl_grants_count AFTER INSERT OR DELETE ON work_acl_grants
    FOR EACH ROW EXECUTE FUNCTION work_acl_count();
CREATE TRIGGER work_queue_acl_count AFTER INSERT OR DELETE ON work_queue_acl
    FOR EACH ROW EXECUTE FUNCTION work_acl_count();

-- The operations a role gives.
CREATE FUNCTION work_acl_role_ops(p_role text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_role
        WHEN 'viewer' THEN ARRAY['scaiqueue:view']
        WHEN 'publisher' THEN ARRAY['scaiqueue:view', 'scaiqueue:publish']
        WHEN 'consumer' THEN ARRAY['scaiqueue:view', 'scaiqueue:consume']
        WHEN 'manager' THEN ARRAY['scaiqueue:view', 'scaiqueue:publish', 'scaiqueue:consume', 'scaiqueue:manage']
        ELSE ARRAY[]::text[] END
$$;

-- Whether an entry's conditions hold now: {"not_before"?: time, "not_after"?: time}; none: always.
CREATE FUNCTION work_acl_active(c jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT c IS NULL
        OR ((c->>'not_before' IS NULL OR (c->>'not_before')::timestamptz <= clock_timestamp())
            AND (c->>'not_after' IS NULL OR (c->>'not_after')::timestamptz > clock_timestamp()))
$$;

-- The ACL check of one request. p: {tenant, scope (or subscription), op, actor_type, actor_id, key_id, work_key,
-- queue?, messages?, subscription?}. A missing scope passes (the loader beside it answers 404).
-- Deny entries on a queue the request touches win over everything; in a scope with grants a work
-- key's actor needs a grant whose role gives `op`, or allow entries giving it on every queue the
-- request touches. Tenant keys keep their tenant-wide rights (only denies apply to them).
CREATE FUNCTION work_acl_check(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_scope uuid := coalesce((p->>'scope')::uuid,  -- a route naming only a subscription: its scope
                             (SELECT scope_id FROM work_subscriptions WHERE id = (p->>'subscription')::uuid));
    v_op text := p->>'op';
    v_type text := p->>'actor_type';
    v_id text := p->>'actor_id';
    v_key text := p->>'key_id';
    v_work boolean := coalesce((p->>'work_key')::boolean, false);
    v_grants int;
    v_entries int;
    v_queues bigint[];
BEGIN
    SELECT acl_grants, acl_queue_entries INTO v_grants, v_entries
    FROM work_scopes WHERE id = v_scope AND tenant_id = (p->>'tenant')::uuid;
    IF NOT FOUND OR (v_entries = 0 AND (v_grants = 0 OR NOT v_work)) THEN
        RETURN;
    END IF;
    v_queues := ARRAY(
        SELECT id FROM work_queues WHERE scope_id = v_scope AND queue_id = (p->>'queue')::uuid
        UNION
        SELECT m.queue_id FROM work_messages m
        WHERE m.scope_id = v_scope
          AND m.id = ANY(ARRAY(SELECT jsonb_array_elements_text(coalesce(p->'messages', '[]')))::uuid[])
        UNION
        SELECT x.queue_id FROM work_subscriptions x WHERE x.scope_id = v_scope AND x.id = (p->>'subscription')::uuid);
    IF v_entries > 0 AND EXISTS (
        SELECT 1 FROM work_queue_acl a
        WHERE a.queue_id = ANY(v_queues) AND a.effect = 'deny'
          AND ((a.actor_type = v_type AND a.actor_id = v_id) OR (a.actor_type = 'api_key' AND a.actor_id = v_key))
          AND v_op = ANY(work_acl_role_ops(a.role)) AND work_acl_active(a.conditions)) THEN
        RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'AUTHZ_PERMISSION_DENIED',
            MESSAGE = format('An ACL entry of this queue denies %s to %s %s.', v_op, v_type, v_id);
    END IF;
    IF NOT v_work OR v_grants = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (
        SELECT 1 FROM work_acl_grants g
        WHERE g.scope_id = v_scope
          AND ((g.actor_type = v_type AND g.actor_id = v_id) OR (g.actor_type = 'api_key' AND g.actor_id = v_key))
          AND v_op = ANY(work_acl_role_ops(g.role)) AND work_acl_active(g.conditions)) THEN
        RETURN;
    END IF;
    IF cardinality(v_queues) > 0 AND NOT EXISTS (
        SELECT 1 FROM unnest(v_queues) wanted(queue_id)
        WHERE NOT EXISTS (
            SELECT 1 FROM work_queue_acl a
            WHERE a.queue_id = wanted.queue_id AND a.effect = 'allow'
              AND ((a.actor_type = v_type AND a.actor_id = v_id) OR (a.actor_type = 'api_key' AND a.actor_id = v_key))
              AND v_op = ANY(work_acl_role_ops(a.role)) AND work_acl_active(a.conditions))) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'AUTHZ_PERMISSION_DENIED',
        MESSAGE = format('No grant of this scope gives %s to %s %s.', v_op, v_type, v_id);
END $$;

-- Whether a scope shows in a caller's list of scopes (p as work_acl_check's): a scope closed by
-- grants shows to a work key only when its actor holds a grant there (every role gives view).
CREATE FUNCTION work_acl_visible(p_scope uuid, p_grants int, p jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT coalesce((p->>'work_key')::boolean, false) OR p_grants = 0 OR EXISTS (
        SELECT 1 FROM work_acl_grants g
        WHERE g.scope_id = p_scope
          AND ((g.actor_type = p->>'actor_type' AND g.actor_id = p->>'actor_id')
               OR (g.actor_type = 'api_key' AND g.actor_id = p->>'key_id'))
          AND work_acl_active(g.conditions))
$$;

-- The scope a request names, within the caller's tenant (as in 0013), now also checking the caller
-- when the scope has ACL rows. The hot paths (publish, claim, finish, deliveries) pass the caller
-- as the transaction-local setting `postbox.acl` (work_acl_check's p), set in the FROM of the same
-- statement; a scope without ACL rows costs two integer tests. Only the scope the caller named is
-- checked (a routed publish into another scope is governed by trusts, not by the publisher's ACL).
-- Every hot-path function must keep loading its scope through this function.
CREATE OR REPLACE FUNCTION work_scope_of(p_tenant uuid, p_scope uuid) RETURNS work_scopes LANGUAGE plpgsql STABLE AS $$
DECLARE
    s work_scopes;
    v_caller jsonb;
BEGIN
    SELECT * INTO s FROM work_scopes WHERE id = p_scope AND tenant_id = p_tenant;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'SCAIQUEUE_SCOPE_NOT_FOUND', MESSAGE = 'Scope not found.';
    END IF;
    IF s.acl_grants > 0 OR s.acl_queue_entries > 0 THEN
        v_caller := nullif(current_setting('postbox.acl', true), '')::jsonb;
        IF v_caller IS NOT NULL AND (v_caller->>'scope')::uuid = p_scope THEN
            PERFORM work_acl_check(v_caller);
        END IF;
    END IF;
    RETURN s;
END $$;

-- complete and complete-batch (as in 0018) check their responses against the messages' HITL specs
-- before work_finish loads the scope: they now load it (and so check the caller) first, so a denied
-- actor is refused before anything of the messages is looked at.
CREATE OR REPLACE FUNCTION work_complete_checked(p_tenant uuid, p_scope uuid, p_item jsonb) RETURNS jsonb
LANGUAGE plpgsql AS $$
DECLARE
    v_spec jsonb;
    v_errors jsonb;
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);  -- the caller's ACL first: a denied actor learns nothing of the spec
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

CREATE OR REPLACE FUNCTION work_complete_batch_checked(p_tenant uuid, p_scope uuid, p_items jsonb, p_ids uuid[])
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_bad jsonb;   -- {position: [{field, message}]}
    v_keep jsonb;
    v_keep_ids uuid[];
    v_done jsonb := '[]';
BEGIN
    PERFORM work_scope_of(p_tenant, p_scope);  -- the caller's ACL first, even when no item reaches the finish
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

-- ---- trusted scopes and cross-scope routing -----------------------------------------------------

-- The identity mode of the trust that lets scope p_from route into queue p_queue (external id) of
-- scope p_to, for a message of type p_type (NULL: any type, as at rule creation); NULL when none
-- does. Either side may hold the entry: p_from trusting p_to outbound, or p_to trusting p_from
-- inbound (`both` counts for either); the sender's own entry wins.
CREATE FUNCTION work_trust_of(p_from uuid, p_to uuid, p_queue uuid, p_type text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT t.identity_mode FROM work_trusted_scopes t
    WHERE ((t.scope_id = p_from AND t.target_scope_id = p_to AND t.direction IN ('outbound', 'both'))
           OR (t.scope_id = p_to AND t.target_scope_id = p_from AND t.direction IN ('inbound', 'both')))
      AND (t.allowed_queues IS NULL OR p_queue = ANY(t.allowed_queues))
      AND (p_type IS NULL OR t.allowed_types IS NULL OR p_type = ANY(t.allowed_types))
    ORDER BY (t.scope_id = p_from) DESC
    LIMIT 1
$$;

-- Route one publish (as in 0019), now also across scopes: a route or copy whose target queue is in
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
