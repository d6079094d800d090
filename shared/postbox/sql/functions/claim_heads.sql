-- The claim-head rule, one definition for both surfaces that keep a head: the queues surface
-- (queue_heads, queue_claim and queue_head_back in queues.sql) and the work surface's fifo queues
-- (work_claim_heads, work_claim and work_claim_head_back in work_claims.sql). Each surface keeps
-- its own head table (a row per queue, made with the queue and deleted with it) and its own walk;
-- what a head means and how it moves is decided here, from the row's two values:
--
-- * A claim walks from the head: messages at or after it in id (seq) order. Once the head row's
--   last walk from the front is more than 250 ms old, the next claim that can take the queue's
--   walk lock (transaction-level, in the surface's key space) walks from the front instead, so a
--   message that turned visible behind the head without pulling it back (a send whose id was drawn
--   before others' but committed after them, a busy head row) is found within that time. With no
--   head row (the queue is going), a claim walks from the front.
-- * After a claim the head moves past what it took (never back), except after a walk from the
--   front that filled its batch, which sets the head where it found the first of them; a walk from
--   the front records its time. A claim writes the row only when it changes it, never waiting for
--   it (SKIP LOCKED: a claim holding it moves it as far).
-- * When a message becomes visible behind the head (a release, a fail, a recovered or
--   dead-lettered claim), the head moves back to it.

CREATE OR REPLACE FUNCTION claim_head_full(p_scanned timestamptz, p_space int, p_queue bigint) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT p_scanned IS NULL
        OR (p_scanned < clock_timestamp() - interval '250 milliseconds'
            AND pg_try_advisory_xact_lock(p_space, (p_queue % 2147483648)::int))  -- one such walk at a time
$$;

-- Where the walk starts in id order.
CREATE OR REPLACE FUNCTION claim_head_from(p_head bigint, p_full boolean) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_full THEN 0 ELSE p_head END
$$;

-- The head after a claim that walked (from the front when p_full) and took messages up to
-- p_next - 1 (NULL: nothing that moves it), filling its batch when p_filled.
CREATE OR REPLACE FUNCTION claim_head_next(p_head bigint, p_next bigint, p_full boolean, p_filled boolean)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_next IS NULL THEN p_head
                WHEN p_full AND p_filled THEN p_next
                ELSE greatest(p_head, p_next) END
$$;

-- Whether that claim writes the head row at all.
CREATE OR REPLACE FUNCTION claim_head_moves(p_head bigint, p_next bigint, p_full boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(p_full OR p_next > p_head, false)
$$;

-- The row's time of the last walk from the front, after that claim.
CREATE OR REPLACE FUNCTION claim_head_scanned(p_scanned timestamptz, p_full boolean) RETURNS timestamptz
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_full THEN clock_timestamp() ELSE p_scanned END
$$;

-- The head once message p_id is visible again (moved back to it when it is behind the head).
CREATE OR REPLACE FUNCTION claim_head_back(p_head bigint, p_id bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT least(p_head, p_id)
$$;
