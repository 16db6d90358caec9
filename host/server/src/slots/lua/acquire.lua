-- Grant slots of one pool atomically (docs/state-machine.md).
-- KEYS[1] holder set, KEYS[2] "reconciled" marker.
-- ARGV[1] max, ARGV[2..] unit ids in fill order.
-- Returns {used_after, {granted ids}}; {-1, {}} when the marker is missing: the set was lost
-- (Redis flushed or restarted) and must be rebuilt from the database before any grant.
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, {}}
end
local max = tonumber(ARGV[1])
local used = redis.call('SCARD', KEYS[1])
local granted = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('SISMEMBER', KEYS[1], id) == 1 then
    granted[#granted + 1] = id
  elseif used < max then
    redis.call('SADD', KEYS[1], id)
    used = used + 1
    granted[#granted + 1] = id
  end
end
return {used, granted}
