-- The PostgreSQL layout of `units` before the lean-write migrations (migrations/postgres/0024_lean_unit_writes.sql and
-- what follows it), put back on a migrated database so the scale, tick and submit benchmarks
-- measure before and after in one run. Keep it the inverse of those migrations: the result
-- dumps (pg_dump --schema-only) the same as a database migrated to 0023.
DROP INDEX units_provider_job;
CREATE INDEX units_provider_job ON units (provider_job_id) WHERE provider_job_id IS NOT NULL;
DROP INDEX units_pool_status_next;
CREATE INDEX units_pool_status_next ON units (pool, status, next_at);
ALTER TABLE units RESET (fillfactor);
DROP INDEX unit_events_id;
ALTER TABLE unit_events ADD PRIMARY KEY (id);
