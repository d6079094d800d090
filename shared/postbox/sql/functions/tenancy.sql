-- Plan limits in one place: every path that reads a tenant's plan and usage, or enforces a limit,
-- calls these functions (queue_send in SQL, the queue listing in Python, every path that creates a
-- resource a plan counts).
--
-- A tenant's usage is its folded figures (tenant_monthly_messages for the month, tenant_storage)
-- plus what its queue counter rows still hold back: a send adds its messages and bytes to the
-- counter row it writes anyway (queue_counters' pending columns) and moves them into the folded
-- figures (queue_usage_fold) once that row holds usage_pending_max_*() or more. So each of a queue's
-- 8 counter slots holds back less than that bound whenever no send is in flight, and a send far
-- from every limit (plan_within) needs no count of what is held back.

-- The most one queue counter row holds back once its send has committed: under 64 messages and
-- under 64 KiB (a send that reaches either folds the row). Two scalar SQL functions, which the
-- planner inlines as constants (a function answering a record is called at run time, each time).
CREATE OR REPLACE FUNCTION usage_pending_max_messages() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 64::bigint
$$;

CREATE OR REPLACE FUNCTION usage_pending_max_bytes() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT 65536::bigint
$$;

-- What a tenant's queue counter rows hold back: messages sent in p_month, and bytes.
CREATE OR REPLACE FUNCTION usage_pending(p_tenant uuid, p_month date, OUT messages bigint, OUT bytes bigint)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(c.pending_messages) FILTER (WHERE c.pending_month = p_month), 0)::bigint,
           coalesce(sum(c.pending_bytes), 0)::bigint
    FROM queues q JOIN queue_counters c ON c.queue_id = q.id
    WHERE q.tenant_id = p_tenant
$$;

CREATE OR REPLACE FUNCTION plan_usage(p_tenant uuid) RETURNS TABLE (
    max_queues int, messages_month bigint, max_message_bytes int, storage_bytes bigint, retention_days int,
    used_queues bigint, used_storage_bytes bigint, used_messages_month bigint
) LANGUAGE sql STABLE AS $$
    SELECT p.max_queues, p.messages_month, p.max_message_bytes, p.storage_bytes, p.retention_days,
           (SELECT count(*) FROM queues WHERE tenant_id = t.id),
           (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = t.id) + h.bytes,
           (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
             WHERE tenant_id = t.id AND month = m.month) + h.messages
    FROM tenants t JOIN plans p ON p.name = t.plan
    CROSS JOIN (SELECT date_trunc('month', clock_timestamp())::date AS month) m
    CROSS JOIN LATERAL usage_pending(t.id, m.month) h
    WHERE t.id = p_tenant
$$;

