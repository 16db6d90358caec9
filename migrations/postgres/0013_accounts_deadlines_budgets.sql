-- Issue 14: provider accounts, deadlines and tenant budgets. The SQLite twin is
-- migrations/sqlite/0012_accounts_deadlines_budgets.sql.

-- The account a unit was marked submitted on (NULL: the handler's implicit account). Kept after
-- the unit leaves `submitted`, for the record; a new submit marker overwrites it.
ALTER TABLE units ADD COLUMN account TEXT;
-- Deadlines, copied from the task so the fill order stays one indexed query. `deadline_at` is
-- never NULL so one ascending index orders it on both databases: no deadline is the largest
-- BIGINT. `best_effort` = 1: an unreachable deadline is recorded, not enforced.
ALTER TABLE units ADD COLUMN deadline_at BIGINT NOT NULL DEFAULT 9223372036854775807;
ALTER TABLE units ADD COLUMN start_by BIGINT;
ALTER TABLE units ADD COLUMN best_effort INTEGER NOT NULL DEFAULT 0;
-- The handler's estimate of the unit's cost (contract 1.2 `costs`), in the provider's unit.
ALTER TABLE units ADD COLUMN cost_estimate DOUBLE PRECISION;
-- Why a pending unit is not being filled although it is due (`budget`); NULL otherwise.
ALTER TABLE units ADD COLUMN wait_reason TEXT;

ALTER TABLE tasks ADD COLUMN deadline_at BIGINT;
ALTER TABLE tasks ADD COLUMN start_by BIGINT;
ALTER TABLE tasks ADD COLUMN deadline_policy TEXT;

-- Fill order with earliest-deadline-first inside each (priority, tenant).
DROP INDEX units_fill;
CREATE INDEX units_fill ON units (pool, status, priority, tenant, deadline_at, task_seq, idx, task_type, next_at)
    WHERE status = 'pending';
-- The deadline sweep: pending units that carry a deadline or a start-by time.
CREATE INDEX units_deadline ON units (pool, deadline_at)
    WHERE status = 'pending' AND (deadline_at < 9223372036854775807 OR start_by IS NOT NULL);

-- Tenant budgets: what a tenant's units may cost per period. `source` says who set it last:
-- `config` rows follow the file at start-up; an `api` row (PUT /v1/tenants/{name}/budget) is
-- kept until the API changes it again.
CREATE TABLE tenant_budgets (
    tenant       TEXT    PRIMARY KEY NOT NULL,
    limit_amount DOUBLE PRECISION    NOT NULL,
    period_ms    BIGINT NOT NULL,
    source       TEXT    NOT NULL,
    updated_at   BIGINT NOT NULL
);

-- The budget ledger: one row per submission (unit, stage, submit attempt) of a unit whose
-- tenant has a budget, written in the transaction of the submit marker. `reserved` is the
-- estimate; when the submission ends, `spent` is the provider-reported cost (or the estimate
-- when the job succeeded without one, or 0 when no job ran) and `settled_at` is set.
CREATE TABLE budget_ledger (
    unit_id      TEXT    NOT NULL,
    submission   TEXT    NOT NULL,
    tenant       TEXT    NOT NULL,
    period_start BIGINT NOT NULL,
    reserved     DOUBLE PRECISION    NOT NULL,
    spent        DOUBLE PRECISION,
    created_at   BIGINT NOT NULL,
    settled_at   BIGINT,
    PRIMARY KEY (unit_id, submission)
);
CREATE INDEX budget_ledger_tenant ON budget_ledger (tenant, period_start);
-- The open reservations (at most one per unit), settled when a submission ends.
CREATE INDEX budget_ledger_open ON budget_ledger (unit_id) WHERE settled_at IS NULL;

-- A deadline that cannot be met fails a unit before it is ever submitted (`pending -> failed`,
-- code `deadline_unreachable`): the one failure that needs no provider job.
INSERT INTO unit_moves (from_status, to_status) VALUES ('pending', 'failed');

-- The inline guard of migration 0010, generated again from `unit_moves`.
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
