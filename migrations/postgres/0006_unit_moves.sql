-- The state machine of SPEC section 2, enforced where rows are written: a status change of a
-- unit that is not a legal move is refused by the database itself, whoever issues it (the
-- scheduler, the finalizer, cancel, retry, or a hand-written UPDATE). `unit_moves` lists the
-- legal (from, to) pairs; it must equal `model::UnitStatus::can_move_to`, which the store
-- tests compare row for row. Same-status writes (a poll, a lease takeover) are not moves.
-- The SQLite twin is migrations/sqlite/0006_unit_moves.sql.
CREATE TABLE unit_moves (
    from_status TEXT NOT NULL,
    to_status   TEXT NOT NULL,
    PRIMARY KEY (from_status, to_status)
);

INSERT INTO unit_moves (from_status, to_status) VALUES
    ('pending', 'submitted'),
    ('pending', 'cancelled'),
    ('submitted', 'pending'),
    ('submitted', 'succeeded'),
    ('submitted', 'failed'),
    ('submitted', 'cancelled'),
    ('succeeded', 'finalizing'),
    ('succeeded', 'failed'),
    ('succeeded', 'cancelled'),
    ('finalizing', 'succeeded'),
    ('finalizing', 'completed'),
    ('finalizing', 'failed'),
    ('finalizing', 'cancelled'),
    ('failed', 'pending');

CREATE FUNCTION units_legal_move() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM unit_moves WHERE from_status = OLD.status AND to_status = NEW.status
    ) THEN
        RAISE EXCEPTION 'illegal unit transition % -> % of unit % (SPEC section 2)',
            OLD.status, NEW.status, OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER units_legal_move BEFORE UPDATE OF status ON units
FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
EXECUTE FUNCTION units_legal_move();
