-- Where the retention sweep can stop walking a queue's archive. The archive is kept in message-id
-- order (its primary key), and ids are drawn as messages are sent, not as they are archived, so the
-- sweep, looking for rows archived before its cutoff, walked every archived row of every queue when
-- none had expired (about 0.7 s a million rows, every run). A mark records, as a sweep starts, the
-- newest id the queues' sequence had handed out: a row archived before a cutoff was sent before it,
-- so its id is at most the value of any mark taken at or after that cutoff, and the walk stops there.
-- Deleting marks only widens the walk (a move deletes the target's: the ids it brings came from
-- another cell's sequence); the sweep deletes those older than any plan's retention.
CREATE TABLE queue_archive_marks (
    at     timestamptz PRIMARY KEY,
    msg_id bigint NOT NULL
);
COMMENT ON TABLE queue_archive_marks IS 'shared: the queues'' id sequence as each retention sweep on this cell started';
GRANT SELECT, INSERT, DELETE ON queue_archive_marks TO postbox_app;
