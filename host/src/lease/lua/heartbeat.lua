-- Announce a live scheduler instance and count the live ones, on Redis' own clock.
-- KEYS[1] the instance sorted set (member owner, score expiry ms). ARGV[1] owner, ARGV[2] ttl ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return redis.call('ZCARD', KEYS[1])
