-- The SQLite indexes before the lean-write migrations (migrations/sqlite/0023_lean_unit_writes.sql and what
-- follows it), put back on a migrated database so the tick and submit benchmarks measure
-- before and after in one run. Keep it the inverse of those migrations: the result has the
-- same `.schema` as a database migrated to 0022.
DROP INDEX units_fill;
CREATE INDEX units_fill ON units (pool, status, priority, tenant, deadline_at, task_seq, idx, task_type, next_at);
