-- Cancel waits for provider jobs (SPEC section 2): a cancelled task's `submitted` units keep
-- their slots until the provider job ends, because the provider keeps running it. The PostgreSQL
-- twin is migrations/postgres/0005_cancel_requested.sql.
--
-- When the client asked to cancel the task (Unix ms); NULL: never. Set once, by the first cancel.
ALTER TABLE tasks ADD COLUMN cancel_requested_at INTEGER;
-- When a cancel reached this unit while it was `submitted`; NULL: none. Such a unit is polled
-- until its job ends, then moves `submitted -> cancelled` (never finalized, never resubmitted).
ALTER TABLE units ADD COLUMN cancel_requested_at INTEGER;
