-- A send's usage (its messages this month, the bytes it stores) is held on the queue counter row the
-- send writes anyway, as pending, and moved into the tenant's figures (tenant_monthly_messages,
-- tenant_storage) once a row holds more than a small bound: one row write per send instead of three.
-- pending_month is the month the held messages were sent in.
ALTER TABLE queue_counters
    ADD COLUMN pending_messages bigint NOT NULL DEFAULT 0,
    ADD COLUMN pending_bytes    bigint NOT NULL DEFAULT 0,
    ADD COLUMN pending_month    date;
