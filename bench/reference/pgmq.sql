-- The reference for bench/queues.py: pgmq's tables and statements for one queue, `bench`.
--
-- Mirrors pgmq's own SQL in pgmq/pgmq, file pgmq-extension/sql/pgmq.sql at commit b84659a
-- (the pgmq 1.11 series): pgmq.create_non_partitioned (tables and indexes), pgmq._send_batch,
-- pgmq.send, pgmq.read, pgmq.archive(queue_name, msg_ids bigint[]) and pgmq.pop.
-- pgmq builds each statement with format() and runs it with EXECUTE inside a plpgsql function;
-- here the same statement text runs directly from psycopg (no function call, no replanning of
-- a format()ed string), which if anything flatters the reference. Left out: pgmq.meta and its
-- row, the advisory lock in create, read's `conditional` filter (a constant 1 when no filter is
-- given), the notify-on-insert trigger (off by default), partitioning.
--
-- Blocks are named by `-- name: <statement>` lines; bench/common.py reads them. Parameters use
-- psycopg's %(name)s placeholders.

-- name: schema
DROP SCHEMA IF EXISTS pgmq CASCADE;
CREATE SCHEMA pgmq;

CREATE TABLE pgmq.q_bench (
    msg_id       bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY,
    read_ct      int DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    last_read_at timestamptz,
    vt           timestamptz NOT NULL,
    message      jsonb,
    headers      jsonb
);

CREATE TABLE pgmq.a_bench (
    msg_id       bigint PRIMARY KEY,
    read_ct      int DEFAULT 0 NOT NULL,
    enqueued_at  timestamptz DEFAULT now() NOT NULL,
    last_read_at timestamptz,
    archived_at  timestamptz DEFAULT now() NOT NULL,
    vt           timestamptz NOT NULL,
    message      jsonb,
    headers      jsonb
);

CREATE INDEX q_bench_vt_idx ON pgmq.q_bench (vt ASC);
CREATE INDEX archived_at_idx_bench ON pgmq.a_bench (archived_at);

-- name: send_batch
-- pgmq._send_batch: the delay is pgmq.send_batch's integer-delay form, clock_timestamp() + delay.
INSERT INTO pgmq.q_bench (vt, message, headers)
SELECT clock_timestamp() + make_interval(secs => %(delay)s), unnest(%(msgs)s::jsonb[]),
       unnest(coalesce(%(headers)s::jsonb[], ARRAY[]::jsonb[]))
RETURNING msg_id

-- name: send
INSERT INTO pgmq.q_bench (vt, message, headers)
VALUES (clock_timestamp() + make_interval(secs => %(delay)s), %(msg)s::jsonb, %(headers)s::jsonb)
RETURNING msg_id

-- name: read
WITH cte AS (
    SELECT msg_id
    FROM pgmq.q_bench
    WHERE vt <= clock_timestamp()
    ORDER BY msg_id ASC
    LIMIT %(qty)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pgmq.q_bench m
SET last_read_at = clock_timestamp(),
    vt = clock_timestamp() + make_interval(secs => %(vt)s),
    read_ct = read_ct + 1
FROM cte
WHERE m.msg_id = cte.msg_id
RETURNING m.*

-- name: archive
WITH archived AS (
    DELETE FROM pgmq.q_bench
    WHERE msg_id = ANY(%(ids)s::bigint[])
    RETURNING msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
)
INSERT INTO pgmq.a_bench (msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers)
SELECT msg_id, vt, read_ct, enqueued_at, last_read_at, message, headers
FROM archived
RETURNING msg_id

-- name: pop
-- Not measured; kept so the file shows pgmq's whole claim family.
WITH cte AS (
    SELECT msg_id
    FROM pgmq.q_bench
    WHERE vt <= clock_timestamp()
    ORDER BY msg_id ASC
    LIMIT %(qty)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pgmq.q_bench
WHERE msg_id IN (SELECT msg_id FROM cte)
RETURNING *

-- name: fill
-- Not pgmq: the benchmark's bulk fill of the backlog for the read-latency measurement.
INSERT INTO pgmq.q_bench (vt, message)
SELECT clock_timestamp(), jsonb_build_object('to', 'a@example.com', 'n', g)
FROM generate_series(1, %(n)s) AS g

-- name: counts
-- Not pgmq: the benchmark's exactly-once check after a drain.
SELECT (SELECT count(*) FROM pgmq.q_bench),
       (SELECT count(*) FROM pgmq.a_bench WHERE msg_id = ANY(%(ids)s::bigint[]))
