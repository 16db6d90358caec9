-- Take a pool lease if it is free: SET lease owner NX PX ttl, then a fencing token from INCR.
-- KEYS[1] lease, KEYS[2] fence counter, KEYS[3] held-until (ms, Redis clock: until when the
-- pool had a holder), KEYS[4] the pool's total time without a holder (ms).
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] token floor.
-- The floor (the caller's clock in ms times 1000) seeds a counter that a flush removed, so a
-- token issued after a flush is still above every token issued before it.
-- Returns {token, ms the pool went without a holder (-1: never held before)} when taken, or
-- {0, ms until the holder's lease expires} when someone else holds it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[2], ARGV[3], 'NX')
local token = redis.call('INCR', KEYS[2])
local gap = -1
local held_until = tonumber(redis.call('GET', KEYS[3]))
if held_until then
  gap = math.max(0, now - held_until)
  redis.call('INCRBY', KEYS[4], gap)
end
redis.call('SET', KEYS[3], now + tonumber(ARGV[2]))
return {token, gap}
