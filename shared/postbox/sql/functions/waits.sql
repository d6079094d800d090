-- Take one of `p_cap` wait slots of a caller for `p_seconds` (the wait's lease): false when every
-- slot is held. A slot whose lease ran out (its request never gave it back) is taken over. Two
-- takers of the same free slot meet at its key: the second moves on to the next free one.
CREATE OR REPLACE FUNCTION wait_slot_take(p_caller text, p_waiter uuid, p_seconds double precision, p_cap int)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_slot int;
BEGIN
    FOR v_slot IN
        SELECT s FROM generate_series(0, p_cap - 1) s
        WHERE s NOT IN (SELECT slot FROM wait_slots WHERE caller = p_caller AND until > clock_timestamp())
        ORDER BY random()
    LOOP
        INSERT INTO wait_slots AS w (caller, slot, waiter, until)
        VALUES (p_caller, v_slot, p_waiter, clock_timestamp() + p_seconds * interval '1 second')
        ON CONFLICT (caller, slot) DO UPDATE SET waiter = EXCLUDED.waiter, until = EXCLUDED.until
            WHERE w.until <= clock_timestamp();
        IF FOUND THEN
            RETURN true;
        END IF;
    END LOOP;
    RETURN false;
END $$;
