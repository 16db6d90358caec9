-- The state machine's guard (migration 0006), without a query per row (issue 11). The
-- trigger looked each change up in `unit_moves` with a query of its own: about 5 µs a row,
-- a quarter of a 1,000-unit submit marker. It now tests the change against a constant list,
-- which PL/pgSQL evaluates without a query. The list is generated here from `unit_moves`,
-- which stays the one statement of the legal moves: a migration that changes that table
-- must run this block again.
DO $migration$
DECLARE
    moves TEXT;
BEGIN
    SELECT string_agg(quote_literal(from_status || '>' || to_status), ', '
                      ORDER BY from_status, to_status)
    INTO moves FROM unit_moves;
    EXECUTE format($create$
        CREATE OR REPLACE FUNCTION units_legal_move() RETURNS trigger LANGUAGE plpgsql AS $body$
        BEGIN
            IF NOT (OLD.status || '>' || NEW.status = ANY (ARRAY[%s])) THEN
                RAISE EXCEPTION 'illegal unit transition %% -> %% of unit %% (SPEC section 2)',
                    OLD.status, NEW.status, OLD.id
                    USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END
        $body$
    $create$, moves);
END
$migration$;
