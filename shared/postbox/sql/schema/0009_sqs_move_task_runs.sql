-- Message move tasks run in the background: a task is RUNNING (or CANCELLING) until the move agent
-- has moved what it set out to move. A run of the agent holds a task for a while (`runner`, until
-- `lease_until`) so two runs never move one task at twice its rate; a run that dies lets it go when
-- the lease runs out.
ALTER TABLE sqs_move_tasks ADD COLUMN runner uuid;
ALTER TABLE sqs_move_tasks ADD COLUMN lease_until timestamptz;

-- One active task per source queue, even when two starts race.
CREATE UNIQUE INDEX sqs_move_tasks_one_active ON sqs_move_tasks (source_id)
    WHERE status IN ('RUNNING', 'CANCELLING');

-- What the agent looks for: active tasks, oldest first.
CREATE INDEX sqs_move_tasks_active ON sqs_move_tasks (started_at)
    WHERE status IN ('RUNNING', 'CANCELLING');
