-- Ids unique across cells (postbox.cell_ids): a cell's sequences step by 64 times their block and
-- hand out only values whose remainder is the cell's number times the block.

-- Make `p_seq` hand out only values above `p_floor` whose remainder (modulo its step) is
-- `p_remainder` (NULL: the one it has). Never moves it back. The new position leaves 1,024 steps
-- free for values other sessions draw between this one's nextval and its setval, so none of
-- theirs lands above it. Returns the sequence's newest value.
CREATE OR REPLACE FUNCTION cell_sequence_raise(p_seq regclass, p_floor bigint, p_remainder bigint DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_step bigint := (SELECT seqincrement FROM pg_sequence WHERE seqrelid = p_seq);
    v_now  bigint := nextval(p_seq);  -- nothing handed out so far is above it
    v_rem  bigint := coalesce(p_remainder, v_now % v_step);
    v_from bigint;
BEGIN
    IF v_now > p_floor AND v_now % v_step = v_rem THEN
        RETURN v_now;
    END IF;
    v_from := greatest(v_now, p_floor);
    RETURN setval(p_seq, v_from - v_from % v_step + v_rem + 1024 * v_step);
END $$;
