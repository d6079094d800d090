-- The console's history (history_minutes): what each queue's, work queue's, partitioned queue's and
-- keyed stream's counters say, once a minute, kept a day.
--
-- Per kind (in and out are cumulative; a chart's "per minute" is the difference of two rows):
--   queue        in: messages sent; out: messages removed (read and deleted or archived, dead-
--                lettered away, purged, expired); depth: in - out; oldest: its first message.
--   work         in: messages published; out: messages that left its depth (completed, failed,
--                cancelled, expired, dead-lettered, archived by a routing rule or handed to a push
--                delivery): published - depth; depth: pending + claimed; oldest: its first live
--                message.
--   partitioned  in: messages pushed; out: acknowledgements and dead letters, one per consumer
--                group; depth: per partition, what its slowest consumer group has not consumed
--                (all it holds while a group has not read it, or no group exists), summed;
--                oldest: the first of those messages over all partitions.
--   stream       in: messages published (its log's next offset); out: acknowledgements and dead
--                letters of its subscriptions; depth: its subscriptions' pending messages (in
--                flight included); oldest: the first pending message over its subscriptions.
-- Every figure but the oldest age is a sum of counter rows the hot paths keep; an age is one
-- index probe per resource that holds something.

-- Record the minute `p_at` falls in (default: now) for every resource; a resource that has the
-- minute already is left as it is, so a second run in a minute records nothing. Runs at once
-- serialise on one transaction-level advisory lock ("HM"): a run that finds it taken returns at
-- once (the other is recording the same figures). Returns the rows written.
CREATE OR REPLACE FUNCTION history_record(p_at timestamptz DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_minute timestamptz := date_trunc('minute', coalesce(p_at, v_now));
    v_n      bigint;
    v_total  bigint := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(x'484D'::int, 0) THEN
        RETURN 0;
    END IF;

    INSERT INTO history_minutes (kind, resource_id, minute, in_total, out_total, depth, oldest_age_s)
    SELECT 'queue', q.id, v_minute, coalesce(c.sent, 0), coalesce(c.removed, 0), coalesce(c.sent - c.removed, 0),
           CASE WHEN c.sent > c.removed THEN
               (SELECT extract(epoch FROM v_now - m.enqueued_at) FROM queue_messages m
                WHERE m.queue_id = q.id ORDER BY m.msg_id LIMIT 1) END
    FROM queues q
    LEFT JOIN (SELECT queue_id, sum(sent) AS sent, sum(removed) AS removed
               FROM queue_counters GROUP BY queue_id) c ON c.queue_id = q.id
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;

    INSERT INTO history_minutes (kind, resource_id, minute, in_total, out_total, depth, oldest_age_s)
    SELECT 'work', q.id, v_minute, coalesce(c.published, 0), coalesce(c.published - c.depth, 0),
           coalesce(c.depth, 0),
           CASE WHEN c.depth > 0 THEN
               (SELECT extract(epoch FROM v_now - m.created_at) FROM work_messages m
                WHERE m.queue_id = q.id AND m.ended_at IS NULL ORDER BY m.seq LIMIT 1) END
    FROM work_queues q
    LEFT JOIN (SELECT d.queue_id, d.published, d.pending + d.claimed AS depth  -- exact, as stats read it
               FROM work_queue_depths(ARRAY(SELECT id FROM work_queues)) d) c ON c.queue_id = q.id
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;

    INSERT INTO history_minutes (kind, resource_id, minute, in_total, out_total, depth, oldest_age_s)
    SELECT 'partitioned', q.id, v_minute, coalesce(c.pushed, 0), coalesce(c.done, 0), coalesce(b.depth, 0), b.oldest
    FROM pq_queues q
    LEFT JOIN (SELECT queue_id, sum(pushed) AS pushed, sum(acked + dead_lettered) AS done
               FROM pq_counters GROUP BY queue_id) c ON c.queue_id = q.id
    LEFT JOIN LATERAL (
        SELECT sum(p.next_offset - f.low) AS depth,
               max((SELECT extract(epoch FROM v_now - s.created_at) FROM log_segments s
                    WHERE s.partition_id = p.id AND s.end_offset > f.low ORDER BY s.end_offset LIMIT 1))
                   FILTER (WHERE p.next_offset > f.low) AS oldest
        FROM log_partitions p
        CROSS JOIN LATERAL (
            SELECT greatest(p.start_offset,
                            CASE WHEN count(*) < (SELECT count(*) FROM pq_groups g WHERE g.queue_id = q.id)
                                 THEN p.start_offset ELSE min(k.committed) END) AS low
            FROM log_cursors k WHERE k.partition_id = p.id) f
        WHERE p.owner_kind = 'pq' AND p.owner_id = q.id) b ON true
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_total := v_total + v_n;

    INSERT INTO history_minutes (kind, resource_id, minute, in_total, out_total, depth, oldest_age_s)
    SELECT 'stream', s.id, v_minute, coalesce(p.next_offset, 0), coalesce(u.done, 0), coalesce(u.pending, 0),
           u.oldest
    FROM streams s
    LEFT JOIN log_partitions p ON p.id = s.partition_id
    LEFT JOIN LATERAL (
        SELECT sum(x.acked + x.dead) AS done, sum(x.pending) AS pending,
               max((SELECT extract(epoch FROM v_now - m.published_at)
                    FROM stream_sub_keys k JOIN stream_messages m ON m.stream_id = s.id AND m."offset" = k.head
                    WHERE k.sub_id = x.id ORDER BY k.head LIMIT 1)) FILTER (WHERE x.pending > 0) AS oldest
        FROM stream_subscriptions x WHERE x.stream_id = s.id) u ON true
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_total + v_n;
END $$;

-- Delete the rows recorded before now - p_keep; returns how many. A run deletes about what one
-- run records (a minute's rows), and after a pause no more than what was kept.
CREATE OR REPLACE FUNCTION history_trim(p_keep interval) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_n bigint;
BEGIN
    DELETE FROM history_minutes WHERE minute < clock_timestamp() - p_keep;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;
