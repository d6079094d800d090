-- Counters kept in slotted tables (queue_counters, tenant_storage, tenant_monthly_messages,
-- work_queue_counters, pq_counters): a figure is the sum of its key's slot rows, so concurrent
-- writers add to different rows instead of queueing on one until commit (its WAL flush included).
--
-- counter_slot is the one place a writer picks its slot. It starts at the backend's home slot and
-- takes the first of the key's 8 slots whose transaction-level advisory lock (two-int form, key
-- space p_space) it gets at once: a slot is held from the first count of a transaction to its end,
-- as the row the count writes is, so two open transactions never share a slot while one is free.
-- Taking a slot the transaction already holds succeeds (advisory locks are re-entrant), so the
-- home slot costs one lock call. Only when all 8 are held does it wait, for its home slot's lock
-- (then the row is free too). Nothing is kept across transactions and no session-level lock is
-- taken (RDS Proxy would pin the session). Every writer of a slotted counter calls it before it
-- writes; a row written otherwise (a test's slot 99) is outside 0..7 and never contended.
--
-- p_space names the counter table (see the callers: 'CQ' queue_counters, 'CS' tenant_storage,
-- 'CM' tenant_monthly_messages, 'CW' work_queue_counters, 'CP' pq_counters); p_key is the row
-- key's id (a uuid through counter_key). Keys that agree in their low 28 bits share lock keys,
-- which only makes a slot look busy now and then.
CREATE OR REPLACE FUNCTION counter_slot(p_space int, p_key bigint) RETURNS int LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_home int := pg_backend_pid() % 8;
    v_base int := ((p_key & 268435455) * 8)::int;
    v_slot int;
BEGIN
    FOR i IN 0..7 LOOP
        v_slot := (v_home + i) % 8;
        IF pg_try_advisory_xact_lock(p_space, v_base + v_slot) THEN
            RETURN v_slot;
        END IF;
    END LOOP;
    PERFORM pg_advisory_xact_lock(p_space, v_base + v_home);  -- every slot held: wait for ours
    RETURN v_home;
END $$;

-- A uuid row key (a tenant) as counter_slot's p_key.
CREATE OR REPLACE FUNCTION counter_key(p_id uuid) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT uuid_hash_extended(p_id, 0)
$$;
