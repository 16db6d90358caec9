-- slotd schema, SQLite dialect (the PostgreSQL twin is migrations/postgres/0001_init.sql).
-- Times are Unix milliseconds chosen by the caller (the scheduler's injected clock).

-- A client's submission. `seq` is the rowid: monotonically increasing (AUTOINCREMENT never
-- reuses a value), so it orders tasks FIFO for the fill order and serves as the list cursor.
CREATE TABLE tasks (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT    NOT NULL UNIQUE,
    tenant          TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    idempotency_key TEXT,
    priority        INTEGER NOT NULL DEFAULT 0,
    callback_url    TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    -- NULL keys never collide, so tasks without a key are unconstrained.
    UNIQUE (tenant, idempotency_key)
);

-- Newest-first listing per tenant (optionally by type).
CREATE INDEX tasks_tenant_seq ON tasks (tenant, seq);
CREATE INDEX tasks_tenant_type_seq ON tasks (tenant, type, seq);

-- The schedulable pieces of a task: every field of `model::Unit`, the finalization lease,
-- and the task's tenant, type, priority and seq copied so fill order is one indexed query.
CREATE TABLE units (
    id                TEXT    PRIMARY KEY NOT NULL,
    task_id           TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    idx               INTEGER NOT NULL,
    tenant            TEXT    NOT NULL,
    task_type         TEXT    NOT NULL,
    task_seq          INTEGER NOT NULL,
    priority          INTEGER NOT NULL,
    pool              TEXT    NOT NULL,
    stage             TEXT    NOT NULL,
    status            TEXT    NOT NULL,
    spec              TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    provider_job_id   TEXT,
    submit_attempt    INTEGER NOT NULL DEFAULT 0,
    attempts          INTEGER NOT NULL DEFAULT 0,
    polls             INTEGER NOT NULL DEFAULT 0,
    next_at           INTEGER NOT NULL,
    submitted_at      INTEGER,
    error             TEXT,
    result            TEXT,
    cost              TEXT,
    -- Finalization lease: who is storing the artifacts, and until when.
    lease_owner       TEXT,
    lease_until       INTEGER,
    finalize_attempts INTEGER NOT NULL DEFAULT 0,
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    UNIQUE (task_id, idx)
);

-- Fill order: equality on (pool, status) then rows already sorted by the window partition
-- (priority, tenant) and its order (task_seq, idx), so the window needs no sort; type and
-- next_at make it covering, so the window never touches the table.
CREATE INDEX units_fill ON units (pool, status, priority, tenant, task_seq, idx, task_type, next_at);
-- Due polls (pool, submitted, next_at), submitted ids per pool, counts per pool.
CREATE INDEX units_pool_status_next ON units (pool, status, next_at);
-- Finalization claims across pools: succeeded by next_at, finalizing by lease.
CREATE INDEX units_status_next ON units (status, next_at);
-- Provider webhooks name the job.
CREATE INDEX units_provider_job ON units (provider_job_id) WHERE provider_job_id IS NOT NULL;

-- Append-only log of every transition ("what happened to shot 7" is one query). No foreign
-- key: the log is written on every hot-path transition and must stay a plain append.
CREATE TABLE unit_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    unit_id     TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    from_status TEXT,
    to_status   TEXT    NOT NULL,
    stage       TEXT    NOT NULL,
    detail      TEXT,
    error       TEXT
);

CREATE INDEX unit_events_task ON unit_events (task_id, id);
