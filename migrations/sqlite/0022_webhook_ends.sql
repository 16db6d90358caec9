-- A retried task ends again: a retry that moves any of its units reopens its completion
-- webhook (`webhook_done = 0`) and counts one more end in `webhook_ends`, in the retry's own
-- transaction. The n-th end's delivery has an id of its own (`msg_<task>_<event>` for the
-- first, `msg_<task>_<event>_<n>` after), and queueing it closes the task only while
-- `webhook_ends` is still the count the sweep read, so a sweep of an earlier end never closes
-- a reopened task. Every existing task is at its first end. The PostgreSQL twin is
-- migrations/postgres/0023_webhook_ends.sql.
ALTER TABLE tasks ADD COLUMN webhook_ends INTEGER NOT NULL DEFAULT 0;
