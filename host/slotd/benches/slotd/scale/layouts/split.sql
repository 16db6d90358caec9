-- The columns a move changes apart from the rest (docs/scale.md, the WAL floor): a narrow row
-- (status, due time, job, counters, lease, and the fill order's columns) carrying the
-- scheduling indexes and the state machine's trigger, and a wide row (spec, routing, release,
-- result) with the primary key and `(task_id, idx)`, written at creation and completion. The
-- tasks and the event log are slotd's own. Same life as `today.sql`.
CREATE TABLE unit_cold (
    id TEXT PRIMARY KEY, task_id TEXT NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, tenant TEXT NOT NULL, task_type TEXT NOT NULL, task_seq BIGINT NOT NULL,
    priority INTEGER NOT NULL, stage TEXT NOT NULL, spec TEXT NOT NULL, routes TEXT, routing TEXT,
    planned_release TEXT, result TEXT, cost TEXT, error TEXT, created_at BIGINT NOT NULL,
    UNIQUE (task_id, idx)
) WITH (fillfactor = 80);
CREATE TABLE unit_hot (
    id TEXT PRIMARY KEY, pool TEXT NOT NULL, status TEXT NOT NULL, next_at BIGINT NOT NULL,
    priority INTEGER NOT NULL, tenant TEXT NOT NULL,
    deadline_at BIGINT NOT NULL DEFAULT 9223372036854775807, task_seq BIGINT NOT NULL,
    idx INTEGER NOT NULL, task_type TEXT NOT NULL, provider_job_id TEXT, state TEXT,
    submit_attempt INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
    polls INTEGER NOT NULL DEFAULT 0, submitted_at BIGINT, lease_owner TEXT, lease_until BIGINT,
    finalize_attempts INTEGER NOT NULL DEFAULT 0, account TEXT, job_release TEXT,
    updated_at BIGINT NOT NULL
) WITH (fillfactor = 70);
CREATE INDEX unit_hot_fill ON unit_hot
    (pool, status, priority, tenant, deadline_at, task_seq, idx, task_type, next_at)
    WHERE status = 'pending';
CREATE INDEX unit_hot_live ON unit_hot (pool, status, next_at)
    WHERE status IN ('pending', 'submitted', 'succeeded', 'finalizing');
CREATE INDEX unit_hot_finalize ON unit_hot (status, next_at)
    WHERE status IN ('succeeded', 'finalizing');
CREATE INDEX unit_hot_job ON unit_hot (provider_job_id)
    WHERE status = 'submitted' AND provider_job_id IS NOT NULL;
CREATE TRIGGER unit_hot_legal_move BEFORE UPDATE OF status ON unit_hot FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION units_legal_move();
-- life
DO $life$
DECLARE
    bt int;
    now bigint := 1700000000000;
    events boolean := {events};
    rel text := 'aaaaaaaabbbbbbbbccccccccddddddddeeeeeeeeffffffff0000000011111111';
BEGIN
CREATE TEMP TABLE ids ON COMMIT DROP AS
    SELECT g AS n, gen_random_uuid()::text AS tid, gen_random_uuid()::text AS uid,
           (g - 1) / {batch} AS batch
    FROM generate_series(1, {n}) g;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    INSERT INTO tasks (id, tenant, type, payload, priority, created_at, updated_at)
        SELECT tid, 'tenant-' || (n % 7), 'kling-video', '{"prompt":"shot ' || n || '"}', 0, now, now
        FROM ids WHERE batch = bt;
    INSERT INTO unit_cold (id, task_id, idx, tenant, task_type, task_seq, priority, stage, spec,
                           planned_release, created_at)
        SELECT uid, tid, 0, 'tenant-' || (n % 7), 'kling-video', n, 0, 'generate',
               '{"prompt":"shot ' || n || '"}', rel, now
        FROM ids WHERE batch = bt;
    INSERT INTO unit_hot (id, pool, status, next_at, priority, tenant, task_seq, idx, task_type,
                          state, updated_at)
        SELECT uid, 'kling:video', 'pending', now, 0, 'tenant-' || (n % 7), n, 0, 'kling-video',
               '{}', now
        FROM ids WHERE batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, NULL, 'pending', 'generate' FROM ids WHERE batch = bt;
    END IF;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    UPDATE unit_hot SET status = 'submitted', submit_attempt = 1, submitted_at = now,
                        account = 'acct-' || (task_seq % 100), updated_at = now + 1
        FROM ids WHERE unit_hot.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail)
            SELECT uid, tid, now, 'pending', 'submitted', 'generate', 'submit marked'
            FROM ids WHERE batch = bt;
    END IF;
    UPDATE unit_hot SET provider_job_id = '8' || lpad(task_seq::text, 17, '0'),
                        state = '{"task_id":"8' || lpad(task_seq::text, 17, '0') || '"}',
                        next_at = now + 30000, job_release = rel, updated_at = now + 2
        FROM ids WHERE unit_hot.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail)
            SELECT uid, tid, now, 'submitted', 'submitted', 'generate',
                   'accepted job 8' || lpad(n::text, 17, '0')
            FROM ids WHERE batch = bt;
    END IF;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    -- The provider's result is the finalizer's input: in the narrow row's state until stored.
    UPDATE unit_hot SET status = 'succeeded', next_at = now, updated_at = now + 3,
                        state = '[{"url":"https://cdn.example/' || task_seq || '/video.mp4"}]'
        FROM ids WHERE unit_hot.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'submitted', 'succeeded', 'generate' FROM ids WHERE batch = bt;
    END IF;
    UPDATE unit_hot SET status = 'finalizing', lease_owner = 'scheduler-1',
                        lease_until = now + 60000, finalize_attempts = 1, updated_at = now + 4
        FROM ids WHERE unit_hot.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'succeeded', 'finalizing', 'generate' FROM ids WHERE batch = bt;
    END IF;
    UPDATE unit_hot SET status = 'completed', lease_owner = NULL, lease_until = NULL,
                        updated_at = now + 5
        FROM ids WHERE unit_hot.id = ids.uid AND batch = bt;
    UPDATE unit_cold SET result = '[{"key":"artifacts/' || task_id || '/0/video.mp4","sha256":"'
                                  || rel || '","size":1234567}]'
        FROM ids WHERE unit_cold.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'finalizing', 'completed', 'generate' FROM ids WHERE batch = bt;
    END IF;
END LOOP;
END
$life$;
