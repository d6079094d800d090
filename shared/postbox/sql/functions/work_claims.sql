CREATE OR REPLACE FUNCTION work_claim_head_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO work_claim_heads (queue_id) VALUES (NEW.id);
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER work_claim_head_created AFTER INSERT ON work_queues
    FOR EACH ROW EXECUTE FUNCTION work_claim_head_created();

-- Pull a queue's head back to p_seq, so the next claim walks from there (the claim-head rule:
-- claim_heads.sql). It may wait for the head row: a claim takes it last (and never waits for it),
-- so it is never held by one waiting for us.
CREATE OR REPLACE FUNCTION work_claim_head_back(p_queue bigint, p_seq bigint) RETURNS void LANGUAGE sql AS $$
    UPDATE work_claim_heads SET head = claim_head_back(head, p_seq)
    WHERE queue_id = p_queue AND claim_head_back(head, p_seq) < head;
$$;

-- Claims whose time ran out go back to pending (at once, no backoff), or to the dead letter when
-- they have used their attempts: the visibility-timeout agent's sweep (p_queue NULL: every queue
-- holding claims by its folded counters; the agent folds first) or one queue's. Claims find them through the claim walk's index of live messages.
-- A claim that ran out and goes back to pending journals `scaiqueue.message.released`
-- by the system (payload reason `visibility timeout`).
CREATE OR REPLACE FUNCTION work_recover(p_queue bigint, p_limit int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_back uuid[];
    v_dead uuid[];
    r record;
BEGIN
    SELECT coalesce(array_agg(c.id) FILTER (WHERE c.attempts < c.max_retries), '{}'),
           coalesce(array_agg(c.id) FILTER (WHERE c.attempts >= c.max_retries), '{}')
    INTO v_back, v_dead
    FROM (SELECT x.id, x.attempts, x.max_retries
          FROM (SELECT p_queue AS queue_id WHERE p_queue IS NOT NULL
                UNION ALL
                SELECT k.queue_id FROM work_queue_counters k WHERE p_queue IS NULL
                GROUP BY k.queue_id HAVING sum(k.claimed) > 0) k
          CROSS JOIN LATERAL (
              SELECT y.id, y.attempts, y.max_retries FROM work_messages y
              WHERE y.queue_id = k.queue_id AND y.ended_at IS NULL AND y.state = 'claimed'
                AND y.visible_at <= clock_timestamp()
              ORDER BY y.rank, y.seq LIMIT p_limit FOR UPDATE SKIP LOCKED) x
          LIMIT p_limit) c;
    IF cardinality(v_dead) > 0 THEN
        -- The scopes' journal locks before any counter row (dead letters emit), in one order.
        PERFORM work_journal_lock(x.scope_id)
        FROM (SELECT DISTINCT w.scope_id FROM work_messages w WHERE w.id = ANY (v_dead) ORDER BY 1) x;
        PERFORM work_dead_letter(v_dead, 'visibility timeout expired after the last attempt');
    END IF;
    IF cardinality(v_back) > 0 THEN
        FOR r IN
            WITH moved AS (
                UPDATE work_messages SET state = 'pending', visible_at = clock_timestamp(), claim_token = NULL,
                       failure_reason = 'visibility timeout', updated_at = clock_timestamp()
                WHERE id = ANY (v_back)
                RETURNING id, queue_id, seq, scope_id, tenant_id, correlation_id, attempts
            ), journal AS (  -- a row per queue (and per 1,024 of its messages), counting their move
                INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, moved,
                                          payload, message_ids, attempts, correlation_ids)
                SELECT d.scope_id, d.tenant_id, d.queue_id,
                       'scaiqueue.message.released', 'system', 'work-visibility-timeout', count(*),
                       '{"reason": "visibility timeout"}', array_agg(d.id ORDER BY d.seq),
                       work_journal_compact(array_agg(d.attempts ORDER BY d.seq)),
                       work_journal_compact(array_agg(d.correlation_id ORDER BY d.seq))
                FROM (SELECT x.*, (row_number() OVER (PARTITION BY x.queue_id ORDER BY x.seq) - 1) / 1024 AS part
                      FROM moved x) d
                GROUP BY d.queue_id, d.part, d.scope_id, d.tenant_id
            )
            SELECT queue_id, min(seq) AS first FROM moved GROUP BY queue_id ORDER BY queue_id
        LOOP
            PERFORM work_claim_head_back(r.queue_id, r.first);
        END LOOP;
    END IF;
    RETURN cardinality(v_back) + cardinality(v_dead);
