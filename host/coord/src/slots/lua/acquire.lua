-- Grant slots of one pool atomically (docs/state-machine.md), each new slot only when every
-- quota window of every create log given has room (the pool's, an account's), counted in each
-- log in the same step (docs/accounts-deadlines-budgets.md "Quotas").
-- KEYS[1] holder set, KEYS[2] "reconciled" marker, KEYS[3..] create logs (sorted sets of
-- "{unit id}@{ms}" scored by ms), the last KEYS the counts hash (field KEYS[1]: the set's size,
-- what a tick reads for every account in one HMGET).
-- ARGV[1] max, ARGV[2] now (ms), ARGV[3] number of logs L, then per log: keep-since (ms),
-- number of checks n, n pairs (limit, since); then the unit ids in fill order.
-- Returns {used_after, {granted ids}}; {-1, {}} when the marker is missing: the set was lost
-- (Redis flushed or restarted) and must be rebuilt from the database before any grant.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, {}}
end
local max = tonumber(ARGV[1])
local now = ARGV[2]
local nlogs = tonumber(ARGV[3])
local limits, counts = {}, {}
local a = 4
for l = 1, nlogs do
  local key = KEYS[2 + l]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. ARGV[a])
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  limits[l], counts[l] = {}, {}
  for c = 1, n do
    limits[l][c] = tonumber(ARGV[a])
    counts[l][c] = redis.call('ZCOUNT', key, ARGV[a + 1], '+inf')
    a = a + 2
  end
end
local used = redis.call('SCARD', KEYS[1])
local granted = {}
for i = a, #ARGV do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[1], id) == 1 then
    granted[#granted + 1] = id
  elseif used < max then
    local room = true
    for l = 1, nlogs do
      for c = 1, #limits[l] do
        if counts[l][c] >= limits[l][c] then
          room = false
        end
      end
    end
    if room then
      redis.call('SADD', KEYS[1], id)
      used = used + 1
      granted[#granted + 1] = id
      for l = 1, nlogs do
        redis.call('ZADD', KEYS[2 + l], now, id .. '@' .. now)
        for c = 1, #counts[l] do
          counts[l][c] = counts[l][c] + 1
        end
      end
    end
  end
end
redis.call('HSET', KEYS[#KEYS], KEYS[1], used)
return {used, granted}
