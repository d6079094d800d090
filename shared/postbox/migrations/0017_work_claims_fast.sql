-- Faster claims and completions on the work surface: the claim becomes a HOT update.
--
-- A claim rewrites a message row (state, visible_at, attempts, claim token). In 0013 `state` and
-- `visible_at` were indexed (the claim walk's partial index on state = 'pending', the claimed index
-- on visible_at, the listing index on state), so no claim could update its row in place: each one
-- wrote a new row version plus an entry in every index, and the completion did it again. Now no
-- index holds a column the claim changes, and the table keeps half of each page free (as the
-- message engine's does), so a claim updates its rows in place (HOT) and only the completion, which
-- ends the row, writes index entries.
--
-- * The claim walk's index holds every live message (ended_at IS NULL), pending or claimed, in
--   claim order; a message leaves it when it ends. A claim takes what is visible (visible_at
--   passed): a pending message, or a claimed one whose claim ran out (as the message engine does).
--   A claim that ran out on the last attempt is dead-lettered by the claim that finds it, the
--   others are claimed again at once with failure_reason 'visibility timeout'. The agent's sweep
--   still puts expired claims back to pending for queues no one claims from.
-- * Listing: live messages (pending, claimed) by a (queue_id, seq) index of live rows, filtered by
--   state; ended ones by `ended_state`, a stored column that is NULL while the message lives (so a
--   claim does not change it) and its final state once it ends.
-- * Expiry and aging sweeps walk indexes whose predicate is ended_at (not state).
-- * A fifo queue's claims start at its claim head (work_claim_heads, below), past the dead and
--   claimed entries at the front of the claim index.
-- * The batch finish reads its items once and looks messages up only for refused items.

ALTER TABLE work_messages SET (fillfactor = 50);
ALTER TABLE work_messages
    ADD COLUMN ended_state text GENERATED ALWAYS AS (CASE WHEN ended_at IS NOT NULL THEN state END) STORED;

DROP INDEX work_messages_claim;
DROP INDEX work_messages_claimed;
DROP INDEX work_messages_list;
DROP INDEX work_messages_expiry;
DROP INDEX work_messages_aging;
CREATE INDEX work_messages_claim ON work_messages (queue_id, rank, seq) WHERE ended_at IS NULL;
CREATE INDEX work_messages_live ON work_messages (queue_id, seq) WHERE ended_at IS NULL;
CREATE INDEX work_messages_list ON work_messages (queue_id, ended_state, seq) WHERE ended_at IS NOT NULL;
CREATE INDEX work_messages_expiry ON work_messages (expires_at) WHERE ended_at IS NULL AND expires_at IS NOT NULL;
CREATE INDEX work_messages_aging ON work_messages (aged_at) WHERE ended_at IS NULL AND aged_at IS NOT NULL;

-- The claim head of a fifo queue (as the message engine's `queue_heads`): messages that ended
-- leave dead entries at the front of the claim index until vacuum, and claimed ones stay there
-- while they are held, so a claim of a fifo queue starts at `head`, the seq after the last one
-- claimed, instead of at the front. Messages claimable behind the head (released, failed after
-- their backoff, claims that ran out, delayed ones come due, publishes that committed after later
-- ones) are found by a walk from the front, which one claim per queue makes when the last is older
-- than 250 ms, and which any claim makes when the walk from the head comes short: a claim that
-- answers fewer messages than asked has looked at the whole queue. A release, a fail and the
-- agent's recovery pull the head back to the message at once. Priority and deadline queues (whose
-- new messages may sort before the ones claimed) always walk from the front.
CREATE TABLE work_claim_heads (
    queue_id   bigint PRIMARY KEY REFERENCES work_queues(id) ON DELETE CASCADE,
    head       bigint NOT NULL DEFAULT 0,
    scanned_at timestamptz NOT NULL DEFAULT '-infinity'
) WITH (fillfactor = 50);
INSERT INTO work_claim_heads (queue_id) SELECT id FROM work_queues;

CREATE FUNCTION work_claim_head_created() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO work_claim_heads (queue_id) VALUES (NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER work_claim_head_created AFTER INSERT ON work_queues
    FOR EACH ROW EXECUTE FUNCTION work_claim_head_created();

-- Pull a queue's head back to p_seq, so the next claim walks from there. It may wait for the head
-- row: a claim takes it last (and never waits for it), so it is never held by one waiting for us.
CREATE FUNCTION work_claim_head_back(p_queue bigint, p_seq bigint) RETURNS void LANGUAGE sql AS $$
    UPDATE work_claim_heads SET head = p_seq WHERE queue_id = p_queue AND head > p_seq;
$$;

-- Claims whose time ran out go back to pending (at once, no backoff), or to the dead letter when
-- they have used their attempts: the visibility-timeout agent's sweep (p_queue NULL: every queue
-- holding claims) or one queue's. Claims find them through the claim walk's index of live messages.
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
    -- Dead letters first: counter rows are always taken in the order dead letter, queue, events.
    IF cardinality(v_dead) > 0 THEN
        PERFORM work_dead_letter(v_dead, 'visibility timeout expired after the last attempt');
    END IF;
    IF cardinality(v_back) > 0 THEN
        FOR r IN
            WITH moved AS (
                UPDATE work_messages SET state = 'pending', visible_at = clock_timestamp(), claim_token = NULL,
                       failure_reason = 'visibility timeout', updated_at = clock_timestamp()
                WHERE id = ANY (v_back) RETURNING queue_id, seq
            ) SELECT queue_id, count(*) AS n, min(seq) AS first FROM moved GROUP BY queue_id ORDER BY queue_id
        LOOP
            PERFORM work_count(r.queue_id, r.n, -r.n, 0, 0, 0);
            PERFORM work_claim_head_back(r.queue_id, r.first);
        END LOOP;
    END IF;
    RETURN cardinality(v_back) + cardinality(v_dead);
END $$;

-- Claim up to p_n messages in the queue's order for p_vt seconds (each message's own
-- visibility_timeout_s when NULL). A paused queue, or a paused or archived scope, claims nothing.
-- One walk of the live messages in claim order (from the head in a fifo queue) takes what is
-- visible: pending messages, and claims that ran out (claimed again at once, or dead-lettered when
-- that was their last attempt, the walk going on to fill the batch), so an expired claim is
-- claimable as soon as its time is up, without a sweep.
CREATE OR REPLACE FUNCTION work_claim(p_tenant uuid, p_scope uuid, p_queue uuid, p_n int, p_vt int, p_claimer text)
RETURNS json LANGUAGE plpgsql AS $$
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
    m work_messages;
