-- What a message costs the write-ahead log (Aurora bills its write I/Os) on its way through a queue.

-- The archive's BRIN on archived_at served no query: the retention sweep bounds archived_at by
-- clock_timestamp(), which is volatile and so never an index condition (it walks each queue's
-- primary key), and nothing else filters on it. Yet every archived row updated its summary (72
-- bytes of WAL a message) while the row landed in a summarized range, which in an archive whose
-- retention frees old pages for new rows is most of them.
DROP INDEX queue_archive_archived_at;

-- A waiting message's columns in a new order: those a read rewrites (vt, read_ct, first_read_at)
-- last. A read is a HOT update, whose WAL record leaves out the bytes the old and new row share at
-- their start and end: with the message and headers before the columns it changes, a read logs
-- about 20 bytes of the row whatever the message's size, instead of everything from vt on, the
-- message included (a 255-byte message: 108 bytes of WAL a read instead of 396). The rows are
-- copied over under the table's lock (sends and reads wait for it: 3.5 s for a million waiting
-- messages on a 2-core test machine); ids, counters and the sequence are untouched. Its triggers
-- (the counting ones) are put on the new table as they are, so that no write of a function still
-- running the previous release goes uncounted before the functions files are applied again.
ALTER TABLE queue_messages RENAME TO queue_messages_old;
ALTER INDEX queue_messages_pkey RENAME TO queue_messages_old_pkey;
DROP INDEX queue_messages_group;

CREATE TABLE queue_messages (
    queue_id      bigint NOT NULL,
    msg_id        bigint NOT NULL DEFAULT nextval('queue_msg_id_seq'),
    enqueued_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    dead_from     bigint,
    size          int NOT NULL,
    message       jsonb,
    headers       jsonb,
    vt            timestamptz NOT NULL,
    read_ct       int NOT NULL DEFAULT 0,
    first_read_at timestamptz,
    PRIMARY KEY (queue_id, msg_id)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, fillfactor = 50);

INSERT INTO queue_messages (queue_id, msg_id, enqueued_at, dead_from, size, message, headers, vt, read_ct, first_read_at)
SELECT queue_id, msg_id, enqueued_at, dead_from, size, message, headers, vt, read_ct, first_read_at
FROM queue_messages_old;

CREATE INDEX queue_messages_group ON queue_messages (queue_id, (headers->'sqs'->>'g'), msg_id)
    WHERE (headers->'sqs'->>'g') IS NOT NULL;
COMMENT ON TABLE queue_messages IS 'tenant: queue_id -> queues';
GRANT SELECT, INSERT, UPDATE, DELETE ON queue_messages TO postbox_app;

DO $$
DECLARE t record;
BEGIN
    FOR t IN SELECT pg_get_triggerdef(oid) AS def FROM pg_trigger
             WHERE tgrelid = 'queue_messages_old'::regclass AND NOT tgisinternal LOOP
        EXECUTE regexp_replace(t.def, ' ON (public\.)?queue_messages_old ', ' ON queue_messages ');
    END LOOP;
END $$;

DROP TABLE queue_messages_old;
ANALYZE queue_messages;
