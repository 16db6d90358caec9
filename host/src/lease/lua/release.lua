-- Compare-and-delete: give a lease up only if the caller still holds it.
-- KEYS[1] lease. ARGV[1] owner. Returns 1 if released.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
