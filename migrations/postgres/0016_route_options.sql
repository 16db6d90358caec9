-- Routes (docs/routes.md): a routed unit's options, one per target of its route (what each
-- target's handler planned for the shot, or why it refused it), and the option it is bound
-- to, as JSON. NULL: a unit of a handler's own task type. While a routed unit waits, its
-- `pool` is its route's (`route:NAME`), so the fill index serves it unchanged. The SQLite twin
-- is migrations/sqlite/0015_route_options.sql.
ALTER TABLE units ADD COLUMN routing TEXT;
