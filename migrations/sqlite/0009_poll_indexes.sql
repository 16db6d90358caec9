-- Poll writes (issue 11). A poll that finds a job still running moves the unit's `next_at`,
-- and every index holding `next_at` takes a new entry for it. The fill order index serves
-- only pending units; as a partial index it holds only those rows, so a poll no longer writes
-- to it. (The finalization index stays whole here: SQLite uses a partial index only when the
-- query repeats its condition, and the claims ask for one status at a time.)
-- (`status` stays a column of the fill index so that it still covers the fill query.)
-- The PostgreSQL twin is migrations/postgres/0009_poll_indexes.sql.
DROP INDEX units_fill;
CREATE INDEX units_fill ON units (pool, status, priority, tenant, task_seq, idx, task_type, next_at)
    WHERE status = 'pending';
