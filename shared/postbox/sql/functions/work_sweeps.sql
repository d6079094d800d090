-- ---- agents' sweeps: bounded, SKIP LOCKED, safe to run twice at once -----------------------------

-- Pending or claimed messages past their ttl_seconds or deadline end as `expired`.
-- Pending or claimed messages past their ttl_seconds or deadline end as `expired`.
-- Each message that expires journals `scaiqueue.message.expired` by the system.
CREATE OR REPLACE FUNCTION work_expire(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE r record; n int := 0;
BEGIN
    FOR r IN
        WITH doomed AS (
            SELECT x.id, x.queue_id, x.state FROM work_messages x
            WHERE x.ended_at IS NULL AND x.expires_at IS NOT NULL AND x.expires_at <= clock_timestamp()
              AND x.state IN ('pending', 'claimed')  -- a broadcast message ends with its deliveries
            ORDER BY x.expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), ended AS (
            UPDATE work_messages m SET state = 'expired', claim_token = NULL, ended_at = clock_timestamp(),
                   updated_at = clock_timestamp()
            FROM doomed d WHERE m.id = d.id
            RETURNING m.id, m.seq, m.scope_id, m.tenant_id, m.correlation_id, m.attempts, d.queue_id, d.state
        ), journal AS (  -- a row per queue (and per 1,024 of its messages)
            INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, message_ids,
                                      attempts, correlation_ids)
            SELECT e.scope_id, e.tenant_id, e.queue_id, 'scaiqueue.message.expired', 'system', 'work-expiry',
                   array_agg(e.id ORDER BY e.seq), work_journal_compact(array_agg(e.attempts ORDER BY e.seq)),
                   work_journal_compact(array_agg(e.correlation_id ORDER BY e.seq))
            FROM (SELECT x.*, (row_number() OVER (PARTITION BY x.queue_id ORDER BY x.seq) - 1) / 1024 AS part
                  FROM ended x) e
            GROUP BY e.queue_id, e.part, e.scope_id, e.tenant_id
        )
        SELECT queue_id, count(*) FILTER (WHERE state = 'pending') AS p, count(*) FILTER (WHERE state = 'claimed') AS c
        FROM ended GROUP BY queue_id ORDER BY queue_id
    LOOP
        PERFORM work_count(r.queue_id, -r.p, -r.c, 0, 0, 0);
        n := n + r.p + r.c;
    END LOOP;
    RETURN n;
END $$;

-- Priority aging: a pending message of a priority queue gains 102 rank points (about a tier, whose
-- span is 1024, every ten minutes) for each p_step_s seconds it has waited, up to the top of the
-- `high` tier (rank 1024): waiting never makes a message critical. Messages already there stop aging.
-- It walks the live messages' aging index.
CREATE OR REPLACE FUNCTION work_age(p_limit int, p_step_s int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    WITH due AS (
        SELECT x.id, floor(extract(epoch FROM clock_timestamp() - x.aged_at) / p_step_s)::int AS steps
        FROM work_messages x
        WHERE x.ended_at IS NULL AND x.aged_at IS NOT NULL AND x.state = 'pending'
          AND x.aged_at <= clock_timestamp() - p_step_s * interval '1 second'
        ORDER BY x.aged_at LIMIT p_limit FOR UPDATE SKIP LOCKED
    )
    UPDATE work_messages m
    SET rank = greatest(1024, m.rank - 102 * d.steps),
        aged_at = CASE WHEN m.rank - 102 * d.steps <= 1024 THEN NULL
                       ELSE m.aged_at + d.steps * p_step_s * interval '1 second' END
    FROM due d WHERE m.id = d.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END $$;

-- The dead-letter monitor: a scope whose `_dead_letter` depth reaches its alert threshold gets one
-- `scaiqueue.dead_letter.threshold_exceeded` event in `_events`; it re-arms once the depth falls below.
CREATE OR REPLACE FUNCTION work_watch_dead_letters(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE s work_scopes; v_depth bigint; n int := 0; v_event uuid;
BEGIN
    FOR s IN SELECT * FROM work_scopes WHERE state <> 'archived' ORDER BY id LIMIT p_limit FOR UPDATE SKIP LOCKED LOOP
        SELECT coalesce(sum(d.pending + d.claimed), 0) INTO v_depth
        FROM work_queue_depths(ARRAY[s.dead_letter_queue_id]) d;
        IF v_depth >= s.dead_letter_alert AND NOT s.dead_letter_alerted THEN
            v_event := gen_random_uuid();
            INSERT INTO work_messages (id, queue_id, scope_id, tenant_id, visible_at, message_type, body,
                                       source_type, source_id, max_retries, visibility_timeout_s)
            VALUES (v_event, s.events_queue_id, s.id, s.tenant_id, clock_timestamp(),
                    'scaiqueue.dead_letter.threshold_exceeded',
                    jsonb_build_object('event_type', 'scaiqueue.dead_letter.threshold_exceeded', 'event_id', v_event,
                                       'source', 'scaiqueue/scopes/' || s.id, 'tenant_id', s.tenant_id,
                                       'payload', jsonb_build_object('scope_id', s.id, 'depth', v_depth,
                                                                     'threshold', s.dead_letter_alert),
                                       'timestamp', clock_timestamp()),
                    'system', 'scaiqueue', 3, 30);
            PERFORM work_count(s.events_queue_id, 1, 0, 1, 0, 0);
            UPDATE work_scopes SET dead_letter_alerted = true WHERE id = s.id;
            n := n + 1;
        ELSIF v_depth < s.dead_letter_alert AND s.dead_letter_alerted THEN
            UPDATE work_scopes SET dead_letter_alerted = false WHERE id = s.id;
        END IF;
    END LOOP;
    RETURN n;
END $$;

-- The archiver: ended messages (completed, failed, cancelled, expired, dead-lettered) older than
-- their scope's retention_days are deleted; and the journal's retention: its weeks wholly older than
-- 90 days (the audit log's retention) are dropped, each scope's `_events` materialised first so no
-- event is lost (work_journal_retire). Returns the messages and journal entries removed.
CREATE OR REPLACE FUNCTION work_archive(p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    WITH doomed AS (
        SELECT m.id FROM work_messages m JOIN work_scopes s ON s.id = m.scope_id
        WHERE m.ended_at IS NOT NULL AND m.ended_at < clock_timestamp() - make_interval(days => s.retention_days)
        ORDER BY m.ended_at LIMIT p_limit FOR UPDATE OF m SKIP LOCKED
    )
    DELETE FROM work_messages w USING doomed d WHERE w.id = d.id;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n + work_journal_retire(90, p_limit);
END $$;
