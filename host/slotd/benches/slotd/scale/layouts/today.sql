-- A unit's life on slotd's own schema (every migration), written as the statements of a tick
-- would write it, in batches: the task and unit inserted (pending), the submit marker, the
-- provider's answer (job id, state), succeeded (the provider's result), finalizing (the
-- lease), completed (the stored result), each move with its event row when `events` is set.
-- `{n}`, `{batch}` and `{events}` are filled in by `layouts.rs`.
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
    INSERT INTO units (id, task_id, idx, tenant, task_type, task_seq, priority, pool, stage,
                       status, spec, state, next_at, created_at, updated_at, planned_release)
        SELECT uid, tid, 0, 'tenant-' || (n % 7), 'kling-video', n, 0, 'kling:video', 'generate',
               'pending', '{"prompt":"shot ' || n || '"}', '{}', now, now, now, rel
        FROM ids WHERE batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, NULL, 'pending', 'generate' FROM ids WHERE batch = bt;
    END IF;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    UPDATE units SET status = 'submitted', submit_attempt = 1, submitted_at = now,
                     account = 'acct-' || (task_seq % 100), updated_at = now + 1
        FROM ids WHERE units.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail)
            SELECT uid, tid, now, 'pending', 'submitted', 'generate', 'submit marked'
            FROM ids WHERE batch = bt;
    END IF;
    UPDATE units SET provider_job_id = '8' || lpad(task_seq::text, 17, '0'),
                     state = '{"task_id":"8' || lpad(task_seq::text, 17, '0') || '"}',
                     next_at = now + 30000, job_release = rel, updated_at = now + 2
        FROM ids WHERE units.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail)
            SELECT uid, tid, now, 'submitted', 'submitted', 'generate',
                   'accepted job 8' || lpad(n::text, 17, '0')
            FROM ids WHERE batch = bt;
    END IF;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    UPDATE units SET status = 'succeeded', next_at = now, updated_at = now + 3,
                     result = '[{"url":"https://cdn.example/' || task_seq || '/video.mp4"}]'
        FROM ids WHERE units.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'submitted', 'succeeded', 'generate' FROM ids WHERE batch = bt;
    END IF;
    UPDATE units SET status = 'finalizing', lease_owner = 'scheduler-1', lease_until = now + 60000,
                     finalize_attempts = 1, updated_at = now + 4
        FROM ids WHERE units.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'succeeded', 'finalizing', 'generate' FROM ids WHERE batch = bt;
    END IF;
    UPDATE units SET status = 'completed', lease_owner = NULL, lease_until = NULL,
                     updated_at = now + 5,
                     result = '[{"key":"artifacts/' || task_id || '/0/video.mp4","sha256":"'
                              || rel || '","size":1234567}]'
        FROM ids WHERE units.id = ids.uid AND batch = bt;
    IF events THEN
        INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage)
            SELECT uid, tid, now, 'finalizing', 'completed', 'generate' FROM ids WHERE batch = bt;
    END IF;
END LOOP;
END
$life$;