BEGIN
    -- Lost in a crash, a claim only makes its messages claimable again (see docs: Durability).
    PERFORM set_config('synchronous_commit', 'off', true);
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(p_scope, p_queue);
    IF s.state IN ('paused', 'archived') OR q.state = 'paused' THEN
        RETURN '[]'::json;
    END IF;
    IF q.ordering = 'fifo' THEN
        SELECT h.head, h.scanned_at INTO v_head, v_scanned FROM work_claim_heads h WHERE h.queue_id = q.id;
        v_full := v_head IS NULL OR (v_scanned < clock_timestamp() - interval '250 milliseconds'
                                     -- one walk from the front at a time per queue: the others use the head
                                     AND pg_try_advisory_xact_lock(x'5743'::int, (q.id % 2147483648)::int));
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
                                      CASE WHEN v_full THEN 0 ELSE v_head END)
              AND x.visible_at <= clock_timestamp()
              AND (x.expires_at IS NULL OR x.expires_at > clock_timestamp())
              AND x.ctid <> ALL (v_all)  -- rows this claim holds already (SKIP LOCKED skips only others')
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
        WITH claimed AS (
            UPDATE work_messages w SET state = 'claimed', attempts = w.attempts + 1, claimed_by = p_claimer,
                   claim_token = gen_random_uuid(), claimed_at = clock_timestamp(), updated_at = clock_timestamp(),
                   visible_at = clock_timestamp() + coalesce(p_vt, w.visibility_timeout_s) * interval '1 second',
                   failure_reason = CASE WHEN w.state = 'claimed' THEN 'visibility timeout' ELSE w.failure_reason END
            WHERE w.ctid = ANY (v_all) AND w.queue_id = q.id
            RETURNING w.id, w.rank, w.seq
        )
        SELECT array_agg(c.id ORDER BY c.rank, c.seq) INTO v_claimed FROM claimed c;
        IF v_pending > 0 THEN
            PERFORM work_count(q.id, -v_pending, v_pending, 0, 0, 0);
        END IF;
        IF s.emit_claimed AND NOT q.is_system THEN
            FOR m IN SELECT w.* FROM unnest(v_claimed) WITH ORDINALITY u(id, n) JOIN work_messages w ON w.id = u.id
                     ORDER BY u.n LOOP
                PERFORM work_emit(s, 'scaiqueue.message.claimed', m, jsonb_build_object('claimed_by', p_claimer));
            END LOOP;
            PERFORM work_count(s.events_queue_id, cardinality(v_claimed), 0, cardinality(v_claimed), 0, 0);
        END IF;
    END IF;
    -- Last (so a claim never holds the head row while it waits for anything): move the head past
    -- what was taken, never waiting for its row (a claim holding it moves it as far). A walk from
    -- the front records its time, and, when it filled its batch, may pull the head back to it.
    IF q.ordering = 'fifo' AND (v_full OR v_next > v_head) THEN
        UPDATE work_claim_heads h SET
            scanned_at = CASE WHEN v_full THEN clock_timestamp() ELSE h.scanned_at END,
            head = CASE WHEN v_next IS NULL THEN h.head
                        WHEN v_full AND cardinality(v_all) >= p_n THEN v_next
                        ELSE greatest(h.head, v_next) END
        WHERE h.queue_id = (SELECT l.queue_id FROM work_claim_heads l WHERE l.queue_id = q.id
                            FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_all) = 0 THEN
        RETURN '[]'::json;
    END IF;
    RETURN (SELECT json_agg(d ORDER BY u.n)
            FROM unnest(v_claimed) WITH ORDINALITY u(id, n) JOIN work_message_docs d ON d.id = u.id);
END $$;

-- Pending or claimed messages past their ttl_seconds or deadline end as `expired`.
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
            RETURNING d.queue_id, d.state
        )
        SELECT queue_id, count(*) FILTER (WHERE state = 'pending') AS p, count(*) FILTER (WHERE state = 'claimed') AS c
        FROM ended GROUP BY queue_id ORDER BY queue_id
    LOOP
        PERFORM work_count(r.queue_id, -r.p, -r.c, 0, 0, 0);
        n := n + r.p + r.c;
    END LOOP;
    RETURN n;
