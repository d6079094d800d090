-- Plan limits in one place: every path that reads a tenant's plan and usage, or enforces a limit,
-- calls these two functions (queue_send in SQL, queue creation and the queue listing in Python).
CREATE OR REPLACE FUNCTION plan_usage(p_tenant uuid) RETURNS TABLE (
    max_queues int, messages_month bigint, max_message_bytes int, storage_bytes bigint, retention_days int,
    used_queues bigint, used_storage_bytes bigint, used_messages_month bigint
) LANGUAGE sql STABLE AS $$
    SELECT p.max_queues, p.messages_month, p.max_message_bytes, p.storage_bytes, p.retention_days,
           (SELECT count(*) FROM queues WHERE tenant_id = t.id),
           (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = t.id),
           (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
             WHERE tenant_id = t.id AND month = date_trunc('month', clock_timestamp())::date)
    FROM tenants t JOIN plans p ON p.name = t.plan
    WHERE t.id = p_tenant
$$;

-- Refuse what would go over the plan: a message larger than allowed (p_largest bytes), p_messages
-- more messages this month, any message once storage is used up, p_queues more queues.
CREATE OR REPLACE FUNCTION plan_check(p_tenant uuid, p_largest int, p_messages int, p_queues int) RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE lim plans;
BEGIN
    SELECT p.* INTO lim FROM tenants t JOIN plans p ON p.name = t.plan WHERE t.id = p_tenant;
    IF p_largest > lim.max_message_bytes THEN
        RAISE EXCEPTION USING ERRCODE = 'PB413', DETAIL = 'max_message_bytes',
            MESSAGE = format('The message is over the plan''s %s bytes.', lim.max_message_bytes);
    END IF;
    IF p_messages > 0 THEN
        IF (SELECT coalesce(sum(messages), 0) FROM tenant_monthly_messages
            WHERE tenant_id = p_tenant AND month = date_trunc('month', clock_timestamp())::date)
           + p_messages > lim.messages_month THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'messages_month',
                MESSAGE = 'The plan''s monthly messages (queues.messages_month) are used up.';
        END IF;
        IF (SELECT coalesce(sum(stored_bytes), 0) FROM tenant_storage WHERE tenant_id = p_tenant)
           >= lim.storage_bytes THEN
            RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'storage_bytes',
                MESSAGE = 'The plan''s storage (queues.storage_bytes) is used up.';
        END IF;
    END IF;
    IF p_queues > 0 AND (SELECT count(*) FROM queues WHERE tenant_id = p_tenant) + p_queues > lim.max_queues THEN
        RAISE EXCEPTION USING ERRCODE = 'PB403', DETAIL = 'max_queues',
            MESSAGE = format('The plan allows %s queues (queues.max_queues).', lim.max_queues);
    END IF;
END $$;
