-- Grant slots of one pool atomically (docs/state-machine.md), each new slot only when every
-- quota window of the pool's create log has room, counted in the log in the same step
-- (docs/accounts-deadlines-budgets.md "Quotas").
-- KEYS[1] holder set, KEYS[2] "reconciled" marker, KEYS[3] create log (a sorted set of
-- "{unit id}@{ms}" scored by ms; untouched when there are no checks).
-- ARGV[1] max, ARGV[2] number of checks n, ARGV[3] keep-since (ms), ARGV[4] now (ms), then n
-- pairs (limit, since), then the unit ids in fill order.
-- Returns {used_after, {granted ids}}; {-1, {}} when the marker is missing: the set was lost
-- (Redis flushed or restarted) and must be rebuilt from the database before any grant.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, {}}
end
local max = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local now = ARGV[4]
local limits, counts = {}, {}
if n > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[3])
  for c = 1, n do
    limits[c] = tonumber(ARGV[3 + 2 * c])
    counts[c] = redis.call('ZCOUNT', KEYS[3], ARGV[4 + 2 * c], '+inf')
  end
end
local used = redis.call('SCARD', KEYS[1])
local granted = {}
for i = 5 + 2 * n, #ARGV do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[1], id) == 1 then
    granted[#granted + 1] = id
  elseif used < max then
    local room = true
    for c = 1, n do
      if counts[c] >= limits[c] then
        room = false
      end
    end
    if room then
      redis.call('SADD', KEYS[1], id)
      used = used + 1
      granted[#granted + 1] = id
      if n > 0 then
        redis.call('ZADD', KEYS[3], now, id .. '@' .. now)
        for c = 1, n do
          counts[c] = counts[c] + 1
        end
      end
    end
  end
end
return {used, granted}
