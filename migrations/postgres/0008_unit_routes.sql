-- Contract 1.1 routing: the pool a unit uses in some of its stages, chosen by the handler's
-- `plan-routed`, as a JSON object {"stage": "pool"}. NULL: every stage uses its default pool.
ALTER TABLE units ADD COLUMN routes TEXT;
