-- Fencing tokens (SPEC section 11): the highest lease token seen per pool. A scheduler's write
-- carrying an older token is refused, so a paused ex-leader cannot write after losing its lease.
-- The PostgreSQL twin is migrations/postgres/0002_fences.sql.
CREATE TABLE pool_fences (
    pool  TEXT    PRIMARY KEY NOT NULL,
    token INTEGER NOT NULL
);
