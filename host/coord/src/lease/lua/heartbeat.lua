-- Announce a live scheduler instance and count the live ones, on Redis' own clock.
-- KEYS[1] the instance sorted set (member owner, score expiry ms). ARGV[1] owner, ARGV[2] ttl ms.
-- Returns {live instances, ms until the soonest other instance's announcement runs out (-1:
-- no other)}: a dead instance drops out then, and its pools are free to take.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
local soonest = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
for i = 1, #first, 2 do
  if first[i] ~= ARGV[1] then
    soonest = tonumber(first[i + 1]) - now
    break
  end
end
return {redis.call('ZCARD', KEYS[1]), soonest}
