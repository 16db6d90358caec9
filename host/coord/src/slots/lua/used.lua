-- Slots in use of one pool. KEYS[1] holder set, KEYS[2] "reconciled" marker.
-- Returns -1 when the marker is missing (the set was lost and is not to be trusted).
if redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
return redis.call('SCARD', KEYS[1])