END $$;

-- Priority aging (as in 0013), over the live messages' aging index.
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

-- One message's complete, fail, release, extend or cancel, as in 0013; a fail or a release pulls
-- its queue's claim head back to the message, so the next claim finds it at once.
-- Act on one message of a scope; p_item: {id, claim_token?, response?, reason?, seconds?}. Answers
-- the message's document; a refusal raises its error. A claim_token, when given, must be the
-- message's current one: a consumer whose claim ran out and was claimed again cannot act on it.
-- Retry backoff after a fail: 2^(attempts-1) seconds, at most 300.
CREATE OR REPLACE FUNCTION work_finish(p_tenant uuid, p_scope uuid, p_action text, p_item jsonb)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    m work_messages;
    v_err text;
    v_msg text;
    v_old text;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    SELECT * INTO m FROM work_messages WHERE id = (p_item->>'id')::uuid AND scope_id = s.id FOR UPDATE;
    IF m.id IS NULL THEN
        v_err := 'SCAIQUEUE_MESSAGE_NOT_FOUND'; v_msg := 'Message not found.';
    ELSIF p_action = 'cancel' THEN
        IF m.state NOT IN ('pending', 'claimed') THEN
            v_err := 'SCAIQUEUE_INVALID_TRANSITION'; v_msg := format('A %s message cannot be cancelled.', m.state);
        END IF;
    ELSIF m.state <> 'claimed' THEN
        v_err := 'SCAIQUEUE_NOT_CLAIMED'; v_msg := format('Message is %s, not claimed.', m.state);
    ELSIF (p_item->>'claim_token') IS NOT NULL AND (p_item->>'claim_token') IS DISTINCT FROM m.claim_token::text THEN
        v_err := 'SCAIQUEUE_NOT_CLAIMED'; v_msg := 'The claim token is not the current claim''s.';
    END IF;
    IF v_err IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = CASE WHEN v_err LIKE '%NOT_FOUND' THEN 'PB404' ELSE 'PB409' END,
            DETAIL = v_err, MESSAGE = v_msg;
    END IF;
    v_old := m.state;
    IF p_action = 'complete' THEN
        UPDATE work_messages SET state = 'completed', response = p_item->'response', claim_token = NULL,
               ended_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE id = m.id RETURNING * INTO m;
        PERFORM work_count(m.queue_id, 0, -1, 0, 1, 0);
        PERFORM work_emit(s, 'scaiqueue.message.completed', m, jsonb_build_object('response', m.response));
        PERFORM work_count(s.events_queue_id, 1, 0, 1, 0, 0);
    ELSIF p_action = 'fail' AND m.attempts >= m.max_retries THEN
        PERFORM work_dead_letter(ARRAY[m.id], p_item->>'reason');
    ELSIF p_action = 'fail' THEN
        UPDATE work_messages SET state = 'pending', failure_reason = p_item->>'reason', claim_token = NULL,
               visible_at = clock_timestamp() + least(300, power(2, greatest(m.attempts - 1, 0))) * interval '1 second',
               updated_at = clock_timestamp()
        WHERE id = m.id;
        PERFORM work_count(m.queue_id, 1, -1, 0, 0, 0);
        PERFORM work_claim_head_back(m.queue_id, m.seq);
    ELSIF p_action = 'release' THEN
        UPDATE work_messages SET state = 'pending', attempts = greatest(attempts - 1, 0), claim_token = NULL,
               visible_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE id = m.id;
        PERFORM work_count(m.queue_id, 1, -1, 0, 0, 0);
        PERFORM work_claim_head_back(m.queue_id, m.seq);
    ELSIF p_action = 'extend' THEN
        UPDATE work_messages
        SET visible_at = greatest(visible_at, clock_timestamp()) + (p_item->>'seconds')::int * interval '1 second',
            updated_at = clock_timestamp()
        WHERE id = m.id;
    ELSIF p_action = 'cancel' THEN
        UPDATE work_messages SET state = 'cancelled', claim_token = NULL, ended_at = clock_timestamp(),
               updated_at = clock_timestamp()
        WHERE id = m.id;
        PERFORM work_count(m.queue_id, CASE WHEN v_old = 'pending' THEN -1 ELSE 0 END,
                           CASE WHEN v_old = 'claimed' THEN -1 ELSE 0 END, 0, 0, 0);
    ELSE
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown action.';
    END IF;
    RETURN work_message_doc(m.id);
