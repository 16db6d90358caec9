-- What a unit's writes cost (issue 44, docs/scale.md). SQLite rewrites an index on UPDATE
-- when the statement assigns one of its columns, or one its condition reads. The fill order
-- index was made partial (pending units only) by 0009, then rebuilt whole with the deadline
-- column by 0012, so every later move of a unit (submitted, polled, succeeded, finalizing,
-- completed: each assigns `status` or `next_at`) rewrote a nine-column entry that no query
-- reads. It holds pending units only again; the fill query repeats the condition
-- (`status = 'pending'`), which SQLite needs to use a partial index.
-- The other indexes stay as they are here: SQLite uses a partial index only when the query
-- repeats its condition, and due polls, counts and next-due reads name one status at a time.
-- The PostgreSQL twin is migrations/postgres/0024_lean_unit_writes.sql.
DROP INDEX units_fill;
CREATE INDEX units_fill ON units (pool, status, priority, tenant, deadline_at, task_seq, idx, task_type, next_at)
    WHERE status = 'pending';
