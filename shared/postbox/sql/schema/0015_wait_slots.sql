-- A caller's requests that wait at once (long polls, SSE windows), each holding one of the caller's
-- slots until it answers or its lease runs out: `wait_slot_take` bounds them across every process
-- and function. Unlogged, as `waiters`: after a crash no request is waiting.
CREATE UNLOGGED TABLE wait_slots (
    caller text NOT NULL,
    slot   int NOT NULL,
    waiter uuid NOT NULL,
    until  timestamptz NOT NULL,
    PRIMARY KEY (caller, slot)
);
