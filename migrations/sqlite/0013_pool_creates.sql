-- The create log of pools with quotas (`[pools."NAME"] rate`, `daily`): one row per submit
-- marker, written in the marker's transaction, so the creates counted in a window survive a
-- restart and rebuild the slot store's window logs. Rows older than a day are pruned (no
-- window is longer). The PostgreSQL twin is migrations/postgres/0014_pool_creates.sql.
CREATE TABLE pool_creates (
    pool    TEXT    NOT NULL,
    account TEXT,
    at      INTEGER NOT NULL,
    unit_id TEXT    NOT NULL
);

CREATE INDEX pool_creates_window ON pool_creates (pool, at);
