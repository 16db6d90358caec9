-- Compare-and-delete: give a lease up only if the caller still holds it.
-- KEYS[1] lease, KEYS[2] held-until. ARGV[1] owner. Returns 1 if released.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('SET', KEYS[2], now)
  return redis.call('DEL', KEYS[1])
end
return 0
