-- slotd schema, PostgreSQL dialect (the SQLite twin is migrations/sqlite/0001_init.sql; keep
-- the two in step). Times are Unix milliseconds chosen by the caller (injected clock).

-- A client's submission. `seq` is monotonically increasing: FIFO for the fill order and the
-- list cursor.
CREATE TABLE tasks (
    seq             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id              TEXT    NOT NULL UNIQUE,
    tenant          TEXT    NOT NULL,
    type            TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    idempotency_key TEXT,
    priority        INTEGER NOT NULL DEFAULT 0,
    callback_url    TEXT,
    created_at      BIGINT  NOT NULL,
    updated_at      BIGINT  NOT NULL,
    -- NULL keys never collide, so tasks without a key are unconstrained.
    UNIQUE (tenant, idempotency_key)
);

CREATE INDEX tasks_tenant_seq ON tasks (tenant, seq);
CREATE INDEX tasks_tenant_type_seq ON tasks (tenant, type, seq);

-- The schedulable pieces of a task: every field of `model::Unit`, the finalization lease,
-- and the task's tenant, type, priority and seq copied so fill order is one indexed query.
CREATE TABLE units (
    id                TEXT    PRIMARY KEY,
    task_id           TEXT    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    idx               INTEGER NOT NULL,
    tenant            TEXT    NOT NULL,
    task_type         TEXT    NOT NULL,
    task_seq          BIGINT  NOT NULL,
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
    next_at           BIGINT  NOT NULL,
    submitted_at      BIGINT,
    error             TEXT,
    result            TEXT,
    cost              TEXT,
    -- Finalization lease: who is storing the artifacts, and until when.
    lease_owner       TEXT,
    lease_until       BIGINT,
    finalize_attempts INTEGER NOT NULL DEFAULT 0,
    created_at        BIGINT  NOT NULL,
    updated_at        BIGINT  NOT NULL,
    UNIQUE (task_id, idx)
);

-- Fill order: (pool, status) equality, then rows in window partition/order.
CREATE INDEX units_fill ON units (pool, status, priority, tenant, task_seq, idx, task_type, next_at);
-- Due polls, submitted ids per pool, counts per pool.
CREATE INDEX units_pool_status_next ON units (pool, status, next_at);
-- Finalization claims across pools.
CREATE INDEX units_status_next ON units (status, next_at);
-- Provider webhooks name the job.
CREATE INDEX units_provider_job ON units (provider_job_id) WHERE provider_job_id IS NOT NULL;

-- Append-only log of every transition. No foreign key: it is a plain append on the hot path.
CREATE TABLE unit_events (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    unit_id     TEXT    NOT NULL,
    task_id     TEXT    NOT NULL,
    at          BIGINT  NOT NULL,
    from_status TEXT,
    to_status   TEXT    NOT NULL,
    stage       TEXT    NOT NULL,
    detail      TEXT,
    error       TEXT
);

CREATE INDEX unit_events_task ON unit_events (task_id, id);
