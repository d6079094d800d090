-- The console's charts: once a minute the history agent writes one row per queue, work queue,
-- partitioned queue and keyed stream with what its counters say then (cumulative messages in and
-- out, depth, the oldest waiting message's age), and deletes rows older than a day. Messages in
-- and out per minute are the differences of consecutive rows. No foreign key: a deleted resource's
-- rows go with the day's retention, and its id is never used again.
CREATE TABLE history_minutes (
    kind         text        NOT NULL CHECK (kind IN ('queue', 'work', 'partitioned', 'stream')),
    resource_id  bigint      NOT NULL,   -- the resource's row id in its surface's table
    minute       timestamptz NOT NULL,   -- the minute it was recorded in (truncated to the minute)
    in_total     bigint      NOT NULL,   -- cumulative: messages that came in
    out_total    bigint      NOT NULL,   -- cumulative: messages that went out
    depth        bigint      NOT NULL,
    oldest_age_s real,                   -- NULL when nothing waits
    PRIMARY KEY (kind, resource_id, minute)
);
-- Rows arrive in minute order: a BRIN index finds the expired ones for the retention's delete.
CREATE INDEX history_minutes_minute ON history_minutes USING brin (minute);