END $$;

-- ---- claim --------------------------------------------------------------------------------------

-- Claim up to p_n messages in the queue's order for p_vt seconds (each message's own
-- visibility_timeout_s when NULL). A paused queue, or a paused or archived scope, claims nothing.
-- Claims of this queue whose time ran out are recovered first (at most once a second per queue),
-- so claims never wait for the agent.
-- Claim up to p_n messages in the queue's order for p_vt seconds (each message's own
-- visibility_timeout_s when NULL). A paused queue, or a paused or archived scope, claims nothing.
-- One walk of the live messages in claim order (from the head in a fifo queue) takes what is
-- visible: pending messages, and claims that ran out (claimed again at once, or dead-lettered when
-- that was their last attempt, the walk going on to fill the batch), so an expired claim is
-- claimable as soon as its time is up, without a sweep.
-- With the claimer's actor: each claimed message journals `scaiqueue.message.claimed`
-- (one set-based insert; emitted when the scope asks for claimed events). A claim of the scope's
-- `_events` queue first materialises the events journalled since the last read.
-- A subscription's claim of a competing queue (work_subscription_claim) passes the subscription,
-- recorded as each message's `claimed_for`, and its filter: a filtered claim takes only the
-- messages the filter lets through, walks from the front and leaves the claim head where it is
-- (the messages it skips are the other claimers').
-- Answers the claimed messages as the text of a JSON array (work_claim_answers.sql: no JSON value
-- is built per message); work_claim answers the same as a JSON value.
CREATE OR REPLACE FUNCTION work_claim_text(p_tenant uuid, p_scope uuid, p_queue uuid, p_n int, p_vt int,
                                           p_claimer text, p_actor_type text DEFAULT NULL,
                                           p_actor_id text DEFAULT NULL, p_sub uuid DEFAULT NULL,
                                           p_filter jsonb DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    q work_queues;
    v_head bigint;
    v_scanned timestamptz;
    v_full boolean := true;
    v_take tid[];
    v_dead uuid[];
    v_fresh int;
    v_last bigint;
    v_next bigint;
    v_all tid[] := '{}';
    v_pending int := 0;
    v_claimed uuid[];
    v_emit boolean;
    v_shape text := work_claim_shape();  -- what the answer holds (work_claim_answers.sql)
    v_parts text[];
    v_now timestamptz;
    v_docs text;
BEGIN
    -- Lost in a crash, a claim only makes its messages claimable again (see docs: Durability).
    PERFORM set_config('synchronous_commit', 'off', true);
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    IF s.state IN ('paused', 'archived') OR q.state = 'paused' THEN
        RETURN '[]';
    END IF;
    v_emit := s.emit_claimed AND NOT q.is_system;
    IF q.id = s.events_queue_id THEN
        PERFORM work_events_sync(s.id);
    ELSIF v_emit THEN  -- before any counter row (a dead letter takes it itself, before its counters)
        PERFORM work_journal_lock(s.id);
    END IF;
    IF q.ordering = 'fifo' THEN
        -- From the head, or from the front (the claim-head rule: claim_heads.sql).
        SELECT h.head, h.scanned_at INTO v_head, v_scanned FROM work_claim_heads h WHERE h.queue_id = q.id;
        v_full := p_filter IS NOT NULL OR claim_head_full(v_scanned, x'5743'::int, q.id);  -- "WC"
    END IF;
    LOOP
        SELECT coalesce(array_agg(c.ctid) FILTER (WHERE c.state = 'pending' OR c.attempts < c.max_retries), '{}'),
               coalesce(array_agg(c.id) FILTER (WHERE c.state = 'claimed' AND c.attempts >= c.max_retries), '{}'),
               count(*) FILTER (WHERE c.state = 'pending'), max(c.seq)
        INTO v_take, v_dead, v_fresh, v_last
        FROM (
            SELECT x.ctid, x.id, x.seq, x.state, x.attempts, x.max_retries FROM work_messages x
            WHERE x.queue_id = q.id AND x.ended_at IS NULL
              AND x.state IN ('pending', 'claimed')  -- not a broadcast message its subscriptions deliver
              AND (x.rank, x.seq) >= (CASE WHEN v_full THEN -9223372036854775808 ELSE 0 END,
                                      claim_head_from(v_head, v_full))
              AND x.visible_at <= clock_timestamp()
              AND (x.expires_at IS NULL OR x.expires_at > clock_timestamp())
              AND x.ctid <> ALL (v_all)  -- rows this claim holds already (SKIP LOCKED skips only others')
              AND (p_filter IS NULL OR work_cond(p_filter, work_row_subject(x, q.slug)))
            ORDER BY x.rank, x.seq LIMIT (SELECT p_n - cardinality(v_all)) FOR UPDATE SKIP LOCKED
        ) c;
        v_all := v_all || v_take;
        v_pending := v_pending + v_fresh;
        v_next := greatest(v_next, v_last + 1);
        IF cardinality(v_dead) > 0 THEN
            PERFORM work_dead_letter(v_dead, 'visibility timeout expired after the last attempt');
        END IF;
        EXIT WHEN cardinality(v_all) >= p_n;
        IF cardinality(v_dead) = 0 THEN  -- the walk took all it could
            EXIT WHEN v_full;
            v_full := true;  -- from the head it came short: look behind the head too
        END IF;
    END LOOP;
    IF cardinality(v_all) > 0 THEN
        v_now := clock_timestamp();  -- one time for the whole claim, turned into text once
        v_parts := work_claim_parts(s, q, p_claimer, v_now, p_vt);
        WITH claimed AS (
            UPDATE work_messages w SET state = 'claimed', attempts = w.attempts + 1, claimed_by = p_claimer,
                   claim_token = gen_random_uuid(), claimed_at = v_now, updated_at = v_now,
                   visible_at = v_now + coalesce(p_vt, w.visibility_timeout_s) * interval '1 second',
                   failure_reason = CASE WHEN w.state = 'claimed' THEN 'visibility timeout' ELSE w.failure_reason END,
                   claimed_for = p_sub
            WHERE w.ctid = ANY (v_all) AND w.queue_id = q.id
            RETURNING w.id, w.rank, w.seq, w.correlation_id, w.attempts,
                      work_claimed_text(v_shape, v_parts, w.id, w.claim_token, w.attempts, w.visible_at,
                                        w.failure_reason, w.response, w.created_at,
                                        work_fields_text(w)) AS doc
        ), journal AS (  -- one row, entries in claim order; it counts the pending ones' move
            INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, emit, moved,
                                      payload, message_ids, attempts, correlation_ids)
            SELECT s.id, s.tenant_id, q.id, 'scaiqueue.message.claimed', coalesce(p_actor_type, 'api_key'),
                   coalesce(p_actor_id, p_claimer), v_emit, v_pending,
                   CASE WHEN v_emit THEN jsonb_build_object('claimed_by', p_claimer) END,
                   array_agg(c.id ORDER BY c.rank, c.seq),
                   work_journal_compact(array_agg(c.attempts ORDER BY c.rank, c.seq)),
                   work_journal_compact(array_agg(c.correlation_id ORDER BY c.rank, c.seq))
            FROM claimed c
        )
        SELECT array_agg(c.id ORDER BY c.rank, c.seq), string_agg(c.doc, ',' ORDER BY c.rank, c.seq)
        INTO v_claimed, v_docs FROM claimed c;
    END IF;
    -- Last (so a claim never holds the head row while it waits for anything): move the head past
    -- what was taken, never waiting for its row (claim_heads.sql).
    IF q.ordering = 'fifo' AND p_filter IS NULL AND claim_head_moves(v_head, v_next, v_full) THEN
        UPDATE work_claim_heads h SET
            scanned_at = claim_head_scanned(h.scanned_at, v_full),
            head = claim_head_next(h.head, v_next, v_full, cardinality(v_all) >= p_n)
        WHERE h.queue_id = (SELECT l.queue_id FROM work_claim_heads l WHERE l.queue_id = q.id
                            FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_all) = 0 THEN
        RETURN '[]';
    ELSIF v_shape = 'named' THEN
        RETURN work_claim_answer(v_claimed)::text;  -- the fields asked for (work_claim_answers.sql)
    END IF;
    RETURN '[' || v_docs || ']';
END $$;
