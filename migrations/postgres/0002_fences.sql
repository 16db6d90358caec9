-- Fencing tokens (SPEC section 11): the highest lease token seen per pool. A scheduler's write
-- carrying an older token is refused, so a paused ex-leader cannot write after losing its lease.
-- The SQLite twin is migrations/sqlite/0002_fences.sql.
CREATE TABLE pool_fences (
    pool  TEXT   PRIMARY KEY,
    token BIGINT NOT NULL
);
