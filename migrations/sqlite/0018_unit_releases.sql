-- Jobs pinned to the release that submitted them (docs/handlers.md, "Releases"): each unit
-- records the handler release (sha256) that planned it and the one that created its current
-- provider job; polls, provider callbacks, cancel and finalization of that job go through the
-- latter while it stays loaded.
ALTER TABLE units ADD COLUMN planned_release TEXT;
ALTER TABLE units ADD COLUMN job_release TEXT;

-- A release published as able to take over the jobs of the releases before it (as Temporal's
-- auto-upgrade): their jobs move to it at once instead of finishing on the release that
-- created them.
ALTER TABLE handler_releases ADD COLUMN takes_over INTEGER NOT NULL DEFAULT 0;
