-- Take a pool lease if it is free: SET lease owner NX PX ttl, then a fencing token from INCR.
-- KEYS[1] lease, KEYS[2] fence counter. ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] token floor.
-- The floor (the caller's clock in ms times 1000) seeds a counter that a flush removed, so a
-- token issued after a flush is still above every token issued before it.
-- Returns the token, or 0 when someone else holds the lease.
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('SET', KEYS[2], ARGV[3], 'NX')
return redis.call('INCR', KEYS[2])
