-- What a unit's writes cost (issue 44, docs/scale.md). No update that moves a unit between
-- statuses can be HOT (`status` is indexed), so each takes a new entry in every index of
-- `units` whose predicate holds for the new row. Two full indexes held every unit whatever
-- its status, finished ones included, though their readers look only at live units:
--
-- * the provider job id is looked up only while the unit is `submitted` (a provider's callback
--   or a poll names the job); a unit that went on to `succeeded`, `finalizing` and `completed`
--   took three more entries that no query reads;
-- * due polls, the pool's submitted units and the next due time read `pending`, `submitted`,
--   `succeeded` and `finalizing` units; a unit that ends took an entry for its end state, and
--   the index grew with the whole history. (The per-pool counts of the gauges read every
--   status; they scan the table, as they scanned the whole index before.)
--
-- Both now hold only the rows their readers look for. `units` also leaves a quarter of each
-- new page free, so a unit's next version usually lands on its own page: the WAL record then
-- carries only the bytes that changed (PostgreSQL's prefix and suffix compression of a
-- same-page update), and an update that changes no indexed column (a lease renewal) is HOT.
-- The SQLite twin is migrations/sqlite/0023_lean_unit_writes.sql.
DROP INDEX units_provider_job;
CREATE INDEX units_provider_job ON units (provider_job_id)
    WHERE status = 'submitted' AND provider_job_id IS NOT NULL;
DROP INDEX units_pool_status_next;
CREATE INDEX units_pool_status_next ON units (pool, status, next_at)
    WHERE status IN ('pending', 'submitted', 'succeeded', 'finalizing');
ALTER TABLE units SET (fillfactor = 75);
