-- Tick writes (issue 11). Finalization claims read succeeded and finalizing units across pools
-- by `(status, next_at)`; every other status only paid for the index: a poll moving `next_at`,
-- a submit marker or an accepted submit each rewrote an entry. As a partial index it holds
-- only the rows finalizers read. SQLite uses a partial index only for a query that states its
-- condition, so the claim repeats `status IN ('succeeded', 'finalizing')` word for word.
-- PostgreSQL made the same index partial in its 0009_poll_indexes.sql.
DROP INDEX units_status_next;
CREATE INDEX units_status_next ON units (status, next_at)
    WHERE status IN ('succeeded', 'finalizing');
