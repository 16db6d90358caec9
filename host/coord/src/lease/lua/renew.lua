-- Compare-and-extend: renew a lease only if the caller still holds it.
-- KEYS[1] lease, KEYS[2] held-until. ARGV[1] owner, ARGV[2] ttl ms. Returns 1 if renewed, 0
-- if lost.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[2], now + tonumber(ARGV[2]))
  return 1
end
return 0
