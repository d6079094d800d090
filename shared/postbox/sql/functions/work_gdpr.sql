-- ---- helpers ------------------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION work_gdpr_marker() RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$ SELECT '{"redacted": true}'::jsonb $$;

-- A JSON object with each of these keys that holds a value replaced by the marker.
CREATE OR REPLACE FUNCTION work_gdpr_mask(p_obj jsonb, p_keys text[]) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_obj || (SELECT jsonb_object_agg(k, work_gdpr_marker()) FROM unnest(p_keys) k
                              WHERE jsonb_typeof(p_obj->k) NOT IN ('null') AND p_obj ? k), p_obj)
$$;

-- The ids of a walk of the whole message table by id (every tenant: bounded by p_limit rows looked
-- at, whatever they hold), after p_after.
CREATE OR REPLACE FUNCTION work_gdpr_walk(p_after text, p_limit int) RETURNS uuid[] LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}') FROM (
        SELECT id FROM work_messages WHERE id > coalesce(p_after::uuid, '00000000-0000-0000-0000-000000000000')
        ORDER BY id LIMIT p_limit) x
$$;

-- The next cursor of a walk: its last id, or NULL when it came short (the walk is done).
CREATE OR REPLACE FUNCTION work_gdpr_walk_next(p_ids uuid[], p_limit int) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN cardinality(p_ids) < p_limit THEN NULL ELSE p_ids[cardinality(p_ids)]::text END
$$;