-- True when a send of p_messages messages, the largest p_largest bytes, is within every limit by
-- the folded figures alone with room to spare for all that a tenant's counter rows could hold back
-- (8 slots a queue, usage_pending_max_*() each, the plan's max_queues queues): such a send passes
-- plan_check whatever the rows hold, so a send asks plan_check only when this is not true (or when
-- no row comes back: no such tenant). A set-returning SQL function, so that called in a FROM clause
-- the planner inlines it into the caller's statement: its plan is the caller's, kept with it, where
-- a scalar call would run a query of its own each time.
DROP FUNCTION IF EXISTS plan_within(uuid, int, int);
CREATE OR REPLACE FUNCTION plan_within(p_tenant uuid, p_largest int, p_messages int) RETURNS TABLE (within boolean)
LANGUAGE sql STABLE AS $$
    SELECT p_largest <= p.max_message_bytes
       AND (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
            WHERE tenant_id = p_tenant AND month = date_trunc('month', clock_timestamp())::date)
           + p_messages + 8 * p.max_queues * usage_pending_max_messages() <= p.messages_month
       AND (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = p_tenant)
           + 8 * p.max_queues * usage_pending_max_bytes() < p.storage_bytes
    FROM tenants t JOIN plans p ON p.name = t.plan
    WHERE t.id = p_tenant
$$;

-- Refuse a send that would go over the plan: a message larger than allowed (p_largest bytes),
-- p_messages more messages this month, any message once storage is used up. Usage is counted whole:
-- the folded figures and what the tenant's counter rows hold back.
DROP FUNCTION IF EXISTS plan_check(uuid, int, int, int);
CREATE OR REPLACE FUNCTION plan_check(p_tenant uuid, p_largest int, p_messages int) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
    lim plans;
    u record;
BEGIN
    SELECT p.* INTO lim FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = p_tenant;
    IF p_largest > lim.max_message_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'PB413', DETAIL = 'max_message_bytes',
            MESSAGE = format('The message is over the plan''s %s bytes.', lim.max_message_bytes);
    END IF;
    IF p_messages > 0 THEN
        SELECT * INTO u FROM plan_usage(p_tenant);
        IF u.used_messages_month + p_messages > lim.messages_month THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'messages_month',
                MESSAGE = 'The plan''s monthly messages (queues.messages_month) are used up.';
        END IF;
        IF u.used_storage_bytes >= lim.storage_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'storage_bytes',
                MESSAGE = 'The plan''s storage (queues.storage_bytes) is used up.';
        END IF;
    END IF;
END $$;

-- ---- How many of each kind of resource a tenant may have -----------------------------------------
-- Each limit is the column of `plans` of its name (max_queues, max_durable_streams, ...); what it
-- counts is plan_limit_used's branch of that name. Every path that creates such a resource checks
-- in its own transaction, before it inserts: plan_limit_check takes the tenant's lock for that
-- limit (plan_limit_lock, held until the transaction ends, so creations of one kind by one tenant
-- count one after another and two can never both take the last place), then counts.

-- Held by whoever creates a resource of the kind p_limit counts for the tenant, until its
-- transaction ends. Taken before the insert, always: a transaction that waits for it holds no
-- uncommitted row of that kind that the holder could be waiting for.
CREATE OR REPLACE FUNCTION plan_limit_lock(p_tenant uuid, p_limit text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(x'504c'::int, hashtext(p_tenant::text || '/' || p_limit))  -- "PL"
$$;

-- How many resources the tenant has of the kind p_limit counts (from an index of each table).
CREATE OR REPLACE FUNCTION plan_limit_used(p_tenant uuid, p_limit text) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v bigint;
BEGIN
    CASE p_limit
        WHEN 'max_queues' THEN  -- queues API and SQS alike
            SELECT count(*) INTO v FROM queues WHERE tenant_id = p_tenant;
        WHEN 'max_durable_streams' THEN  -- a soft-deleted stream (kept for its forks) is not counted
            SELECT count(*) INTO v FROM durable_streams WHERE tenant_id = p_tenant AND NOT deleted;
        WHEN 'max_keyed_streams' THEN
            SELECT count(*) INTO v FROM streams WHERE tenant_id = p_tenant;
        WHEN 'max_keyed_subscriptions' THEN
            SELECT count(*) INTO v FROM streams s JOIN stream_subscriptions x ON x.stream_id = s.id
            WHERE s.tenant_id = p_tenant;
        WHEN 'max_partitioned_queues' THEN
            SELECT count(*) INTO v FROM pq_queues WHERE tenant_id = p_tenant;
        WHEN 'max_flows' THEN
            SELECT count(*) INTO v FROM flow_queries WHERE tenant_id = p_tenant;
        WHEN 'max_work_scopes' THEN  -- archived ones too, until deleted
            SELECT count(*) INTO v FROM work_scopes WHERE tenant_id = p_tenant;
        WHEN 'max_work_queues' THEN  -- a scope's five system queues are not counted
            SELECT count(*) INTO v FROM work_queues WHERE tenant_id = p_tenant AND NOT is_system;
        WHEN 'max_work_subscriptions' THEN
            SELECT count(*) INTO v FROM work_subscriptions WHERE tenant_id = p_tenant;
        WHEN 'max_webhooks' THEN  -- push subscriptions
            SELECT count(*) INTO v FROM work_subscriptions WHERE tenant_id = p_tenant AND delivery_mode = 'push';
        WHEN 'max_sqs_credentials' THEN
            SELECT count(*) INTO v FROM sqs_credentials WHERE tenant_id = p_tenant AND revoked_at IS NULL;
        WHEN 'max_api_keys' THEN  -- every role's keys, work keys too, while they can be used
            SELECT count(*) INTO v FROM api_keys WHERE tenant_id = p_tenant AND revoked_at IS NULL
               AND (expires_at IS NULL OR expires_at > clock_timestamp());
        WHEN 'max_projects' THEN  -- the default project too
            SELECT count(*) INTO v FROM projects WHERE tenant_id = p_tenant;
    END CASE;  -- no branch: CASE_NOT_FOUND, an unknown limit is our own mistake
    RETURN v;
END $$;

-- Refuse the creation of p_adding more resources of the kind p_limit counts when the tenant would
-- then have more than its plan allows: PB403 with the limit's name as the code, its name and value
-- as the details. Called in the transaction that creates them, before the insert (p_adding 1), or
-- after it with the lock taken before (p_adding 0). VOLATILE: the count is a statement of its own
-- after the lock, so it sees every creation committed before the lock was granted.
CREATE OR REPLACE FUNCTION plan_limit_check(p_tenant uuid, p_limit text, p_adding int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_max bigint;
    v_used bigint;
BEGIN
    PERFORM plan_limit_lock(p_tenant, p_limit);
    SELECT (to_jsonb(p) -> p_limit)::bigint INTO v_max FROM tenants t JOIN plans p ON p.name = t.plan
    WHERE t.id = p_tenant;
    IF NOT FOUND THEN
        RETURN;  -- no such tenant: nothing of it can be counted (what refers to tenants refuses it)
    END IF;
    IF v_max IS NULL THEN
        RAISE EXCEPTION 'no plan limit is named %', p_limit;
    END IF;
    v_used := plan_limit_used(p_tenant, p_limit);
    IF v_used + p_adding > v_max THEN
        RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = p_limit,
            MESSAGE = format('The plan allows %s %s (%s).',
                             v_max, replace(substr(p_limit, 5), '_', ' '), p_limit),
            HINT = jsonb_build_object('limit', p_limit, 'value', v_max)::text;
    END IF;
END $$;

-- The id of the tenant's project p_name, made if it has none, within the plan's projects (PB403
-- max_projects): for what names a project and makes it when missing (an SQS credential, a key).
-- A project that exists takes no lock; a missing one is made as the other implicit creations are,
-- the count taken after the insert under the lock taken before it, so one made meanwhile by another
-- caller is found and never refused.
CREATE OR REPLACE FUNCTION project_ensure(p_tenant uuid, p_name text) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_id uuid;
BEGIN
    SELECT id INTO v_id FROM projects WHERE tenant_id = p_tenant AND name = p_name;
    IF FOUND THEN
        RETURN v_id;
    END IF;
    PERFORM plan_limit_lock(p_tenant, 'max_projects');
    INSERT INTO projects (tenant_id, name) VALUES (p_tenant, p_name)
    ON CONFLICT (tenant_id, name) DO NOTHING RETURNING id INTO v_id;
    IF v_id IS NOT NULL THEN
        PERFORM plan_limit_check(p_tenant, 'max_projects', 0);
        RETURN v_id;
    END IF;
    SELECT id INTO v_id FROM projects WHERE tenant_id = p_tenant AND name = p_name;
    RETURN v_id;
END $$;