END $$;

-- The batch extension's complete, fail and release (behaviour as in 0013): the items are read once
-- into arrays (0013 read each item's response out of the request per row the update's join
-- looked at, a cost growing with the square of the batch), the update finds each message by its
-- id, and the answers look a message up only for an item that was refused.
CREATE OR REPLACE FUNCTION work_finish_batch(p_tenant uuid, p_scope uuid, p_action text, p_items jsonb, p_ids uuid[])
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    v_toks text[];      -- each item's claim_token, response and reason, in order (p_ids: its id)
    v_resps jsonb[];
    v_reasons text[];
    v_ok uuid[] := '{}';
    v_okq bigint[] := '{}';
    v_oks bigint[] := '{}';  -- release, fail: their seqs (the claim heads come back to them)
    v_dead uuid[] := '{}';
    v_state text;
    v_out jsonb;
    r record;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    IF p_action NOT IN ('complete', 'fail', 'release') THEN
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'VALIDATION_ERROR', MESSAGE = 'Unknown batch action.';
    END IF;
    SELECT array_agg(x.e->>'claim_token' ORDER BY x.ord), array_agg(x.e->'response' ORDER BY x.ord),
           array_agg(x.e->>'reason' ORDER BY x.ord)
    INTO v_toks, v_resps, v_reasons
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS x(e, ord);

    IF p_action = 'complete' THEN
        v_state := 'completed';
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.resp
            FROM unnest(p_ids, v_toks, v_resps) WITH ORDINALITY u(id, tok, resp, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), done AS (
            UPDATE work_messages w SET state = 'completed', response = g.resp, claim_token = NULL,
                   ended_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
            RETURNING w.id, w.queue_id, w.scope_id, w.message_type, w.correlation_id, w.attempts, w.response
        ), events AS (
            INSERT INTO work_messages (id, queue_id, scope_id, tenant_id, visible_at, message_type, body,
                                       correlation_id, causation_id, source_type, source_id, max_retries,
                                       visibility_timeout_s)
            SELECT d.event_id, s.events_queue_id, s.id, s.tenant_id, clock_timestamp(),
                   'scaiqueue.message.completed',
                   jsonb_build_object(
                       'event_type', 'scaiqueue.message.completed', 'event_id', d.event_id,
                       'source', 'scaiqueue/scopes/' || s.id || '/messages/' || d.id, 'tenant_id', s.tenant_id,
                       'payload', jsonb_build_object('message_id', d.id, 'scope_id', d.scope_id,
                                                     'queue_id', q.queue_id, 'message_type', d.message_type,
                                                     'correlation_id', d.correlation_id, 'attempts', d.attempts,
                                                     'response', d.response),
                       'timestamp', clock_timestamp()),
                   d.correlation_id, d.id::text, 'system', 'scaiqueue', 3, 30
            FROM (SELECT x.*, gen_random_uuid() AS event_id FROM done x) d  -- one event id per row
            JOIN work_queues q ON q.id = d.queue_id
        )
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(d.queue_id), '{}') INTO v_ok, v_okq FROM done d;
    ELSIF p_action = 'release' THEN
        v_state := 'pending';
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok FROM unnest(p_ids, v_toks) WITH ORDINALITY u(id, tok, n)
            WHERE u.id IS NOT NULL ORDER BY u.id, u.n
        ), moved AS (
            UPDATE work_messages w SET state = 'pending', attempts = greatest(w.attempts - 1, 0), claim_token = NULL,
                   visible_at = clock_timestamp(), updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text)
            RETURNING w.id, w.queue_id, w.seq
        )
        SELECT coalesce(array_agg(m.id), '{}'), coalesce(array_agg(m.queue_id), '{}'),
               coalesce(array_agg(m.seq), '{}') INTO v_ok, v_okq, v_oks FROM moved m;
    ELSE  -- fail: back to pending after the backoff, or to the dead letter after the last attempt
        v_state := 'pending';
        SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') INTO v_dead FROM (
            SELECT w.id FROM work_messages w
            JOIN (SELECT DISTINCT ON (u.id) u.id, u.tok FROM unnest(p_ids, v_toks) WITH ORDINALITY u(id, tok, n)
                  WHERE u.id IS NOT NULL ORDER BY u.id, u.n) g ON g.id = w.id
            WHERE w.scope_id = s.id AND w.state = 'claimed' AND (g.tok IS NULL OR g.tok = w.claim_token::text)
              AND w.attempts >= w.max_retries
            ORDER BY w.id FOR UPDATE OF w
        ) w;
        FOR r IN  -- dead letters first: counter rows in the usual order
            SELECT DISTINCT ON (u.id) u.id, u.reason
            FROM unnest(p_ids, v_reasons) WITH ORDINALITY u(id, reason, n) WHERE u.id = ANY (v_dead)
            ORDER BY u.id, u.n
        LOOP
            PERFORM work_dead_letter(ARRAY[r.id], r.reason);
        END LOOP;
        WITH given AS (
            SELECT DISTINCT ON (u.id) u.id, u.tok, u.reason
            FROM unnest(p_ids, v_toks, v_reasons) WITH ORDINALITY u(id, tok, reason, n)
            WHERE u.id IS NOT NULL AND u.id <> ALL (v_dead) ORDER BY u.id, u.n
        ), moved AS (
            UPDATE work_messages w SET state = 'pending', failure_reason = g.reason, claim_token = NULL,
                   visible_at = clock_timestamp()
                                + least(300, power(2, greatest(w.attempts - 1, 0))) * interval '1 second',
                   updated_at = clock_timestamp()
            FROM given g
            WHERE w.id = g.id AND w.scope_id = s.id AND w.state = 'claimed'
              AND (g.tok IS NULL OR g.tok = w.claim_token::text) AND w.attempts < w.max_retries
            RETURNING w.id, w.queue_id, w.seq
        )
        SELECT coalesce(array_agg(m.id), '{}'), coalesce(array_agg(m.queue_id), '{}'),
               coalesce(array_agg(m.seq), '{}') INTO v_ok, v_okq, v_oks FROM moved m;
    END IF;

    -- The counters, once per queue (dead letters counted themselves), then the events queue's: counter
    -- rows are always taken in the order dead letter, queue, events, so two calls never deadlock.
    FOR r IN SELECT u.q, count(*) AS n, min(u.seq) AS first FROM unnest(v_okq, v_oks) u(q, seq)
             GROUP BY u.q ORDER BY u.q LOOP
        IF p_action = 'complete' THEN
            PERFORM work_count(r.q, 0, -r.n, 0, r.n, 0);
        ELSE
            PERFORM work_count(r.q, r.n, -r.n, 0, 0, 0);
            PERFORM work_claim_head_back(r.q, r.first);
        END IF;
    END LOOP;
    IF p_action = 'complete' AND cardinality(v_ok) > 0 THEN
        PERFORM work_count(s.events_queue_id, cardinality(v_ok), 0, cardinality(v_ok), 0, 0);
    END IF;

    -- The answers, in order: each id acts once (its first mention); why the others did not (the
    -- message is looked up only for those).
    SELECT jsonb_agg(CASE
               WHEN ok.id IS NOT NULL THEN jsonb_build_object('id', a.id, 'ok', true, 'state', v_state)
               WHEN dl.id IS NOT NULL THEN jsonb_build_object('id', a.id, 'ok', true, 'state', 'dead_lettered')
               ELSE jsonb_build_object('id', p_items->(a.n::int - 1)->'id', 'ok', false, 'error', (
                   SELECT CASE
                       WHEN m.state IS NULL THEN jsonb_build_object('code', 'SCAIQUEUE_MESSAGE_NOT_FOUND',
                                                                    'message', 'Message not found.')
                       ELSE jsonb_build_object('code', 'SCAIQUEUE_NOT_CLAIMED', 'message',
                            format('Message is %s, or the claim token is not the current claim''s.', m.state)) END
                   FROM (SELECT (SELECT x.state FROM work_messages x WHERE x.id = a.id AND x.scope_id = s.id)
                         AS state) m))
           END ORDER BY a.n)
    INTO v_out
    FROM (SELECT u.n, u.id, row_number() OVER (PARTITION BY u.id ORDER BY u.n) = 1 AS first
          FROM unnest(p_ids) WITH ORDINALITY u(id, n)) a
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_ok) k(id)) ok ON a.first AND ok.id = a.id
    LEFT JOIN (SELECT DISTINCT k.id FROM unnest(v_dead) k(id)) dl ON a.first AND dl.id = a.id;
    RETURN coalesce(v_out, '[]');
END $$;
