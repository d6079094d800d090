-- Ids that never collide across cells. Each cell has a number k (0 to 63, given once and kept) and
-- every sequence steps by 64 times its block (1; 1,024 for the work journal, whose rows take a
-- block of ids each), handing out only values whose remainder is k times the block: two cells'
-- ids never meet, so a tenant's rows keep their ids when they move to another cell. A move then
-- raises the target's sequences past the source's, keeping their remainders, so the moved
-- tenant's new ids keep growing past its old ones (queues deliver by msg_id, the work surface
-- claims by seq, its events are read by journal seq).
--
-- Until it is numbered a cell hands out k = 0's values: the first cell is 0, and a database
-- without cells (one deployment, one database) is that cell. Another cell takes its number from
-- the first cell's register when its first tenant is placed on it (postbox.cell_ids).

-- Which number this cell has (one row once numbered).
CREATE TABLE control.cell_identity (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    cell        text    NOT NULL,
    number      int     NOT NULL CHECK (number >= 0 AND number < 64),
    numbered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The numbers given, in every cell; the first cell's is the one read and written.
CREATE TABLE control.cell_numbers (
    number      int  PRIMARY KEY CHECK (number >= 0 AND number < 64),
    cell        text NOT NULL UNIQUE,
    numbered_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE control.cell_identity IS 'shared: this cell''s number, which its ids'' remainders are';
COMMENT ON TABLE control.cell_numbers IS 'shared: the numbers given to cells (the first cell''s is the one read)';

GRANT SELECT, INSERT ON control.cell_identity, control.cell_numbers TO postbox_app;

-- Every sequence: 64 times its step, the next value the first one at or after its next value
-- whose remainder is 0 (cell 0's), so what it handed out stays below what it will.
DO $$
DECLARE
    s record;
    v_next bigint;
    v_step bigint;
BEGIN
    FOR s IN SELECT c.oid::regclass AS seq, q.seqincrement AS block
               FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid
              WHERE c.relnamespace = 'public'::regnamespace LOOP
        EXECUTE format('SELECT CASE WHEN is_called THEN last_value + %s ELSE last_value END FROM %s',
                       s.block, s.seq) INTO v_next;
        v_step := s.block * 64;
        EXECUTE format('ALTER SEQUENCE %s INCREMENT BY %s', s.seq, v_step);
        PERFORM setval(s.seq, greatest(v_step, ((v_next + v_step - 1) / v_step) * v_step), false);
    END LOOP;
END $$;
