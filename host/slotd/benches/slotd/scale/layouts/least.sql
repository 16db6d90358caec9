-- The least a row per unit can cost on PostgreSQL: an integer id, a one-byte status, a few
-- narrow columns, the primary key and one scheduling index; no task row and no events. Every
-- move is still a new row version with its index entries (status and due time are indexed),
-- which is the floor any layout that keeps a row per unit pays. Same moves as `today.sql`.
CREATE TABLE unit_least (
    id BIGINT PRIMARY KEY, pool INTEGER NOT NULL, status "char" NOT NULL,
    next_at BIGINT NOT NULL, job BIGINT, attempts SMALLINT NOT NULL DEFAULT 0, lease_until BIGINT
) WITH (fillfactor = 50);
CREATE INDEX unit_least_live ON unit_least (pool, status, next_at)
    WHERE status IN ('p', 's', 'S', 'f');
-- life
DO $life$
DECLARE
    bt int;
    now bigint := 1700000000000;
BEGIN
CREATE TEMP TABLE ids ON COMMIT DROP AS
    SELECT g AS n, (g - 1) / {batch} AS batch FROM generate_series(1, {n}) g;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    INSERT INTO unit_least (id, pool, status, next_at)
        SELECT n, 1, 'p', now FROM ids WHERE batch = bt;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    UPDATE unit_least SET status = 's', attempts = 1
        FROM ids WHERE unit_least.id = ids.n AND batch = bt;
    UPDATE unit_least SET job = n, next_at = now + 30000
        FROM ids WHERE unit_least.id = ids.n AND batch = bt;
END LOOP;
FOR bt IN SELECT DISTINCT batch FROM ids ORDER BY 1 LOOP
    UPDATE unit_least SET status = 'S', next_at = now
        FROM ids WHERE unit_least.id = ids.n AND batch = bt;
    UPDATE unit_least SET status = 'f', lease_until = now + 60000
        FROM ids WHERE unit_least.id = ids.n AND batch = bt;
    UPDATE unit_least SET status = 'c', lease_until = NULL
        FROM ids WHERE unit_least.id = ids.n AND batch = bt;
END LOOP;
END
$life$;
