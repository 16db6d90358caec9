-- Read a task's snapshot and its generation together.
-- KEYS[1] snapshot hash {tenant, body}, KEYS[2] generation counter.
-- Returns {generation or "", tenant or false, body or false}.
local gen = redis.call('GET', KEYS[2]) or ''
local snap = redis.call('HMGET', KEYS[1], 'tenant', 'body')
return {gen, snap[1], snap[2]}
