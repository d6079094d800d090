-- Running on AWS: consumer dispatch without session state, a send that starts its consumer's
-- dispatch, and the least-privilege roles the functions connect as.

-- A queue's delivery slots (at most `concurrency` batches in its function's hands) are lease rows
-- with an expiry, taken and released by single autocommit statements: no advisory lock, so an
-- RDS Proxy session is never pinned, and a slot whose dispatcher died frees itself.
CREATE TABLE consumer_slots (
    queue_id bigint      NOT NULL,
    slot     int         NOT NULL,
    holder   uuid,
    until    timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (queue_id, slot)
);

-- "A dispatch of this queue is on its way or running": taken by the send that finds its consumer
-- idle (that send starts the dispatch), released by the dispatch when the queue is drained.
CREATE TABLE consumer_kicks (
    queue_id bigint      PRIMARY KEY,
    until    timestamptz NOT NULL
);

-- Take the kick if it is free; true when this caller took it (and must start the dispatch).
CREATE FUNCTION consumer_kick_take(p_queue bigint, p_seconds float8) RETURNS boolean
LANGUAGE sql AS $$
    INSERT INTO consumer_kicks AS k (queue_id, until)
    VALUES (p_queue, clock_timestamp() + p_seconds * interval '1 second')
    ON CONFLICT (queue_id) DO UPDATE SET until = excluded.until WHERE k.until <= clock_timestamp()
    RETURNING true
$$;

-- queue_send answers, beside each new id, the queue's id when this send took the kick: a queue
-- with an enabled consumer and no dispatch on its way. A queue without a consumer pays nothing
-- (the queue row is already in hand); a busy consumer costs one primary-key read.
DROP FUNCTION queue_send(uuid, uuid, text, boolean, text[], int[], int, float8, jsonb);
CREATE FUNCTION queue_send(
    p_tenant uuid, p_project uuid, p_name text, p_anonymous boolean,
    p_messages text[], p_sizes int[], p_largest int, p_delay float8, p_headers jsonb
) RETURNS TABLE (sent_id bigint, dispatch_queue bigint) LANGUAGE plpgsql AS $$
DECLARE
    q queues;
    v_n int := cardinality(p_messages);
    v_kick boolean := false;
BEGIN
    q := queue_find(p_tenant, p_project, p_name);
    IF p_anonymous AND NOT q.app_send THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = 'No such queue in this environment.';
    END IF;
    PERFORM plan_check(p_tenant, p_largest, v_n, 0);
    INSERT INTO tenant_monthly_messages AS u (tenant_id, month, slot, messages)
    VALUES (p_tenant, date_trunc('month', clock_timestamp())::date, pg_backend_pid() % 8, v_n)
    ON CONFLICT (tenant_id, month, slot) DO UPDATE SET messages = u.messages + excluded.messages;
    IF EXISTS (SELECT 1 FROM waiters WHERE channel = 'queue_' || q.id AND until > clock_timestamp()) THEN
        PERFORM pg_notify('queue_' || q.id, '');
    END IF;
    IF q.consumer IS NOT NULL AND p_delay <= 0 AND v_n > 0
       AND (q.consumer->>'enabled')::boolean IS NOT FALSE AND coalesce(q.consumer->>'function_name', '') <> ''
       AND NOT EXISTS (SELECT 1 FROM consumer_kicks WHERE queue_id = q.id AND until > clock_timestamp()) THEN
        v_kick := coalesce(consumer_kick_take(q.id, 90), false);
    END IF;
    RETURN QUERY
    INSERT INTO queue_messages (queue_id, vt, message, headers, size)
    SELECT q.id, clock_timestamp() + p_delay * interval '1 second', u.m::jsonb, p_headers, u.s
    FROM unnest(p_messages, p_sizes) WITH ORDINALITY AS u(m, s, n)
    ORDER BY u.n
    RETURNING queue_messages.msg_id, CASE WHEN v_kick THEN q.id END;
END $$;

-- The roles. `postbox_app` is what every function but `migrate` connects as: DML on the tables and
-- EXECUTE on the functions, nothing else (no DDL, no TRUNCATE, no writes to schema_migrations).
-- `postbox_listen` only registers long-poll waiters and LISTENs, on a direct connection to the
-- cluster (see docs/architecture.md). Both are created without LOGIN: on AWS the migrate function
-- gives them their login (a rotated password, IAM authentication); locally nothing logs in as them.
-- Roles belong to the server, not the database, so creating them tolerates a concurrent creator.
DO $$
DECLARE r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['postbox_app', 'postbox_listen'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END;
        END IF;
    END LOOP;
END $$;

REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO postbox_app, postbox_listen;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO postbox_app;
REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM postbox_app;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO postbox_app;
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO postbox_app;
-- Whatever later migrations create (they run as the same owner) is granted the same way.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO postbox_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO postbox_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO postbox_app;
GRANT SELECT, INSERT, DELETE ON waiters TO postbox_listen;
