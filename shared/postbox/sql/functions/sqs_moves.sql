-- SQS message move tasks (StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask) on
-- the message engine: a task moves a dead-letter queue's messages back to the queues they were
-- dead-lettered from, or all to one destination, in bounded batches. The start moves the first
-- batch; the move agent moves the rest at the task's rate. Each batch is one transaction that
-- moves its messages and counts them on the task together, so a crash loses and repeats nothing.

-- The rate of a task started without MaxNumberOfMessagesPerSecond (SQS's maximum).
CREATE OR REPLACE FUNCTION sqs_move_default_rate() RETURNS int LANGUAGE sql IMMUTABLE AS $$ SELECT 500 $$;

-- The messages of queue p_source a move task can move now: visible ones, each going to p_dest or,
-- without one, back to the queue it was dead-lettered from while that queue exists. A set-returning
-- SQL function, so that the planner inlines it where it is counted.
CREATE OR REPLACE FUNCTION sqs_move_movable(p_source bigint, p_dest bigint) RETURNS TABLE (msg_id bigint)
LANGUAGE sql STABLE AS $$
    SELECT m.msg_id FROM queue_messages m
    WHERE m.queue_id = p_source AND m.vt <= clock_timestamp()
      AND (p_dest IS NOT NULL OR EXISTS (SELECT 1 FROM queues d WHERE d.id = m.dead_from))
$$;

-- One batch of task p_task: up to p_limit of the source's visible messages, in id order, each to
-- the destination or to the queue it was dead-lettered from (a message whose queue is gone stays).
-- A moved message is a new one there (a new id, sent now: its retention starts again; its receive
-- count and the queue it was dead-lettered from left behind), as SQS's redrive makes it.
-- Batches of one task take turns on the task's row; messages a receive holds are skipped, not
-- waited for. Answers how many moved and whether the task is still running. A CANCELLING task
-- ends CANCELLED here; one whose destination is gone ends FAILED, with SQS's reason.
CREATE OR REPLACE FUNCTION sqs_move_batch(p_task uuid, p_limit int)
RETURNS TABLE (moved int, active boolean) LANGUAGE plpgsql AS $$
DECLARE
    t sqs_move_tasks;
    v_want int;
    v_n int;
    v_into bigint[];
    v_ids bigint[];
    v_dests bigint[];
    v_headers jsonb[];
BEGIN
    SELECT * INTO t FROM sqs_move_tasks WHERE task_handle = p_task FOR UPDATE;
    IF NOT FOUND OR t.status NOT IN ('RUNNING', 'CANCELLING') THEN
        RETURN QUERY SELECT 0, false;
        RETURN;
    END IF;
    IF t.status = 'CANCELLING' THEN
        UPDATE sqs_move_tasks SET status = 'CANCELLED', runner = NULL, lease_until = NULL
        WHERE task_handle = p_task;
        RETURN QUERY SELECT 0, false;
        RETURN;
    END IF;
    IF t.destination_arn IS NOT NULL AND t.destination_id IS NULL THEN
        UPDATE sqs_move_tasks SET status = 'FAILED', failure_reason = 'AWS.SimpleQueueService.NonExistentQueue',
                                  runner = NULL, lease_until = NULL
        WHERE task_handle = p_task;
        RETURN QUERY SELECT 0, false;
        RETURN;
    END IF;
    v_want := greatest(least(p_limit, t.to_move - t.moved), 0);
    -- sqs_move_movable's messages, locked as they are taken (a held one is passed over); then the
    -- turns of their groups in the queues they go to (sqs_group_locks: a move into a FIFO queue draws
    -- a group's ids in turn with its sends), before the moves touch anything else.
    SELECT coalesce(array_agg(c.msg_id), '{}'), coalesce(array_agg(c.dest), '{}'), coalesce(array_agg(c.headers), '{}')
    INTO v_ids, v_dests, v_headers
    FROM (
        SELECT m.msg_id, coalesce(t.destination_id, m.dead_from) AS dest, m.headers FROM queue_messages m
        WHERE m.queue_id = t.source_id AND m.vt <= clock_timestamp()
          AND (t.destination_id IS NOT NULL OR EXISTS (SELECT 1 FROM queues d WHERE d.id = m.dead_from))
        ORDER BY m.msg_id LIMIT (SELECT v_want) FOR UPDATE SKIP LOCKED
    ) c;
    PERFORM sqs_group_locks(v_dests, v_headers);
    WITH taken AS (
        DELETE FROM queue_messages m
        WHERE m.queue_id = t.source_id AND m.msg_id = ANY (v_ids)
        RETURNING m.msg_id, m.message, m.headers, m.size, m.dead_from
    ), placed AS (
        INSERT INTO queue_messages (queue_id, vt, message, headers, size)  -- sent anew, as SQS's redrive has it
        SELECT coalesce(t.destination_id, x.dead_from), clock_timestamp(), x.message,
               CASE WHEN jsonb_typeof(x.headers->'sqs') = 'object' THEN x.headers #- '{sqs,dq}' ELSE x.headers END,
               x.size
        FROM taken x ORDER BY x.msg_id
        RETURNING queue_id
    )
    SELECT count(*), coalesce(array_agg(DISTINCT queue_id), '{}') INTO v_n, v_into FROM placed;
    -- Long polls on the queues that received messages wake up.
    PERFORM pg_notify('queue_' || q, '') FROM unnest(v_into) q
    WHERE EXISTS (SELECT 1 FROM waiters w WHERE w.channel = 'queue_' || q AND w.until > clock_timestamp());
    -- Done: all it set out to move, or none of the source's movable messages is visible any more
    -- (in flight ones stay where they are).
    IF t.moved + v_n >= t.to_move
       OR (v_n < v_want AND NOT EXISTS (SELECT 1 FROM sqs_move_movable(t.source_id, t.destination_id))) THEN
        UPDATE sqs_move_tasks SET moved = t.moved + v_n, status = 'COMPLETED', runner = NULL, lease_until = NULL
        WHERE task_handle = p_task;
        RETURN QUERY SELECT v_n, false;
    ELSE
        UPDATE sqs_move_tasks SET moved = t.moved + v_n WHERE task_handle = p_task;
        RETURN QUERY SELECT v_n, true;
    END IF;
END $$;

-- StartMessageMoveTask: the task, counted (the source's visible messages it can move), with its
-- first batch moved (p_first messages at most). The task is then held for a second, so the agent's
-- first batch of it comes a second after this one. Refused: an unknown source (PB404) or destination
-- (PB404 no_destination), a source that is no queue's dead-letter queue (PB400), a source with an
-- active task (PB409).
CREATE OR REPLACE FUNCTION sqs_move_start(
    p_tenant uuid, p_project uuid, p_source text, p_source_arn text, p_destination text, p_destination_arn text,
    p_rate int, p_first int
) RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    src queues;
    v_dest bigint;
    v_to_move bigint;
    v_task uuid;
BEGIN
    src := queue_find(p_tenant, p_project, p_source);
    IF NOT EXISTS (SELECT 1 FROM queues WHERE dead_letter_queue_id = src.id) THEN
        RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'not_dead_letter_queue',
            MESSAGE = 'Source queue must be configured as a Dead Letter Queue.';
    END IF;
    IF p_destination IS NOT NULL THEN
        SELECT id INTO v_dest FROM queues WHERE tenant_id = p_tenant AND project_id = p_project AND name = p_destination;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'no_destination',
                MESSAGE = 'The resource that you specified for the DestinationArn parameter doesn''t exist.';
        END IF;
        IF v_dest = src.id THEN
            RAISE EXCEPTION USING ERRCODE = 'PB400', DETAIL = 'same_queue',
                MESSAGE = 'The source and destination queues must be different queues.';
        END IF;
    END IF;
    SELECT count(*) INTO v_to_move FROM sqs_move_movable(src.id, v_dest);
    BEGIN
        INSERT INTO sqs_move_tasks (tenant_id, source_id, destination_id, source_arn, destination_arn, status,
                                    to_move, max_per_second)
        VALUES (p_tenant, src.id, v_dest, p_source_arn, p_destination_arn, 'RUNNING', v_to_move, p_rate)
        RETURNING task_handle INTO v_task;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION USING ERRCODE = 'PB409', DETAIL = 'move_task_active',
            MESSAGE = 'There is already a task running. Only one active task is allowed for a source queue '
                      'arn at a given time.';
    END;
    PERFORM sqs_move_batch(v_task, p_first);
    UPDATE sqs_move_tasks SET lease_until = clock_timestamp() + interval '1 second'
    WHERE task_handle = v_task AND status = 'RUNNING';
    RETURN v_task;
END $$;

-- ListMessageMoveTasks: the source's most recent tasks first, as SQS's result entries (a running
-- task's TaskHandle as its id: the caller writes it as SQS does).
CREATE OR REPLACE FUNCTION sqs_move_list(p_tenant uuid, p_project uuid, p_source text, p_limit int)
RETURNS json LANGUAGE plpgsql STABLE AS $$
DECLARE
    src queues;
BEGIN
    src := queue_find(p_tenant, p_project, p_source);
    RETURN (
        SELECT coalesce(json_agg(json_strip_nulls(json_build_object(
            'Status', t.status,
            'TaskHandle', CASE WHEN t.status = 'RUNNING' THEN t.task_handle::text END,
            'SourceArn', t.source_arn,
            'DestinationArn', t.destination_arn,
            'MaxNumberOfMessagesPerSecond', t.max_per_second,
            'ApproximateNumberOfMessagesMoved', t.moved,
            'ApproximateNumberOfMessagesToMove', t.to_move,
            'FailureReason', t.failure_reason,
            'StartedTimestamp', (extract(epoch FROM t.started_at) * 1000)::bigint
        )) ORDER BY t.started_at DESC), '[]')
        FROM (SELECT * FROM sqs_move_tasks WHERE source_id = src.id ORDER BY started_at DESC LIMIT p_limit) t);
END $$;

-- CancelMessageMoveTask: a RUNNING task of source queue p_source (the one its handle names) stops
-- moving and answers how many it moved. Taking its row waits out a batch in flight, so that count is
-- final. A task an agent run holds is CANCELLING until that run lets it go (its next batch or its
-- end); any other is CANCELLED at once. An unknown source is PB404; an unknown or finished task,
-- PB404 no_move_task.
DROP FUNCTION IF EXISTS sqs_move_cancel(uuid, uuid, uuid);
CREATE OR REPLACE FUNCTION sqs_move_cancel(p_tenant uuid, p_project uuid, p_source text, p_task uuid)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    src queues;
    t sqs_move_tasks;
BEGIN
    src := queue_find(p_tenant, p_project, p_source);
    SELECT m.* INTO t FROM sqs_move_tasks m
    WHERE m.task_handle = p_task AND m.source_id = src.id AND m.tenant_id = p_tenant AND m.status = 'RUNNING'
    FOR UPDATE OF m;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PB404', DETAIL = 'no_move_task', MESSAGE = 'Task does not exist.';
    END IF;
    UPDATE sqs_move_tasks SET status = CASE WHEN runner IS NOT NULL AND lease_until > clock_timestamp()
                                            THEN 'CANCELLING' ELSE 'CANCELLED' END
    WHERE task_handle = p_task;
    RETURN t.moved;
END $$;

-- The move agent's run p_runner takes up to p_limit active tasks no other run holds, for
-- p_seconds, oldest first, each with the rate to move it at.
CREATE OR REPLACE FUNCTION sqs_move_take(p_runner uuid, p_seconds float8, p_limit int)
RETURNS TABLE (task uuid, rate int) LANGUAGE sql AS $$
    UPDATE sqs_move_tasks t SET runner = p_runner, lease_until = clock_timestamp() + p_seconds * interval '1 second'
    WHERE t.task_handle IN (
        SELECT a.task_handle FROM sqs_move_tasks a
        WHERE a.status IN ('RUNNING', 'CANCELLING') AND (a.lease_until IS NULL OR a.lease_until <= clock_timestamp())
        ORDER BY a.started_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
    RETURNING t.task_handle, coalesce(t.max_per_second, sqs_move_default_rate())
$$;

-- The end of a run: the tasks it held are free again a second later (its last slice's second is
-- theirs: a run right after this one does not move them twice as fast), and those cancelled
-- meanwhile end CANCELLED.
CREATE OR REPLACE FUNCTION sqs_move_release(p_runner uuid) RETURNS void LANGUAGE sql AS $$
    UPDATE sqs_move_tasks SET runner = NULL, lease_until = clock_timestamp() + interval '1 second',
                              status = CASE WHEN status = 'CANCELLING' THEN 'CANCELLED' ELSE status END
    WHERE runner = p_runner
$$;
