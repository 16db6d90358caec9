-- Completion webhooks (issue 13): a durable outbox. A task with a `callback_url` keeps
-- `webhook_done = 0` until its end has been queued as a delivery (in the same transaction that
-- sets it to 1), so a crash between the task's end and the queueing only delays the delivery
-- to the next sweep. Tasks that existed before this migration count as done: no webhook is
-- sent for history. The delivery's id is the `webhook-id` receivers deduplicate on: stable
-- across attempts. The SQLite twin is migrations/sqlite/0011_webhooks.sql.
ALTER TABLE tasks ADD COLUMN webhook_done INTEGER NOT NULL DEFAULT 0;
UPDATE tasks SET webhook_done = 1;
CREATE INDEX tasks_webhook_open ON tasks (seq)
    WHERE callback_url IS NOT NULL AND webhook_done = 0;

CREATE TABLE webhook_deliveries (
    id           TEXT    PRIMARY KEY,
    task_id      TEXT    NOT NULL,
    tenant       TEXT    NOT NULL,
    url          TEXT    NOT NULL,
    event        TEXT    NOT NULL,
    payload      TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    attempts     INTEGER NOT NULL DEFAULT 0,
    next_at      BIGINT  NOT NULL,
    lease_owner  TEXT,
    lease_until  BIGINT,
    last_status  INTEGER,
    last_error   TEXT,
    created_at   BIGINT  NOT NULL,
    delivered_at BIGINT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_task ON webhook_deliveries (task_id);

CREATE TABLE webhook_attempts (
    id          BIGSERIAL PRIMARY KEY,
    delivery_id TEXT    NOT NULL,
    at          BIGINT  NOT NULL,
    status      INTEGER,
    error       TEXT,
    duration_ms BIGINT  NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
