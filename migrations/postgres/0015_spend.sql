-- Provider spend (`[pools."NAME"] spend`, an account's `spend`): the budget ledger also holds
-- the reservations of grants in a pool or on an account with a spend limit, whether or not
-- their tenant has a budget, named by the pool and the account (`handler/account`) they were
-- made in. The marker's transaction sums them per pool and per account for the period, as it
-- sums a tenant's. The SQLite twin is migrations/sqlite/0014_spend.sql.
ALTER TABLE budget_ledger ADD COLUMN pool TEXT;
ALTER TABLE budget_ledger ADD COLUMN spend_account TEXT;

CREATE INDEX budget_ledger_pool ON budget_ledger (pool, created_at) WHERE pool IS NOT NULL;
CREATE INDEX budget_ledger_account ON budget_ledger (spend_account, created_at)
    WHERE spend_account IS NOT NULL;
