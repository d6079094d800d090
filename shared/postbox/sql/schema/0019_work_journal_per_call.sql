-- The work journal becomes one row per call: a claim, a completion batch, a publish writes one row
-- holding the ids it touched (aligned arrays for what differs between them) and what they share
-- (actor, time, event type, details). The per-message journal the readers know is the view
-- work_journal_entries (functions), with the old table's columns and ids.
--
-- Weekly range partitions on the call's time, made ahead by the work-journal agent and dropped
-- whole by the archiver once past the audit retention; a default partition takes any row no week
-- holds (one older than the partitions, or written while the agent had not run for weeks).
--
-- The queues' counters are folded from the journal: a row that moves messages between a queue's
-- counters says how many (`moved`), and the agent adds those moves to work_queue_counters in
-- batches, by transaction id (a row is folded once every transaction before it has ended). Reads
-- add the rows not folded yet, so a depth read is exact (work_queue_depths).
--
-- Existing rows are copied over as rows of one message each, keeping their seq (an audit event's
-- id): the ids a row holds are seq .. seq + n - 1, and new rows take blocks of 1,024 numbers after
-- the last old one. What most rows hold is left out of them (NULL): a message as the resource, a
-- success as the outcome, 0 attempts (a publish's).

DROP INDEX work_journal_scope, work_journal_correlation, work_journal_seq_brin;
ALTER TABLE work_journal RENAME TO work_journal_old;

CREATE SEQUENCE work_journal_seq INCREMENT BY 1024;
SELECT setval('work_journal_seq', coalesce((SELECT max(seq) FROM work_journal_old), 0) + 1, false);

CREATE TABLE work_journal (
    seq             bigint NOT NULL DEFAULT nextval('work_journal_seq'),  -- its entries: seq + 0..n-1
    at              timestamptz NOT NULL DEFAULT clock_timestamp(),
    txid            bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,  -- its writer's (the fold's order)
    scope_id        uuid,                 -- NULL: a tenant-level record (API keys, GDPR jobs)
    tenant_id       uuid NOT NULL,
    queue_id        bigint,               -- work_queues.id of the messages' queue (one queue a row)
    event_type      text NOT NULL,        -- scaiqueue.message.completed, scaiqueue.queue.created, ...
    resource_type   text,                 -- NULL: 'message'
    resource_id     text,                 -- NULL for messages: each entry's message id
    actor_type      text,
    actor_id        text,
    outcome         text,                 -- NULL: 'success'
    emit            boolean NOT NULL DEFAULT false,  -- its entries are copied into the scope's `_events`
    moved           int,                  -- messages it moves between the queue's counters; NULL: counted when written
    payload         jsonb,                -- the details every entry shares
    message_ids     uuid[],               -- its messages, in order (NULL: one entry about no message;
                                          -- an element NULL: an entry erased)
    attempts        int[],                -- aligned with message_ids; one element: every entry's; NULL: 0
    correlation_ids text[],               -- aligned; one element: every entry's; NULL: none has one
    payloads        jsonb[]               -- aligned; NULL (or an element NULL): the entry's details are `payload`
) PARTITION BY RANGE (at);
ALTER TABLE work_journal ALTER COLUMN message_ids SET STORAGE MAIN, ALTER COLUMN attempts SET STORAGE MAIN,
    ALTER COLUMN correlation_ids SET STORAGE MAIN;
ALTER SEQUENCE work_journal_seq OWNED BY work_journal.seq;

-- A scope's rows in order (`_events`, the audit pages); a tenant's (GDPR walks); a correlation
-- chain (its rows only); the rows not folded yet, by queue (exact depths) and by transaction
-- (the fold: a BRIN, nearly free on an append-only table).
CREATE INDEX work_journal_scope ON work_journal (scope_id, seq);
CREATE INDEX work_journal_tenant ON work_journal (tenant_id, seq);
CREATE INDEX work_journal_correlation ON work_journal USING gin (correlation_ids) WHERE correlation_ids IS NOT NULL;
CREATE INDEX work_journal_unfolded ON work_journal (queue_id, txid) WHERE moved IS NOT NULL;
CREATE INDEX work_journal_txid ON work_journal USING brin (txid);

CREATE TABLE work_journal_default PARTITION OF work_journal DEFAULT;

-- This week and the next four (the agent keeps four ahead), and the weeks the old rows need within
-- the 90 days of retention (older ones wait in the default partition for the archiver).
DO $$
DECLARE
    v_week date := date_trunc('week', clock_timestamp() AT TIME ZONE 'UTC')::date;
    v_from date;
BEGIN
    v_from := greatest(v_week - 13 * 7,
                       coalesce(date_trunc('week', (SELECT min(at) FROM work_journal_old) AT TIME ZONE 'UTC')::date,
                                v_week));
    FOR d IN 0 .. (v_week - v_from) / 7 + 4 LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF work_journal FOR VALUES FROM (%L) TO (%L)'
                       ' WITH (fillfactor = 100, toast_tuple_target = 8160,'
                       ' autovacuum_vacuum_insert_scale_factor = 0.05)',
                       'work_journal_p' || to_char(v_from + 7 * d, 'YYYYMMDD'),
                       (v_from + 7 * d)::timestamp AT TIME ZONE 'UTC',
                       (v_from + 7 * (d + 1))::timestamp AT TIME ZONE 'UTC');
    END LOOP;
END $$;
ALTER TABLE work_journal_default SET (fillfactor = 100, toast_tuple_target = 8160,
                                      autovacuum_vacuum_insert_scale_factor = 0.05);

INSERT INTO work_journal (seq, at, scope_id, tenant_id, queue_id, event_type, resource_type, resource_id, actor_type,
                          actor_id, outcome, emit, payload, message_ids, attempts, correlation_ids)
SELECT seq, at, scope_id, tenant_id, queue_id, event_type, nullif(resource_type, 'message'), resource_id, actor_type,
       actor_id, nullif(outcome, 'success'), emit, payload, CASE WHEN message_id IS NOT NULL THEN ARRAY[message_id] END,
       CASE WHEN attempts <> 0 OR (attempts = 0 AND message_id IS NULL) THEN ARRAY[attempts] END,
       CASE WHEN correlation_id IS NOT NULL THEN ARRAY[correlation_id] END
FROM work_journal_old;
DROP TABLE work_journal_old;

-- How far the queues' counters have been folded from the journal: every row written by a
-- transaction below `upto` is in work_queue_counters (slot 8, the fold's own).
CREATE TABLE work_counts_folded (
    one  boolean PRIMARY KEY DEFAULT true CHECK (one),
    upto bigint NOT NULL
);
INSERT INTO work_counts_folded (upto) VALUES (pg_current_xact_id()::text::bigint);
