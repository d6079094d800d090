-- The counters the fast path reads, kept on every insert and delete (cascades included).
CREATE OR REPLACE FUNCTION work_acl_count() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE TRIGGER work_acl_grants_count AFTER INSERT OR DELETE ON work_acl_grants
    FOR EACH ROW EXECUTE FUNCTION work_acl_count();

CREATE OR REPLACE TRIGGER work_queue_acl_count AFTER INSERT OR DELETE ON work_queue_acl
    FOR EACH ROW EXECUTE FUNCTION work_acl_count();

-- The operations a role gives.
CREATE OR REPLACE FUNCTION work_acl_role_ops(p_role text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_role
        WHEN 'viewer' THEN ARRAY['scaiqueue:view']
        WHEN 'publisher' THEN ARRAY['scaiqueue:view', 'scaiqueue:publish']
        WHEN 'consumer' THEN ARRAY['scaiqueue:view', 'scaiqueue:consume']
        WHEN 'manager' THEN ARRAY['scaiqueue:view', 'scaiqueue:publish', 'scaiqueue:consume', 'scaiqueue:manage']
        ELSE ARRAY[]::text[] END
$$;

-- Whether an entry's conditions hold now: {"not_before"?: time, "not_after"?: time}; none: always.
CREATE OR REPLACE FUNCTION work_acl_active(c jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT c IS NULL
        OR ((c->>'not_before' IS NULL OR (c->>'not_before')::timestamptz <= clock_timestamp())
            AND (c->>'not_after' IS NULL OR (c->>'not_after')::timestamptz > clock_timestamp()))
$$;

-- The ACL check of one request. p: {tenant, scope (or subscription), op, actor_type, actor_id, key_id, lineage,
-- work_key, queue?, messages?, subscription?}. A missing scope passes (the loader beside it answers 404).
-- Deny entries on a queue the request touches win over everything; in a scope with grants a work
-- key's actor needs a grant whose role gives `op`, or allow entries giving it on every queue the
-- request touches. Tenant keys keep their tenant-wide rights (only denies apply to them).
-- An `api_key` deny entry binds its key and every key in whose lineage it is (the keys minted from
-- it, directly or through others), so no key escapes a deny by minting an equal key; `api_key`
-- grants and allows give only to that key itself.
CREATE OR REPLACE FUNCTION work_acl_check(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_scope uuid := coalesce((p->>'scope')::uuid,  -- a route naming only a subscription: its scope
                             (SELECT scope_id FROM work_subscriptions WHERE id = (p->>'subscription')::uuid));
    v_op text := p->>'op';
    v_type text := p->>'actor_type';
    v_id text := p->>'actor_id';
    v_key text := p->>'key_id';
    v_keys text[];  -- the caller's key id, then the ids of the keys it descends from
    v_work boolean := coalesce((p->>'work_key')::boolean, false);
    v_inherited boolean;  -- the deny found names a key the caller descends from
    v_denied text;
    v_grants int;
    v_entries int;
    v_queues bigint[];
BEGIN
    SELECT acl_grants, acl_queue_entries INTO v_grants, v_entries
    FROM work_scopes WHERE id = v_scope AND tenant_id = (p->>'tenant')::uuid;
    IF NOT FOUND OR (v_entries = 0 AND (v_grants = 0 OR NOT v_work)) THEN
        RETURN;
    END IF;
    v_keys := ARRAY[v_key] || ARRAY(SELECT jsonb_array_elements_text(coalesce(p->'lineage', '[]')));
    v_queues := ARRAY(
        SELECT id FROM work_queues WHERE scope_id = v_scope AND queue_id = (p->>'queue')::uuid
        UNION
        SELECT m.queue_id FROM work_messages m
        WHERE m.scope_id = v_scope
          AND m.id = ANY(ARRAY(SELECT jsonb_array_elements_text(coalesce(p->'messages', '[]')))::uuid[])
        UNION
        SELECT x.queue_id FROM work_subscriptions x WHERE x.scope_id = v_scope AND x.id = (p->>'subscription')::uuid);
    IF v_entries > 0 THEN
        SELECT a.actor_type = 'api_key' AND a.actor_id = ANY(v_keys[2:]), a.actor_id INTO v_inherited, v_denied
        FROM work_queue_acl a
        WHERE a.queue_id = ANY(v_queues) AND a.effect = 'deny'
          AND ((a.actor_type = v_type AND a.actor_id = v_id) OR (a.actor_type = 'api_key' AND a.actor_id = ANY(v_keys)))
          AND v_op = ANY(work_acl_role_ops(a.role)) AND work_acl_active(a.conditions)
        ORDER BY 1  -- an entry naming the caller itself before one naming a key it descends from
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'AUTHZ_PERMISSION_DENIED',
                MESSAGE = format('An ACL entry of this queue denies %s to %s %s', v_op, v_type, v_id)
                    || CASE WHEN v_inherited THEN format(', minted from api_key %s, which it names.', v_denied)
                            ELSE '.' END;
        END IF;
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
CREATE OR REPLACE FUNCTION work_acl_visible(p_scope uuid, p_grants int, p jsonb) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT NOT coalesce((p->>'work_key')::boolean, false) OR p_grants = 0 OR EXISTS (
        SELECT 1 FROM work_acl_grants g
        WHERE g.scope_id = p_scope
          AND ((g.actor_type = p->>'actor_type' AND g.actor_id = p->>'actor_id')
               OR (g.actor_type = 'api_key' AND g.actor_id = p->>'key_id'))
          AND work_acl_active(g.conditions))
$$;

-- ---- trusted scopes and cross-scope routing -----------------------------------------------------

-- The identity mode of the trust that lets scope p_from route into queue p_queue (external id) of
-- scope p_to, for a message of type p_type (NULL: any type, as at rule creation); NULL when none
-- does. Either side may hold the entry: p_from trusting p_to outbound, or p_to trusting p_from
-- inbound (`both` counts for either); the sender's own entry wins.
CREATE OR REPLACE FUNCTION work_trust_of(p_from uuid, p_to uuid, p_queue uuid, p_type text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT t.identity_mode FROM work_trusted_scopes t
    WHERE ((t.scope_id = p_from AND t.target_scope_id = p_to AND t.direction IN ('outbound', 'both'))
           OR (t.scope_id = p_to AND t.target_scope_id = p_from AND t.direction IN ('inbound', 'both')))
      AND (t.allowed_queues IS NULL OR p_queue = ANY(t.allowed_queues))
      AND (p_type IS NULL OR t.allowed_types IS NULL OR p_type = ANY(t.allowed_types))
    ORDER BY (t.scope_id = p_from) DESC
    LIMIT 1
$$;