-- Take back the counters of deleted live messages (pending, claimed), once per queue, in queue order.
CREATE OR REPLACE FUNCTION work_gdpr_uncount(p_queues bigint[], p_states text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
    FOR r IN SELECT u.q, count(*) FILTER (WHERE u.s = 'pending') AS p, count(*) FILTER (WHERE u.s = 'claimed') AS c
             FROM unnest(p_queues, p_states) u(q, s) GROUP BY u.q ORDER BY u.q LOOP
        IF r.p + r.c > 0 THEN
            PERFORM work_count(r.q, -r.p, -r.c, 0, 0, 0);
        END IF;
    END LOOP;
END $$;

-- ---- erasure steps ------------------------------------------------------------------------------

-- Events about the actor's data (first: they are found through the messages they are about).
-- Of events caused by the actor's messages: redact clears the correlation id, delete removes them.
-- Of events of the actor's claims (their message's claimer, or `claimed_by` in the payload) and of
-- its subscriptions' deliveries: the response, reason and claimer in the payload are redacted.
CREATE OR REPLACE FUNCTION work_gdpr_erase_events(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[] := work_gdpr_walk(p_after, p_limit);
    v_subs text[];
    v_own uuid[];
    v_mark uuid[];
    v_q bigint[];
    v_s text[];
    k int := 0;
BEGIN
    v_subs := ARRAY(SELECT x.id::text FROM work_subscriptions x WHERE x.tenant_id = j.tenant_id
                    AND x.subscriber_type = j.actor_type AND x.subscriber_id = j.actor_id);
    SELECT coalesce(array_agg(e.id) FILTER (WHERE e.own), '{}'), coalesce(array_agg(e.id) FILTER (WHERE e.mark), '{}')
    INTO v_own, v_mark
    FROM (SELECT e.id,
                 coalesce(m.source_type = j.actor_type AND m.source_id = j.actor_id, false) AS own,
                 coalesce(e.body#>>'{payload,claimed_by}' = j.actor_id, false)
                 OR (e.body#>>'{payload,subscription_id}' IS NULL AND coalesce(m.claimed_by = j.actor_id, false))
                 OR coalesce(e.body#>>'{payload,subscription_id}' = ANY (v_subs), false) AS mark
          FROM work_messages e
          LEFT JOIN work_messages m
                 ON m.id = CASE WHEN e.causation_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                                THEN e.causation_id::uuid END
          WHERE e.id = ANY (v_ids) AND e.tenant_id = j.tenant_id AND e.source_type = 'system'
          ORDER BY e.id FOR UPDATE OF e) e;
    IF j.mode = 'delete' AND cardinality(v_own) > 0 THEN
        WITH gone AS (
            DELETE FROM work_messages w WHERE w.id = ANY (v_own)
            RETURNING w.queue_id, CASE WHEN w.ended_at IS NULL THEN w.state END AS state
        ) SELECT array_agg(queue_id), array_agg(state) INTO v_q, v_s FROM gone;
        PERFORM work_gdpr_uncount(coalesce(v_q, '{}'), coalesce(v_s, '{}'));
        k := coalesce(cardinality(v_q), 0);
        v_mark := ARRAY(SELECT u FROM unnest(v_mark) u WHERE u <> ALL (v_own));
        v_own := '{}';
    END IF;
    UPDATE work_messages w
    SET correlation_id = CASE WHEN w.id = ANY (v_own) THEN NULL ELSE w.correlation_id END,
        body = jsonb_set(w.body, '{payload}',
                         CASE WHEN w.id = ANY (v_own) AND w.body->'payload' ? 'correlation_id'
                              THEN (w.body->'payload') || '{"correlation_id": null}' ELSE w.body->'payload' END
                         || CASE WHEN w.id = ANY (v_mark)
                                 THEN work_gdpr_mask(w.body->'payload', ARRAY['response', 'reason'])
                                      || CASE WHEN w.body->'payload' ? 'claimed_by'
                                              THEN '{"claimed_by": "redacted"}'::jsonb ELSE '{}' END
                                 ELSE '{}' END),
        updated_at = clock_timestamp()
    WHERE w.id = ANY (v_own || v_mark) AND w.body ? 'payload';
    n := k + (SELECT count(DISTINCT u) FROM unnest(v_own || v_mark) u);
    last := work_gdpr_walk_next(v_ids, p_limit);
END $$;

-- Messages the actor published (and their dead-letter copies), by the source index.
CREATE OR REPLACE FUNCTION work_gdpr_erase_messages(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_seqs bigint[];
    v_q bigint[];
    v_s text[];
BEGIN
    SELECT coalesce(array_agg(x.id ORDER BY x.seq), '{}'), coalesce(array_agg(x.seq ORDER BY x.seq), '{}')
    INTO v_ids, v_seqs
    FROM (SELECT w.id, w.seq FROM work_messages w
          WHERE w.tenant_id = j.tenant_id AND w.source_type <> 'system'
            AND w.source_type = j.actor_type AND w.source_id = j.actor_id
            AND w.seq > coalesce(p_after::bigint, 0)
          ORDER BY w.seq LIMIT p_limit FOR UPDATE) x;
    IF j.mode = 'delete' THEN
        WITH gone AS (
            DELETE FROM work_messages w WHERE w.id = ANY (v_ids)
            RETURNING w.queue_id, CASE WHEN w.ended_at IS NULL THEN w.state END AS state
        ) SELECT array_agg(queue_id), array_agg(state) INTO v_q, v_s FROM gone;
        PERFORM work_gdpr_uncount(coalesce(v_q, '{}'), coalesce(v_s, '{}'));
    ELSE
        UPDATE work_messages w
        SET body = work_gdpr_marker(), labels = '{"redacted": "true"}', content_type = 'application/json',
            hitl_spec = CASE WHEN w.hitl_spec IS NOT NULL THEN work_gdpr_marker() END,
            correlation_id = NULL, idempotency_key = NULL, source_type = 'redacted', source_id = NULL,
            updated_at = clock_timestamp()
        WHERE w.id = ANY (v_ids);
    END IF;
    n := cardinality(v_ids);
    last := CASE WHEN n < p_limit THEN NULL ELSE v_seqs[n]::text END;
END $$;

-- The actor's claims on any message: its response, its fail reason and its name as the claimer.
-- (The same in both modes: the message is its publisher's.)
CREATE OR REPLACE FUNCTION work_gdpr_erase_claims(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE v_ids uuid[] := work_gdpr_walk(p_after, p_limit);
BEGIN
    UPDATE work_messages w
    SET response = CASE WHEN w.response IS NOT NULL THEN work_gdpr_marker() END,
        failure_reason = CASE WHEN w.failure_reason IS NOT NULL THEN 'redacted' END,
        claimed_by = 'redacted', updated_at = clock_timestamp()
    WHERE w.id = ANY (v_ids) AND w.tenant_id = j.tenant_id AND w.claimed_by = j.actor_id
      AND w.source_type <> 'system';
    GET DIAGNOSTICS n = ROW_COUNT;
    last := work_gdpr_walk_next(v_ids, p_limit);
END $$;

-- Deliveries of the actor's subscriptions: redacted (response, fail reason), or deleted, their
-- broadcast messages settling as they would when the subscription is deleted.
CREATE OR REPLACE FUNCTION work_gdpr_erase_deliveries(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_subs uuid[];
    v_keys text[];
    v_msgs uuid[];
BEGIN
    v_subs := ARRAY(SELECT x.id FROM work_subscriptions x WHERE x.tenant_id = j.tenant_id
                    AND x.subscriber_type = j.actor_type AND x.subscriber_id = j.actor_id);
    IF j.mode = 'delete' THEN
        WITH doomed AS (
            SELECT d.subscription_id, d.message_id FROM work_deliveries d WHERE d.subscription_id = ANY (v_subs)
            ORDER BY d.subscription_id, d.message_id LIMIT p_limit FOR UPDATE
        ), gone AS (
            DELETE FROM work_deliveries d USING doomed x
            WHERE d.subscription_id = x.subscription_id AND d.message_id = x.message_id
            RETURNING d.message_id
        ) SELECT coalesce(array_agg(message_id), '{}') INTO v_msgs FROM gone;
        PERFORM work_settle(v_msgs);
        n := cardinality(v_msgs);
        last := CASE WHEN n < p_limit THEN NULL ELSE 'more' END;
        RETURN;
    END IF;
    WITH walk AS (
        SELECT d.subscription_id, d.message_id FROM work_deliveries d
        WHERE d.subscription_id = ANY (v_subs)
          AND (p_after IS NULL OR (d.subscription_id, d.message_id) > (split_part(p_after, '/', 1)::uuid,
                                                                        split_part(p_after, '/', 2)::uuid))
        ORDER BY d.subscription_id, d.message_id LIMIT p_limit FOR UPDATE
    ), changed AS (
        UPDATE work_deliveries d
        SET response = CASE WHEN d.response IS NOT NULL THEN work_gdpr_marker() END,
            failure_reason = CASE WHEN d.failure_reason IS NOT NULL THEN 'redacted' END,
            updated_at = clock_timestamp()
        FROM walk x WHERE d.subscription_id = x.subscription_id AND d.message_id = x.message_id
          AND (d.response IS NOT NULL OR d.failure_reason IS NOT NULL)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM changed), array_agg(x.subscription_id || '/' || x.message_id
                                                     ORDER BY x.subscription_id, x.message_id)
    INTO n, v_keys FROM walk x;
    last := CASE WHEN coalesce(cardinality(v_keys), 0) < p_limit THEN NULL ELSE v_keys[cardinality(v_keys)] END;
END $$;

-- The actor's subscriptions: the subscriber's name redacted, or the subscription deleted (with any
-- delivery made since the deliveries step, its messages settling).
CREATE OR REPLACE FUNCTION work_gdpr_erase_subscriptions(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_subs uuid[];
    v_msgs uuid[];
BEGIN
    v_subs := ARRAY(SELECT x.id FROM work_subscriptions x WHERE x.tenant_id = j.tenant_id
                    AND x.subscriber_type = j.actor_type AND x.subscriber_id = j.actor_id
                    ORDER BY x.id LIMIT p_limit FOR UPDATE);
    IF j.mode = 'delete' THEN
        v_msgs := ARRAY(SELECT d.message_id FROM work_deliveries d WHERE d.subscription_id = ANY (v_subs)
                        AND d.state IN ('pending', 'claimed'));
        DELETE FROM work_subscriptions WHERE id = ANY (v_subs);
        PERFORM work_settle(v_msgs);
    ELSE
        UPDATE work_subscriptions SET subscriber_type = 'redacted', subscriber_id = 'redacted',
               updated_at = clock_timestamp()
        WHERE id = ANY (v_subs);
    END IF;
    n := cardinality(v_subs);
    last := CASE WHEN n < p_limit THEN NULL ELSE 'more' END;
END $$;

-- A batch of a walk of the tenant's journal rows in order (its index), after the row p_after: the
-- rows holding up to p_limit entries (one row at least), as the last one's seq (`hi`: the batch is
-- the rows after p_after up to hi), and the walk's next cursor (NULL once it reached the end).
CREATE OR REPLACE FUNCTION work_gdpr_journal_walk(p_tenant uuid, p_after text, p_limit int, OUT hi bigint,
                                                  OUT last text)
LANGUAGE plpgsql STABLE AS $$
DECLARE v_rows int; v_kept int;
BEGIN
    SELECT max(x.seq) FILTER (WHERE x.run <= p_limit OR x.first), count(*), count(*) FILTER (WHERE x.run <= p_limit OR x.first)
    INTO hi, v_rows, v_kept
    FROM (SELECT w.seq, sum(w.k) OVER (ORDER BY w.seq) AS run, w.seq = min(w.seq) OVER () AS first
          FROM (SELECT c.seq, coalesce(cardinality(c.message_ids), 1) AS k FROM work_journal c
                WHERE c.tenant_id = p_tenant AND c.seq > coalesce(p_after::bigint, -1)
                ORDER BY c.seq LIMIT p_limit) w) x;
    hi := coalesce(hi, coalesce(p_after::bigint, -1));
    last := CASE WHEN v_rows < p_limit AND v_kept = v_rows THEN NULL ELSE hi::text END;
END $$;

-- A journal row with the entries of these messages erased (p_delete: left out of every read) or
-- redacted (their correlation id cleared, their details the marker).
CREATE OR REPLACE FUNCTION work_gdpr_journal_row(c work_journal, p_ids uuid[], p_delete boolean) RETURNS work_journal
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE n int := coalesce(cardinality(c.message_ids), 0);
BEGIN
    IF cardinality(c.correlation_ids) = 1 AND n > 1 THEN  -- one element held every entry's: one each now
        c.correlation_ids := array_fill(c.correlation_ids[1], ARRAY[n]);
    END IF;
    c.payloads := coalesce(c.payloads, array_fill(NULL::jsonb, ARRAY[n]));
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN c.message_ids[i] IS NULL OR c.message_ids[i] <> ALL (p_ids);
        IF c.correlation_ids IS NOT NULL THEN
            c.correlation_ids[i] := NULL;
        END IF;
        IF p_delete THEN
            c.message_ids[i] := NULL;
            c.payloads[i] := NULL;
        ELSIF coalesce(c.payloads[i], c.payload) IS NOT NULL THEN
            c.payloads[i] := work_gdpr_marker();
        END IF;
    END LOOP;
    c.correlation_ids := CASE WHEN cardinality(array_remove(c.correlation_ids, NULL)) > 0 THEN c.correlation_ids END;
    c.payloads := CASE WHEN cardinality(array_remove(c.payloads, NULL)) > 0 THEN c.payloads END;
    RETURN c;
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_erase_audit(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_lo bigint := coalesce(p_after::bigint, -1);
    v_hi bigint;
    v_mine uuid[];
    v_more int;
BEGIN
    SELECT w.hi, w.last INTO v_hi, last FROM work_gdpr_journal_walk(j.tenant_id, p_after, p_limit) w;
    -- Entries about the actor's own messages: erased (delete) or redacted.
    v_mine := ARRAY(SELECT DISTINCT e.message_id
                    FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e
                    JOIN work_messages m ON m.id = e.message_id
                    WHERE c.tenant_id = j.tenant_id AND c.seq > v_lo AND c.seq <= v_hi
                      AND m.source_type = j.actor_type AND m.source_id = j.actor_id);
    n := (SELECT count(*) FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e
          WHERE c.tenant_id = j.tenant_id AND c.seq > v_lo AND c.seq <= v_hi AND e.message_id = ANY (v_mine));
    UPDATE work_journal c
    SET (message_ids, correlation_ids, payloads) = (SELECT x.message_ids, x.correlation_ids, x.payloads
                                                    FROM work_gdpr_journal_row(c, v_mine, j.mode = 'delete') x)
    WHERE c.tenant_id = j.tenant_id AND c.seq > v_lo AND c.seq <= v_hi AND c.message_ids && v_mine;
    -- Rows the actor wrote, and rows naming it as the claimer: the actor `redacted`, every entry's
    -- details the marker.
    WITH changed AS (
        UPDATE work_journal c
        SET actor_type = CASE WHEN c.actor_type = j.actor_type AND c.actor_id = j.actor_id THEN 'redacted'
                              ELSE c.actor_type END,
            actor_id = CASE WHEN c.actor_type = j.actor_type AND c.actor_id = j.actor_id THEN 'redacted'
                            ELSE c.actor_id END,
            payload = CASE WHEN c.payload IS NOT NULL THEN work_gdpr_marker() END,
            payloads = (SELECT array_agg(CASE WHEN p.x IS NOT NULL THEN work_gdpr_marker() END ORDER BY p.o)
                        FROM unnest(c.payloads) WITH ORDINALITY p(x, o))
        WHERE c.tenant_id = j.tenant_id AND c.seq > v_lo AND c.seq <= v_hi
          AND ((c.actor_type = j.actor_type AND c.actor_id = j.actor_id) OR c.payload->>'claimed_by' = j.actor_id)
        RETURNING (SELECT count(*) FROM work_journal_unnest(c) e) AS k
    )
    SELECT coalesce(sum(k), 0) INTO v_more FROM changed;
    n := n + v_more;
END $$;

-- ---- export steps -------------------------------------------------------------------------------

-- Append one part of JSON lines (records as given) to the job's export; answers how many.
CREATE OR REPLACE FUNCTION work_gdpr_export_part(p_job uuid, p_records jsonb[]) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(cardinality(p_records), 0) = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO work_gdpr_export_parts (job_id, part, records, lines)
    SELECT p_job, coalesce((SELECT max(part) FROM work_gdpr_export_parts WHERE job_id = p_job), 0) + 1,
           cardinality(p_records), (SELECT string_agg(r::text, E'\n' ORDER BY o) || E'\n'
                                    FROM unnest(p_records) WITH ORDINALITY u(r, o));
    RETURN cardinality(p_records);
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_export_messages(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE v_rows jsonb[]; v_seqs bigint[];
BEGIN
    SELECT coalesce(array_agg(jsonb_build_object('record', 'message') || to_jsonb(d) ORDER BY x.seq), '{}'),
           coalesce(array_agg(x.seq ORDER BY x.seq), '{}')
    INTO v_rows, v_seqs
    FROM (SELECT w.id, w.seq FROM work_messages w
          WHERE w.tenant_id = j.tenant_id AND w.source_type <> 'system'
            AND w.source_type = j.actor_type AND w.source_id = j.actor_id
            AND w.seq > coalesce(p_after::bigint, 0)
          ORDER BY w.seq LIMIT p_limit) x
    JOIN work_message_docs d ON d.id = x.id;
    PERFORM work_gdpr_export_part(j.id, v_rows);
    n := cardinality(v_rows);
    last := CASE WHEN cardinality(v_seqs) < p_limit THEN NULL ELSE v_seqs[cardinality(v_seqs)]::text END;
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_export_claims(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE v_ids uuid[] := work_gdpr_walk(p_after, p_limit);
BEGIN
    n := work_gdpr_export_part(j.id, ARRAY(
        SELECT jsonb_build_object('record', 'claim', 'message_id', w.id, 'queue_id', q.queue_id,
                                  'scope_id', w.scope_id, 'state', w.state, 'claimed_by', w.claimed_by,
                                  'claimed_at', w.claimed_at, 'attempts', w.attempts, 'response', w.response,
                                  'failure_reason', w.failure_reason, 'ended_at', w.ended_at)
        FROM work_messages w JOIN work_queues q ON q.id = w.queue_id
        WHERE w.id = ANY (v_ids) AND w.tenant_id = j.tenant_id AND w.claimed_by = j.actor_id
          AND w.source_type <> 'system'
        ORDER BY w.id));
    last := work_gdpr_walk_next(v_ids, p_limit);
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_export_deliveries(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE v_rows jsonb[]; v_keys text[];
BEGIN
    SELECT coalesce(array_agg(jsonb_build_object(
               'record', 'delivery', 'subscription_id', d.subscription_id, 'message_id', d.message_id,
               'state', d.state, 'attempts', d.attempts, 'claimed_at', d.claimed_at, 'response', d.response,
               'failure_reason', d.failure_reason, 'created_at', d.created_at, 'ended_at', d.ended_at)
               ORDER BY d.subscription_id, d.message_id), '{}'),
           array_agg(d.subscription_id || '/' || d.message_id ORDER BY d.subscription_id, d.message_id)
    INTO v_rows, v_keys
    FROM (SELECT d.* FROM work_deliveries d JOIN work_subscriptions x ON x.id = d.subscription_id
          WHERE x.tenant_id = j.tenant_id AND x.subscriber_type = j.actor_type AND x.subscriber_id = j.actor_id
            AND (p_after IS NULL OR (d.subscription_id, d.message_id) > (split_part(p_after, '/', 1)::uuid,
                                                                          split_part(p_after, '/', 2)::uuid))
          ORDER BY d.subscription_id, d.message_id LIMIT p_limit) d;
    n := work_gdpr_export_part(j.id, v_rows);
    last := CASE WHEN n < p_limit THEN NULL ELSE v_keys[n] END;
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_export_subscriptions(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE v_rows jsonb[];
BEGIN
    SELECT coalesce(array_agg(jsonb_build_object(
               'record', 'subscription', 'id', x.id, 'scope_id', x.scope_id, 'queue_id', q.queue_id,
               'subscriber_type', x.subscriber_type, 'subscriber_id', x.subscriber_id, 'filter', x.filter,
               'delivery_mode', x.delivery_mode, 'push_url', x.push_url, 'state', x.state,
               'created_at', x.created_at, 'updated_at', x.updated_at) ORDER BY x.id), '{}')
    INTO v_rows
    FROM (SELECT * FROM work_subscriptions s WHERE s.tenant_id = j.tenant_id AND s.subscriber_type = j.actor_type
            AND s.subscriber_id = j.actor_id AND s.id > coalesce(p_after::uuid, '00000000-0000-0000-0000-000000000000')
          ORDER BY s.id LIMIT p_limit) x
    JOIN work_queues q ON q.id = x.queue_id;
    n := work_gdpr_export_part(j.id, v_rows);
    last := CASE WHEN n < p_limit THEN NULL ELSE (v_rows[n]->>'id') END;
END $$;

CREATE OR REPLACE FUNCTION work_gdpr_export_audit(j work_gdpr_jobs, p_after text, p_limit int, OUT n int, OUT last text)
LANGUAGE plpgsql AS $$
DECLARE
    v_lo bigint := coalesce(p_after::bigint, -1);
    v_hi bigint;
BEGIN
    SELECT w.hi, w.last INTO v_hi, last FROM work_gdpr_journal_walk(j.tenant_id, p_after, p_limit) w;
    n := work_gdpr_export_part(j.id, ARRAY(
        SELECT jsonb_build_object('record', 'audit', 'event_type', e.event_type, 'at', e.at,
                                  'scope_id', e.scope_id, 'resource_type', e.resource_type,
                                  'resource_id', coalesce(e.resource_id, e.message_id::text),
                                  'correlation_id', e.correlation_id, 'outcome', e.outcome, 'details', e.payload)
        FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e
        WHERE c.tenant_id = j.tenant_id AND c.seq > v_lo AND c.seq <= v_hi
          AND c.actor_type = j.actor_type AND c.actor_id = j.actor_id
        ORDER BY e.seq));
END $$;
