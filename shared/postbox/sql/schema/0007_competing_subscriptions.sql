-- Subscriptions on competing queues: a subscription's subscriber claims the queue's own messages,
-- so a claimed message records which subscription holds it (NULL: a plain claim). Only such claims
-- enter the index, which counts what a subscription holds against its max_in_flight; a plain
-- claim leaves the column NULL, so it stays an in-place (HOT) update.
ALTER TABLE work_messages ADD COLUMN claimed_for uuid;
CREATE INDEX work_messages_claimed_for ON work_messages (claimed_for)
    WHERE claimed_for IS NOT NULL AND ended_at IS NULL;

-- A claim or a finish through the queue's own routes by a work key finds the subscription of its
-- subject on that queue.
CREATE INDEX work_subscriptions_subscriber ON work_subscriptions (queue_id, subscriber_type, subscriber_id);
