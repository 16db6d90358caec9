-- The state machine of SPEC section 2, enforced where rows are written: a status change of a
-- unit that is not a legal move is refused by the database itself, whoever issues it (the
-- scheduler, the finalizer, cancel, retry, or a hand-written UPDATE). `unit_moves` lists the
-- legal (from, to) pairs; it must equal `model::UnitStatus::can_move_to`, which the store
-- tests compare row for row. Same-status writes (a poll, a lease takeover) are not moves.
-- The PostgreSQL twin is migrations/postgres/0006_unit_moves.sql.
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

CREATE TRIGGER units_legal_move BEFORE UPDATE OF status ON units
WHEN OLD.status <> NEW.status AND NOT EXISTS (
    SELECT 1 FROM unit_moves WHERE from_status = OLD.status AND to_status = NEW.status
)
BEGIN
    SELECT RAISE(ABORT, 'illegal unit transition (SPEC section 2)');
END;
