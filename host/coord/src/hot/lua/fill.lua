-- Store a snapshot read from the database, unless the task changed since the reader looked at
-- its generation (then the snapshot may be older than the database: drop it).
-- KEYS[1] snapshot, KEYS[2] generation. ARGV[1] generation seen ("" = none), ARGV[2] tenant,
-- ARGV[3] body, ARGV[4] ttl ms. Returns 1 if stored.
local gen = redis.call('GET', KEYS[2]) or ''
if gen ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'tenant', ARGV[2], 'body', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
