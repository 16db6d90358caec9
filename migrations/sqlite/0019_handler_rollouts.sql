-- Staged rollouts of handler releases (docs/handlers.md, "Staged rollout"): a candidate release
-- takes a share of a handler's new units, stage by stage, each stage judged against the
-- incumbent on provider outcomes; a stage that fails rolls it back without a person.
CREATE TABLE handler_rollouts (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,              -- the handler
    candidate TEXT NOT NULL,         -- the release rolled out (sha256)
    incumbent TEXT NOT NULL,         -- the release serving when it started (sha256)
    stages TEXT NOT NULL,            -- JSON array of shares of new units, in percent: [10, 25, 100]
    stage INTEGER NOT NULL,          -- index of the stage in force
    state TEXT NOT NULL,             -- running, paused, promoted, rolled_back
    min_units INTEGER NOT NULL,      -- candidate units ended before a stage is judged
    margin REAL NOT NULL,            -- how much worse its failure share may be (0..1)
    started_at INTEGER NOT NULL,
    stage_started_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    reason TEXT,                     -- why it moved on, was promoted, rolled back or paused
    figures TEXT                     -- JSON: the last judgement's outcome figures
);

CREATE INDEX handler_rollouts_by_name ON handler_rollouts (name, started_at);

-- Every step of a rollout (started, each stage passed, paused, resumed, promoted, rolled
-- back), with the reason and the figures it was judged on: what a provider team reads.
CREATE TABLE handler_rollout_events (
    rollout_id TEXT NOT NULL,
    at INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL
);

CREATE INDEX handler_rollout_events_by_rollout ON handler_rollout_events (rollout_id, at);
