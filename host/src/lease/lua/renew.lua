-- Compare-and-extend: renew a lease only if the caller still holds it.
-- KEYS[1] lease. ARGV[1] owner, ARGV[2] ttl ms. Returns 1 if renewed, 0 if lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
