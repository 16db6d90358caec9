-- Event streams (issue 13). Ids are handed out at insert and transactions commit in any order,
-- so "ids above the last one read" could skip an event whose transaction committed late. Each
-- event now records its transaction; a stream reads only events of transactions older than
-- every one still running (see slotd-store's events.rs). The transaction ids of appended rows
-- only grow, so a BRIN index serves the range reads at almost no cost to the appends.
-- SQLite needs none of this: its single writer commits in id order.
ALTER TABLE unit_events ADD COLUMN tx BIGINT NOT NULL DEFAULT (pg_current_xact_id()::text::bigint);
CREATE INDEX unit_events_tx ON unit_events USING brin (tx);
