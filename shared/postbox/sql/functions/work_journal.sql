-- The work surface's lifecycle journal: every moment of a message's life (published, claimed,
-- completed, failed, released, extended, cancelled, dead-lettered, expired) and every management
-- change is journalled in the transaction that makes it, as one row per call: a claim of 100, a
-- completion batch of 100 or a publish writes one row of `work_journal` holding the ids it touched
-- (in order) and what they share (actor, time, event type, details), with aligned arrays for what
-- differs between them (attempts, correlation ids, details; an array of one element holds every
-- entry's value). A completion of 100 messages thus writes one row and one entry per index, where
-- it wrote 100 rows and 100 to 200 index entries.
--
-- What the readers see is the view work_journal_entries: one row per message (an entry), with the
-- columns the journal had when it was a row per message. An entry's `seq` (the audit event's id)
-- is its row's seq plus its position: a row takes a block of 1,024 numbers (the sequence's step),
-- so entries number in the order they were written. A call of more than 1,024 messages (a sweep)
-- writes a row per 1,024.
--
-- That journal is both the audit record (the audit routes read it) and the source of the scope's
-- events: the `_events` queue is materialised from the journal when it is read (claimed, listed,
-- looked at, counted), not written on every completion.
--
-- Exactly once into `_events`: a writer of a row that `_events` will receive (`emit`) holds the
-- scope's journal lock in share mode until it commits; the materialiser takes it exclusively, so
-- once it holds it every emitted row numbered so far has committed, and it copies the entries past
-- the scope's mark (work_journal_marks) and moves the mark, under that lock. Writers that come
-- after wait for it and number their rows past the mark.
--
-- Storage: weekly range partitions on `at`, made ahead by the work-journal agent
-- (work_journal_partitions) and dropped whole by the archiver past the audit retention
-- (work_journal_retire). Counters: see work_counts_fold below.

-- A writer of an emitted row holds this (share mode) until it commits; see the header.
CREATE OR REPLACE FUNCTION work_journal_lock(p_scope uuid) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock_shared(x'574a'::int, hashtext(p_scope::text));
$$;

-- An aligned array as a row stores it: NULL when every element is NULL, one element when they are
-- all that one value, else as given.
CREATE OR REPLACE FUNCTION work_journal_compact(p anyarray) RETURNS anyarray LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p IS NULL OR cardinality(array_remove(p, NULL)) = 0 THEN NULL
                WHEN coalesce(p[1] = ALL (p), false) THEN p[1:1]
                ELSE p END
$$;

-- A row's entries, as the readers see them (the view below, and readers that walk rows by their
-- seq and unnest them: the audit pages, `_events`). Erased entries (a NULL id) are left out; what a
-- row leaves out is the usual (a message as the resource, success, 0 attempts).
CREATE OR REPLACE FUNCTION work_journal_unnest(c work_journal)
RETURNS TABLE (seq bigint, scope_id uuid, tenant_id uuid, at timestamptz, event_type text, resource_type text,
               resource_id text, message_id uuid, queue_id bigint, correlation_id text, actor_type text,
               actor_id text, attempts int, outcome text, emit boolean, payload jsonb)
LANGUAGE sql IMMUTABLE AS $$
    SELECT c.seq + u.n - 1, c.scope_id, c.tenant_id, c.at, c.event_type, coalesce(c.resource_type, 'message'),
           c.resource_id, u.message_id, c.queue_id,
           CASE WHEN cardinality(c.correlation_ids) = 1 THEN c.correlation_ids[1] ELSE c.correlation_ids[u.n] END,
           c.actor_type, c.actor_id,
           CASE WHEN cardinality(c.attempts) = 1 THEN c.attempts[1]
                WHEN c.attempts IS NOT NULL THEN c.attempts[u.n]
                WHEN c.message_ids IS NOT NULL THEN 0 END,
           coalesce(c.outcome, 'success'), c.emit, coalesce(c.payloads[u.n], c.payload)
    FROM unnest(coalesce(c.message_ids, '{NULL}'::uuid[])) WITH ORDINALITY u(message_id, n)
    WHERE c.message_ids IS NULL OR u.message_id IS NOT NULL
$$;

