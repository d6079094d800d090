-- Add deltas to a queue's counters, inside the caller's statement or transaction.
CREATE OR REPLACE FUNCTION pq_count(
    p_queue bigint, p_pushed bigint, p_acked bigint, p_failed bigint, p_dead bigint, p_replayed bigint
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO pq_counters AS c (queue_id, slot, pushed, acked, failed, dead_lettered, replayed)
    VALUES (p_queue, counter_slot(x'4350'::int, p_queue),  -- "CP"
            p_pushed, p_acked, p_failed, p_dead, p_replayed)
    ON CONFLICT (queue_id, slot) DO UPDATE SET
        pushed = c.pushed + excluded.pushed, acked = c.acked + excluded.acked, failed = c.failed + excluded.failed,
        dead_lettered = c.dead_lettered + excluded.dead_lettered, replayed = c.replayed + excluded.replayed;
$$;

-- A queue made on first use (a push, a configure, a flow's source or sink), within the plan's
-- partitioned queues (PB403 max_partitioned_queues), or the one made meanwhile by another caller,
-- which the limit never refuses: the count is taken after the insert, under the lock taken before
-- it. Pushes call it only for a queue they did not find, so a push to an existing queue never waits
-- for the lock. Queues are resolved before any partition row is written, so a caller waiting for the
-- lock holds no row the holder could wait for.
CREATE OR REPLACE FUNCTION pq_queue_create(p_tenant uuid, p_name text) RETURNS pq_queues
LANGUAGE plpgsql AS $$
DECLARE
    q pq_queues;
BEGIN
    PERFORM plan_limit_lock(p_tenant, 'max_partitioned_queues');
    INSERT INTO pq_queues (tenant_id, name) VALUES (p_tenant, p_name)
    ON CONFLICT (tenant_id, name) DO NOTHING RETURNING * INTO q;
    IF FOUND THEN
        PERFORM plan_limit_check(p_tenant, 'max_partitioned_queues', 0);
    ELSE
        SELECT * INTO q FROM pq_queues WHERE tenant_id = p_tenant AND name = p_name;
    END IF;
    RETURN q;
END $$;

-- ---- Hot paths as functions: one round trip per call -------------------------------------------
-- Python frames and compresses; these resolve names, lock, allocate offsets and lease in SQL.
-- Errors a caller may hit are raised with SQLSTATEs of class PB and mapped in Python.
--
-- The lock order of partitioned queues, kept by every function here and by the Python paths
-- (partitioned/, log_engine/), so that two of them never wait for each other:
--   0. the tenant's max_partitioned_queues lock (pq_queue_create, only when a queue is made): a push
--      resolves every queue of the call before it writes any partition row;
--   1. log_partitions rows, in (queue name, partition name) order within a push, by id elsewhere;
--   2. log_cursors rows, by partition;
--   3. pq_dead_letters rows;
--   4. the pq_queues row: only ever KEY SHARE while anything above is held (the foreign keys of
--      pq_counters, pq_groups and pq_dead_letters take it when a row referring to the queue is
--      inserted). Creating a queue or a partition inserts with ON CONFLICT DO NOTHING and reads the
--      row again, never DO UPDATE: that locks the row FOR UPDATE, which waits for every KEY SHARE,
--      while the holders of those wait for the partitions it holds next (the deadlock of concurrent
--      first pushes). FOR UPDATE is taken only by a queue's deletion, after 1-3;
--   5. pq_counters slots (pq_count, the last write of a call).
-- A pop registering a new group takes 4 (KEY SHARE) before 2 but never waits for a cursor (it
-- claims with SKIP LOCKED). A `transaction` call makes all its pushes in one pq_push before its
-- acks, whatever the order of its operations. What can still meet in opposite orders (two calls
-- acking the same leases in opposite orders, a queue deleted under a cycle) is broken off by the
-- database (40P01) and run again by the transaction wrapper.

-- Push: every (queue, partition) group of one call appended in one round trip. Queues and
-- partitions are created on first use (a new partition gets a cursor for every group already
-- reading the queue). The caller guesses each queue's encryption setting and sends the hashes of
-- the ids it wants deduplicated; when a guess is wrong ('encryption' rows) or an id is already
-- stored ('duplicate' rows) nothing is appended and the caller re-frames and calls again.
-- Groups arrive sorted by (queue, partition) and their partitions are locked in that order, so
-- concurrent pushers never deadlock. Returns one 'appended' row per group: partition, first offset.
CREATE OR REPLACE FUNCTION pq_push(
    p_tenant uuid, p_queues text[], p_partitions text[], p_encrypted boolean[],
    p_counts int[], p_codecs smallint[], p_raw int[], p_frames bytea[],
    p_hashes bytea[], p_hash_groups int[], p_hash_positions int[], p_notify boolean
) RETURNS TABLE (r_kind text, r_group int, r_partition bigint, r_offset bigint, r_hash bytea, r_flag boolean)
LANGUAGE plpgsql AS $$
DECLARE
    n int := cardinality(p_queues);
    q pq_queues;
    v_pid bigint;
    v_first bigint;
    qids bigint[] := '{}';
    pids bigint[] := '{}';
    firsts bigint[] := '{}';
    touched bigint[] := '{}';
    added bigint[] := '{}';                   -- records appended per touched queue (its counter)
    retry boolean := false;
BEGIN
    FOR i IN 1..n LOOP  -- every queue first (one made here waits for no partition row of the call)
        IF i = 1 OR p_queues[i] <> p_queues[i - 1] THEN
            SELECT * INTO q FROM pq_queues WHERE tenant_id = p_tenant AND name = p_queues[i];
            IF NOT FOUND THEN
                q := pq_queue_create(p_tenant, p_queues[i]);
            END IF;
            IF q.encryption_enabled IS DISTINCT FROM p_encrypted[i] THEN
                retry := true;
                r_kind := 'encryption'; r_group := i; r_partition := NULL; r_offset := NULL; r_hash := NULL;
                r_flag := q.encryption_enabled;
                RETURN NEXT;
            END IF;
        END IF;
        qids[i] := q.id;
    END LOOP;
    FOR i IN 1..n LOOP
        LOOP  -- locked later, by the append, in group order
            SELECT id INTO v_pid FROM log_partitions
            WHERE owner_kind = 'pq' AND owner_id = qids[i] AND name = p_partitions[i];
            EXIT WHEN FOUND;
            INSERT INTO log_partitions (tenant_id, owner_kind, owner_id, name)
            VALUES (p_tenant, 'pq', qids[i], p_partitions[i])
            ON CONFLICT (owner_kind, owner_id, name) DO NOTHING RETURNING id INTO v_pid;
            IF FOUND THEN
                INSERT INTO log_cursors (partition_id, consumer_group, committed)
                SELECT v_pid, g.consumer_group, 0 FROM pq_groups g WHERE g.queue_id = qids[i] ON CONFLICT DO NOTHING;
                EXIT;
            END IF;
        END LOOP;
        pids[i] := v_pid;
    END LOOP;
    IF p_hashes IS NOT NULL AND cardinality(p_hashes) > 0 THEN
        -- Lock every partition of the call first (in group order) so two pushers of one id cannot
        -- both miss each other.
        PERFORM 1 FROM log_partitions p JOIN unnest(pids) WITH ORDINALITY AS u(id, k) ON p.id = u.id
        ORDER BY u.k FOR UPDATE OF p;
        RETURN QUERY
        SELECT 'duplicate'::text, u.g, pids[u.g], d."offset", u.h, NULL::boolean
        FROM unnest(p_hashes, p_hash_groups) AS u(h, g)
        CROSS JOIN LATERAL (SELECT x."offset" FROM log_dedup x WHERE x.partition_id = pids[u.g] AND x.hash = u.h) d;
        IF FOUND THEN
            retry := true;
        END IF;
    END IF;
    IF retry THEN
        RETURN;
    END IF;
    FOR i IN 1..n LOOP
        IF p_counts[i] > 0 THEN
            v_first := log_append(pids[i], p_counts[i], p_codecs[i], p_raw[i], p_frames[i]);
            IF NOT qids[i] = ANY (touched) THEN
                touched := touched || qids[i];
                added := added || 0::bigint;
            END IF;
            added[array_position(touched, qids[i])] := added[array_position(touched, qids[i])] + p_counts[i];
        ELSE
            SELECT next_offset INTO v_first FROM log_partitions WHERE id = pids[i];
        END IF;
        firsts[i] := v_first;
        r_kind := 'appended'; r_group := i; r_partition := pids[i]; r_offset := v_first; r_hash := NULL;
        r_flag := NULL;
        RETURN NEXT;
    END LOOP;
    IF p_hashes IS NOT NULL AND cardinality(p_hashes) > 0 THEN
        INSERT INTO log_dedup (partition_id, hash, "offset")
        SELECT pids[u.g], u.h, firsts[u.g] + u.k FROM unnest(p_hashes, p_hash_groups, p_hash_positions) AS u(h, g, k);
    END IF;
    FOR k IN 1..cardinality(touched) LOOP
        PERFORM pq_count(touched[k], added[k], 0, 0, 0, 0);
    END LOOP;
    IF p_notify AND cardinality(touched) > 0 THEN
        PERFORM pg_notify(w.channel, '')
        FROM (SELECT DISTINCT channel FROM waiters
              WHERE channel = ANY (ARRAY(SELECT 'pq_' || t FROM unnest(touched) t)) AND until > clock_timestamp()) w;
    END IF;
END $$;

-- Pop's usual case in one round trip: the tenant's queue (PB404) and named partition (PB404), the
-- group joined on first use (cursors where its subscription starts: p_start 'all', 'new' or
-- 'time' from p_since), then the group's least recently served cursor with records, no live lease
-- and no retry delay pending is locked (SKIP LOCKED) and leased at once for [from, end), or
-- committed at once with p_auto_ack. Offsets are gapless from start_offset, so the batch's end is
-- known without reading it; the caller records the batch's last id once it has decoded it.
-- One row per segment holding the batch (r_status 'leased' / 'acked'), or a single row with
-- r_status 'empty', or 'slow' when the cursor held an expired lease or the queue delays messages:
-- those need decisions made in Python, in a transaction (the claim is not kept).
CREATE OR REPLACE FUNCTION pq_pop(
    p_tenant uuid, p_queue text, p_partition text, p_group text, p_need int,
    p_start text, p_since timestamptz, p_auto_ack boolean
) RETURNS TABLE (
    r_status text, r_queue bigint, r_partition bigint, r_name text, r_lease text, r_retry int,
    r_from bigint, r_end bigint, r_first bigint, r_codec smallint, r_frames bytea, r_ts bigint
) LANGUAGE plpgsql AS $$
DECLARE
    q pq_queues;
    v_only bigint;
    c record;
    v_from bigint;
    v_end bigint;
    v_bound bigint;
    v_lease uuid;
    v_new boolean;
    v_wrote boolean := false;
BEGIN
    SELECT * INTO q FROM pq_queues WHERE tenant_id = p_tenant AND name = p_queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = format('queue not found: %s', p_queue);
    END IF;
    IF p_partition IS NOT NULL THEN
        SELECT id INTO v_only FROM log_partitions WHERE owner_kind = 'pq' AND owner_id = q.id AND name = p_partition;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PB404', MESSAGE = format('partition not found: %s', p_partition);
        END IF;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pq_groups WHERE queue_id = q.id AND consumer_group = p_group) THEN
        INSERT INTO pq_groups (queue_id, consumer_group) VALUES (q.id, p_group) ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_new = ROW_COUNT;
        IF v_new THEN
            v_wrote := true;
            INSERT INTO log_cursors (partition_id, consumer_group, committed)
            SELECT p.id, p_group,
                   CASE WHEN p_start = 'new' THEN p.next_offset
                        WHEN p_start = 'time' THEN coalesce((
                            SELECT s.first_offset FROM log_segments s
                            WHERE s.partition_id = p.id AND s.created_at >= p_since
                            ORDER BY s.end_offset LIMIT 1), p.next_offset)
                        ELSE p.start_offset END
            FROM log_partitions p WHERE p.owner_kind = 'pq' AND p.owner_id = q.id
            ON CONFLICT DO NOTHING;
        END IF;
    END IF;
    FOR attempt IN 1..2 LOOP
        SELECT cc.partition_id, p.name, cc.committed, cc.lease_id, cc.retry_count, p.next_offset,
               greatest(cc.committed, p.start_offset) AS read_from
        INTO c
        FROM log_cursors cc JOIN log_partitions p ON p.id = cc.partition_id
        WHERE p.owner_kind = 'pq' AND p.owner_id = q.id AND cc.consumer_group = p_group
          AND (v_only IS NULL OR p.id = v_only)
          AND greatest(cc.committed, p.start_offset) < p.next_offset
          AND (cc.lease_id IS NULL OR cc.lease_expires_at <= clock_timestamp())
          AND (cc.available_at IS NULL OR cc.available_at <= clock_timestamp())
        ORDER BY cc.served_at
        LIMIT 1
        FOR UPDATE OF cc SKIP LOCKED;
        EXIT WHEN FOUND;
        -- A partition may predate nothing the group knows (created concurrently with the group).
        IF attempt = 2 THEN
            RETURN QUERY SELECT 'empty'::text, q.id, NULL::bigint, NULL::text, NULL::text, NULL::int,
                                NULL::bigint, NULL::bigint, NULL::bigint, NULL::smallint, NULL::bytea, NULL::bigint;
            RETURN;
        END IF;
        INSERT INTO log_cursors (partition_id, consumer_group, committed)
        SELECT p.id, p_group, p.start_offset FROM log_partitions p
        WHERE p.owner_kind = 'pq' AND p.owner_id = q.id AND (v_only IS NULL OR p.id = v_only)
          AND NOT EXISTS (SELECT 1 FROM log_cursors x WHERE x.partition_id = p.id AND x.consumer_group = p_group)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            v_wrote := true;
        ELSE
            RETURN QUERY SELECT 'empty'::text, q.id, NULL::bigint, NULL::text, NULL::text, NULL::int,
                                NULL::bigint, NULL::bigint, NULL::bigint, NULL::smallint, NULL::bytea, NULL::bigint;
            RETURN;
        END IF;
    END LOOP;
    IF c.lease_id IS NOT NULL OR q.delayed_processing > 0 THEN
        RETURN QUERY SELECT 'slow'::text, q.id, c.partition_id, c.name, NULL::text, c.retry_count,
                            NULL::bigint, NULL::bigint, NULL::bigint, NULL::smallint, NULL::bytea, NULL::bigint;
        RETURN;
    END IF;
    v_from := c.read_from;
    v_end := least(v_from + p_need, c.next_offset);
    IF NOT p_auto_ack AND NOT v_wrote THEN
        -- A lease is soft state: losing its grant in a server crash only redelivers the batch (as
        -- an expired lease would), so it does not wait for its WAL flush; acks, auto-acks and
        -- pops that created cursors do.
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    IF p_auto_ack THEN
        UPDATE log_cursors SET
            total_consumed = total_consumed + (v_end - v_from),
            retry_count = CASE WHEN v_end > committed THEN 0 ELSE retry_count END,
            committed = greatest(committed, v_end), served_at = clock_timestamp(),
            lease_id = NULL, lease_expires_at = NULL, batch_start = NULL, batch_end = NULL, batch_last_id = NULL,
            available_at = NULL
        WHERE partition_id = c.partition_id AND consumer_group = p_group;
        PERFORM pq_count(q.id, 0, v_end - v_from, 0, 0, 0);
    ELSE
        v_lease := gen_random_uuid();
        UPDATE log_cursors SET
            lease_id = v_lease, lease_expires_at = clock_timestamp() + q.lease_time * interval '1 second',
            batch_start = committed, batch_end = v_end, batch_last_id = NULL,
            available_at = NULL, served_at = clock_timestamp()
        WHERE partition_id = c.partition_id AND consumer_group = p_group;
    END IF;
    SELECT s.end_offset INTO v_bound FROM log_segments s
    WHERE s.partition_id = c.partition_id AND s.end_offset >= v_end ORDER BY s.end_offset LIMIT 1;
    RETURN QUERY
    SELECT CASE WHEN p_auto_ack THEN 'acked' ELSE 'leased' END, q.id, c.partition_id, c.name, v_lease::text,
           c.retry_count, v_from, v_end, s.first_offset, s.codec, s.frames,
           (extract(epoch FROM s.created_at) * 1000)::bigint
    FROM log_segments s
    WHERE s.partition_id = c.partition_id AND s.end_offset > v_from AND s.end_offset <= v_bound
    ORDER BY s.end_offset;
END $$;

-- The leased batch's last record (acks name it by id), recorded once the caller has decoded the
-- batch; soft state like the lease itself (a lost one sends the ack down the general path).
-- The end is set again from what was decoded (retention may have raced the read); a batch that
-- came back empty (retention dropped all of it) releases the lease instead.
CREATE OR REPLACE FUNCTION pq_lease_last(p_lease uuid, p_last text, p_end bigint) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_last IS NULL THEN
        UPDATE log_cursors SET lease_id = NULL, lease_expires_at = NULL, batch_start = NULL, batch_end = NULL,
                               batch_last_id = NULL
        WHERE lease_id = p_lease;
    ELSE
        UPDATE log_cursors SET batch_last_id = p_last, batch_end = p_end WHERE lease_id = p_lease;
    END IF;
END $$;

-- pq_lease_last for a later partition of a multi-partition pop: the batch's last record, and the
-- lease moves to the pop's shared lease id p_shared (one lease id over every partition it claimed).
CREATE OR REPLACE FUNCTION pq_lease_join(p_lease uuid, p_last text, p_end bigint, p_shared uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_last IS NULL THEN
        UPDATE log_cursors SET lease_id = NULL, lease_expires_at = NULL, batch_start = NULL, batch_end = NULL,
                               batch_last_id = NULL
        WHERE lease_id = p_lease;
    ELSE
        UPDATE log_cursors SET batch_last_id = p_last, batch_end = p_end, lease_id = p_shared WHERE lease_id = p_lease;
    END IF;
END $$;

-- The usual ack in one round trip: when p_lease is live, the tenant's, on the partition and group
-- given (when given) and (with p_last) one of p_last is the batch's last record, commit the whole
-- leased batch, release the lease and count the records acked. One row (partition, records
-- committed), or none and nothing changes (the caller then takes the general path).
CREATE OR REPLACE FUNCTION pq_ack(p_lease uuid, p_tenant uuid, p_partition bigint, p_group text, p_last text[])
RETURNS TABLE (r_partition bigint, r_count bigint) LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    SELECT cc.partition_id, cc.consumer_group, cc.committed, cc.batch_end, p.owner_id INTO c
    FROM log_cursors cc JOIN log_partitions p ON p.id = cc.partition_id
    WHERE cc.lease_id = p_lease AND cc.lease_expires_at > clock_timestamp()
      AND p.tenant_id = p_tenant AND p.owner_kind = 'pq'
      AND (p_partition IS NULL OR cc.partition_id = p_partition)
      AND (p_group IS NULL OR cc.consumer_group = p_group)
      AND (p_last IS NULL OR cc.batch_last_id = ANY (p_last))
    FOR UPDATE OF cc;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    r_partition := c.partition_id;
    r_count := greatest(c.batch_end - c.committed, 0);
    UPDATE log_cursors SET
        total_consumed = total_consumed + r_count,
        committed = greatest(c.committed, c.batch_end), retry_count = 0, served_at = clock_timestamp(),
        lease_id = NULL, lease_expires_at = NULL, batch_start = NULL, batch_end = NULL, batch_last_id = NULL,
        available_at = NULL
    WHERE partition_id = c.partition_id AND consumer_group = c.consumer_group;
    PERFORM pq_count(c.owner_id, 0, r_count, 0, 0, 0);
    RETURN NEXT;
END $$;