-- The journal, an entry (one message's moment, or one management change) per row.
CREATE OR REPLACE VIEW work_journal_entries AS
SELECT e.* FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e;

-- Write one entry (the hot paths write theirs inline, one row per call). p_moved: see
-- work_journal_moves (NULL when the caller counted the move itself).
CREATE OR REPLACE FUNCTION work_journal_add(s work_scopes, p_type text, m work_messages, p_actor_type text,
                                            p_actor_id text, p_emit boolean, p_payload jsonb,
                                            p_moved int DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_emit THEN
        PERFORM work_journal_lock(s.id);
    END IF;
    INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, emit, moved, payload,
                              message_ids, attempts, correlation_ids)
    VALUES (s.id, s.tenant_id, m.queue_id, p_type, p_actor_type, p_actor_id, p_emit, p_moved, p_payload,
            ARRAY[m.id], nullif(ARRAY[m.attempts], '{0}'),
            CASE WHEN m.correlation_id IS NOT NULL THEN ARRAY[m.correlation_id] END);
END $$;

-- Journal a publish call's messages into one queue (at most 1,024: a batch publish's), in the order
-- given, and count them: the row counts their move, but for a bounded queue, which counts them now
-- (see work_journal_moves). Every publish path writes its row through this.
CREATE OR REPLACE FUNCTION work_journal_published(s work_scopes, q work_queues, p_ids uuid[], p_correlations text[],
                                                  p_actor_type text, p_actor_id text, p_emit boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO work_journal (scope_id, tenant_id, queue_id, event_type, actor_type, actor_id, emit, moved,
                              message_ids, correlation_ids)
    VALUES (s.id, s.tenant_id, q.id, 'scaiqueue.message.published', p_actor_type, p_actor_id, p_emit,
            CASE WHEN q.max_depth = 0 THEN cardinality(p_ids) END, p_ids, work_journal_compact(p_correlations));
    IF q.max_depth > 0 THEN  -- its depth is read by its publishes
        PERFORM work_count(q.id, cardinality(p_ids), 0, cardinality(p_ids), 0, 0);
    END IF;
END $$;

-- Copy the journal's emitted entries past the scope's mark into its `_events` queue, as the event
-- messages of a scope's events: body {event_type, event_id, source, tenant_id, payload, timestamp},
-- the original's correlation id, its id as causation_id. Called by every read of `_events` (and of
-- a correlation chain, which shows events) before it reads, in the same transaction: at most
-- 10,000 a call, the oldest first (a later read brings the rest). Returns how many it copied.
-- A row holds the numbers seq .. seq + 1,023, so the rows with entries past the mark are those
-- whose seq is past mark - 1,023 (the scope's index finds them).
CREATE OR REPLACE FUNCTION work_events_sync(p_scope uuid) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    s work_scopes;
    v_upto bigint;
    v_last bigint;
    n int;
BEGIN
    v_upto := coalesce((SELECT upto FROM work_journal_marks WHERE scope_id = p_scope), 0);
    -- Nothing committed past the mark: nothing to do, and no lock (what is not committed yet is
    -- not this read's to see).
    IF NOT EXISTS (SELECT 1 FROM work_journal c WHERE c.scope_id = p_scope AND c.seq > v_upto - 1023 AND c.emit
                   AND c.seq + coalesce(cardinality(c.message_ids), 1) - 1 > v_upto) THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(x'574a'::int, hashtext(p_scope::text));
    INSERT INTO work_journal_marks (scope_id) VALUES (p_scope) ON CONFLICT (scope_id) DO NOTHING;
    SELECT upto INTO v_upto FROM work_journal_marks WHERE scope_id = p_scope FOR UPDATE;
    SELECT * INTO s FROM work_scopes WHERE id = p_scope;
    -- At most 10,000 events a read (writers of the scope wait while this transaction holds the
    -- lock): up to the 10,000th emitted entry past the mark, or everything when there are fewer.
    v_last := coalesce((SELECT e.seq FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e
                        WHERE c.scope_id = p_scope AND c.seq > v_upto - 1023 AND c.emit AND e.seq > v_upto
                        ORDER BY c.seq, e.seq OFFSET 9999 LIMIT 1),
                       (SELECT c.seq + coalesce(cardinality(c.message_ids), 1) - 1 FROM work_journal c
                        WHERE c.scope_id = p_scope ORDER BY c.seq DESC LIMIT 1));
    WITH src AS (
        SELECT e.*, work_uuid7() AS event_id
        FROM work_journal c CROSS JOIN LATERAL work_journal_unnest(c) e
        WHERE c.scope_id = p_scope AND c.seq > v_upto - 1023 AND c.seq <= v_last AND c.emit
          AND e.seq > v_upto AND e.seq <= v_last
    ), made AS (
        INSERT INTO work_messages (id, queue_id, scope_id, tenant_id, visible_at, message_type, body,
                                   correlation_id, causation_id, source_type, source_id, max_retries,
                                   visibility_timeout_s)
        SELECT e.event_id, s.events_queue_id, s.id, s.tenant_id, clock_timestamp(), e.event_type,
               jsonb_build_object(
                   'event_type', e.event_type, 'event_id', e.event_id,
                   'source', 'scaiqueue/scopes/' || s.id || '/messages/' || e.message_id,
                   'tenant_id', s.tenant_id,
                   'payload', jsonb_build_object(
                       'message_id', e.message_id, 'scope_id', s.id, 'queue_id', q.queue_id,
                       'message_type', m.message_type, 'correlation_id', e.correlation_id, 'attempts', e.attempts)
                       || CASE WHEN e.event_type = 'scaiqueue.message.completed'
                                    AND NOT coalesce(e.payload ? 'response', false)
                               THEN jsonb_build_object('response', m.response) ELSE '{}' END
                       || coalesce(e.payload, '{}'),
                   'timestamp', e.at),
               e.correlation_id, e.message_id::text, 'system', 'scaiqueue', 3, 30
        FROM src e
        LEFT JOIN work_queues q ON q.id = e.queue_id
        LEFT JOIN work_messages m ON m.id = e.message_id
        ORDER BY e.seq
        RETURNING 1
    )
    SELECT count(*) INTO n FROM made;
    UPDATE work_journal_marks SET upto = v_last WHERE scope_id = p_scope;
    IF n > 0 THEN
        PERFORM work_count(s.events_queue_id, n, 0, n, 0, 0);
    END IF;
    RETURN n;
END $$;

-- The scope a request names (as work_scope_of), with its `_events` brought up to date: what the
-- reads of messages, queues and correlation chains call first.
CREATE OR REPLACE FUNCTION work_scope_synced(p_tenant uuid, p_scope uuid) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE s work_scopes;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    PERFORM work_events_sync(s.id);
    RETURN s.id;
END $$;

-- The queue a read names (as work_queue_of, its scope checked as work_scope_of), the scope's
-- `_events` materialised first when that is the queue read.
CREATE OR REPLACE FUNCTION work_queue_synced(p_tenant uuid, p_scope uuid, p_queue uuid) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE s work_scopes; q work_queues;
BEGIN
    s := work_scope_of(p_tenant, p_scope);
    q := work_queue_of(s.id, p_queue);
    IF q.id = s.events_queue_id THEN
        PERFORM work_events_sync(s.id);
    END IF;
    RETURN q.id;
END $$;

-- ---- the queues' counters, folded from the journal ------------------------------------------------

-- A queue's depths and totals are the sum of its rows in work_queue_counters plus the moves of the
-- journal rows not folded yet. The hot paths (publish, claim, complete, fail, release) write no
-- counter row: their journal row says how many messages it moves (`moved`), and what that move is
-- follows from its event type (below). The rarer moves (cancel, expiry, dead letters, events
-- landing in `_events`, GDPR deletions) still add to the counters as they happen (work_count), and
-- so do a bounded queue's publishes and completions: its publishes read its depth, which is then
-- exact from the counters alone (claims, releases and fails do not change a depth).
--
-- The fold (work_counts_fold, the work-journal agent: every second locally, every minute on AWS)
-- adds the moves of every row written by a transaction below the oldest one still running, and
-- records that transaction id as its mark: each row is folded exactly once (a transaction below
-- the mark has ended, so its rows are all visible to the fold or were rolled back; one at or above
-- it is left for a later fold). work_queue_depths reads the counters and adds the rows at or above
-- the mark, in one snapshot, so what it answers is exact whatever the fold's lag.

-- What each journal row not counted when written moves, by its queue.
CREATE OR REPLACE VIEW work_journal_moves AS
SELECT c.queue_id, c.txid,
       CASE WHEN c.event_type IN ('scaiqueue.message.published', 'scaiqueue.message.released',
                                  'scaiqueue.message.failed') THEN c.moved
            WHEN c.event_type = 'scaiqueue.message.claimed' THEN -c.moved ELSE 0 END AS pending,
       CASE WHEN c.event_type = 'scaiqueue.message.claimed' THEN c.moved
            WHEN c.event_type IN ('scaiqueue.message.completed', 'scaiqueue.message.released',
                                  'scaiqueue.message.failed') THEN -c.moved ELSE 0 END AS claimed,
       CASE WHEN c.event_type = 'scaiqueue.message.published' THEN c.moved ELSE 0 END AS published,
       CASE WHEN c.event_type = 'scaiqueue.message.completed' THEN c.moved ELSE 0 END AS completed
FROM work_journal c WHERE c.moved IS NOT NULL;

-- Whether a queue counts its publishes and completions as they happen (a bounded queue: see above).
CREATE OR REPLACE FUNCTION work_counts_now(p_queue bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT q.max_depth > 0 FROM work_queues q WHERE q.id = p_queue), false)
$$;

-- Exact depths and totals of these queues: the counters and the moves not folded yet, in one
-- snapshot (a queue with neither has no row).
CREATE OR REPLACE FUNCTION work_queue_depths(p_queues bigint[])
RETURNS TABLE (queue_id bigint, pending bigint, claimed bigint, published bigint, completed bigint,
               dead_lettered bigint)
LANGUAGE sql STABLE AS $$
    SELECT x.queue_id, sum(x.pending)::bigint, sum(x.claimed)::bigint, sum(x.published)::bigint,
           sum(x.completed)::bigint, sum(x.dead_lettered)::bigint
    FROM (SELECT k.queue_id, k.pending, k.claimed, k.published, k.completed, k.dead_lettered
          FROM work_queue_counters k WHERE k.queue_id = ANY (p_queues)
          UNION ALL
          SELECT m.queue_id, m.pending, m.claimed, m.published, m.completed, 0
          FROM work_journal_moves m
          WHERE m.queue_id = ANY (p_queues) AND m.txid >= (SELECT f.upto FROM work_counts_folded f)) x
    GROUP BY x.queue_id
$$;

-- Fold the moves of the rows every transaction below the oldest running one wrote into the
-- counters (slot 8, the fold's own: no hot path writes it), and move the mark there. One fold at a
-- time (the mark's row); a queue deleted meanwhile is skipped (its counters went with it).
-- Returns how many journal rows it folded (0 while a tenant of the cell is fenced for a move).
CREATE OR REPLACE FUNCTION work_counts_fold() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_from bigint;
    v_to bigint;
    n int;
BEGIN
    SELECT upto INTO v_from FROM work_counts_folded FOR UPDATE;
    -- In a statement after the lock: every transaction below it has ended, and this transaction's
    -- next statements see all they wrote.
    v_to := pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
    IF v_to <= v_from THEN
        RETURN 0;
    END IF;
    BEGIN
        WITH moves AS (
            SELECT m.queue_id, sum(m.pending) AS pending, sum(m.claimed) AS claimed, sum(m.published) AS published,
                   sum(m.completed) AS completed, count(*) AS n
            FROM work_journal_moves m WHERE m.txid >= v_from AND m.txid < v_to
            GROUP BY m.queue_id
        ), live AS MATERIALIZED (  -- every queue row first, in one order, kept while the counters are written
            SELECT v.* FROM moves v JOIN work_queues q ON q.id = v.queue_id ORDER BY q.id FOR KEY SHARE OF q
        ), added AS (
            INSERT INTO work_queue_counters AS k (queue_id, slot, pending, claimed, published, completed)
            SELECT l.queue_id, 8, l.pending, l.claimed, l.published, l.completed FROM live l
            ON CONFLICT (queue_id, slot) DO UPDATE SET
                pending = k.pending + excluded.pending, claimed = k.claimed + excluded.claimed,
                published = k.published + excluded.published, completed = k.completed + excluded.completed
            RETURNING 1
        )
        SELECT coalesce(sum(v.n), 0) INTO n FROM moves v;  -- (the insert runs whether it is read or not)
    EXCEPTION WHEN SQLSTATE 'PB503' THEN
        -- A tenant of this cell is fenced for its move to another cell (a second or two): its
        -- counters are not written, so nothing is folded and the mark stays for the next run.
        RETURN 0;
    END;
    UPDATE work_counts_folded SET upto = v_to;
    RETURN n;
END $$;

-- ---- partitions -----------------------------------------------------------------------------------

-- The journal's week partitions, from this week to p_ahead weeks ahead, made where missing (the
-- work-journal agent). A week whose rows went to the default partition meanwhile (no agent ran) is
-- made from them. Attaching a week locks the default partition, which every read of the journal
-- takes too: it waits at most 200 ms for it (so the reads never queue behind it for longer), and a
-- week it could not attach is made by a later run (they are made four weeks ahead). Runs as the
-- owner of the tables (the application's role makes no tables).
CREATE OR REPLACE FUNCTION work_journal_partitions(p_ahead int) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_week date := date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date;
    v_from timestamptz;
    v_to timestamptz;
    v_name text;
    v_wait text := current_setting('lock_timeout');
    n int := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(x'574a'::int, 1);  -- one maker at a time
    PERFORM set_config('lock_timeout', '200ms', true);
    FOR d IN 0 .. greatest(p_ahead, 0) LOOP
        v_name := 'work_journal_p' || to_char(v_week + 7 * d, 'YYYYMMDD');
        CONTINUE WHEN to_regclass(v_name) IS NOT NULL;
        v_from := (v_week + 7 * d)::timestamp AT TIME ZONE 'UTC';
        v_to := (v_week + 7 * (d + 1))::timestamp AT TIME ZONE 'UTC';
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE work_journal INCLUDING DEFAULTS INCLUDING STORAGE)'
                           ' WITH (fillfactor = 100, toast_tuple_target = 8160,'
                           ' autovacuum_vacuum_insert_scale_factor = 0.05)', v_name);
            LOCK TABLE work_journal_default IN ACCESS EXCLUSIVE MODE;
            EXECUTE format('INSERT INTO %I SELECT * FROM work_journal_default WHERE at >= $1 AND at < $2', v_name)
                USING v_from, v_to;
            DELETE FROM work_journal_default WHERE at >= v_from AND at < v_to;
            EXECUTE format('ALTER TABLE work_journal ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_from, v_to);
            n := n + 1;
        EXCEPTION WHEN lock_not_available THEN
            NULL;  -- the next run makes it
        END;
    END LOOP;
    PERFORM set_config('lock_timeout', v_wait, true);
    RETURN n;
END $$;

-- Drop the week partitions wholly past the journal's retention (p_days), each once its rows'
-- events are in `_events` and its moves folded; and delete the default partition's rows past it
-- (at most p_limit). A drop waits at most 200 ms for the journal's lock (every writer holds it
-- briefly; a drop the writers kept out is tried again on the next run). Returns the entries removed.
CREATE OR REPLACE FUNCTION work_journal_retire(p_days int, p_limit int) RETURNS int
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    v_cut timestamptz := clock_timestamp() - make_interval(days => p_days);
    v_part record;
    v_behind boolean;
    v_scope uuid;
    v_wait text;
    n int := 0;
    k int;
BEGIN
    PERFORM work_counts_fold();
    FOR v_part IN
        SELECT c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'work_journal'::regclass AND c.relname ~ '^work_journal_p[0-9]{8}$'
          AND to_date(substr(c.relname, 15), 'YYYYMMDD') + 7 <= (v_cut AT TIME ZONE 'UTC')::date
        ORDER BY c.relname
    LOOP
        v_behind := false;
        FOR v_scope IN EXECUTE format('SELECT DISTINCT c.scope_id FROM %I c JOIN work_scopes s ON s.id = c.scope_id'
                                      ' WHERE c.emit', v_part.relname) LOOP
            PERFORM work_events_sync(v_scope);
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I c WHERE c.scope_id = $1 AND c.emit AND'
                           ' c.seq + coalesce(cardinality(c.message_ids), 1) - 1'
                           ' > coalesce((SELECT upto FROM work_journal_marks WHERE scope_id = $1), 0))',
                           v_part.relname) INTO v_behind USING v_scope;
            EXIT WHEN v_behind;
        END LOOP;
        CONTINUE WHEN v_behind;  -- more than a read brings in: the next run goes on
        EXECUTE format('SELECT coalesce(sum(coalesce(cardinality(message_ids), 1)), 0) FROM %I', v_part.relname)
            INTO k;
        v_wait := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', '200ms', true);
        BEGIN
            EXECUTE format('DROP TABLE %I', v_part.relname);
            n := n + k;
        EXCEPTION WHEN lock_not_available THEN
            NULL;
        END;
        PERFORM set_config('lock_timeout', v_wait, true);
    END LOOP;
    -- Rows the weeks did not take (older than the partitions, or written while none was made).
    FOR v_scope IN
        SELECT DISTINCT d.scope_id FROM work_journal_default d JOIN work_scopes s ON s.id = d.scope_id
        WHERE d.at < v_cut AND d.emit
    LOOP
        PERFORM work_events_sync(v_scope);
    END LOOP;
    DELETE FROM work_journal_default j
    USING (SELECT x.ctid FROM work_journal_default x WHERE x.at < v_cut ORDER BY x.at LIMIT p_limit) d
    WHERE j.ctid = d.ctid
      AND (NOT j.emit OR NOT EXISTS (SELECT 1 FROM work_scopes s WHERE s.id = j.scope_id)
           OR j.seq + coalesce(cardinality(j.message_ids), 1) - 1
              <= coalesce((SELECT upto FROM work_journal_marks WHERE scope_id = j.scope_id), 0));
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN n + k;
END $$;
