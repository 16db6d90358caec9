-- Release slots of one pool. KEYS[1] holder set, KEYS[2] counts hash (field KEYS[1]: the set's
-- size, kept beside it); ARGV unit ids. Returns the slots still used.
for i = 1, #ARGV do
  redis.call('SREM', KEYS[1], ARGV[i])
end
local used = redis.call('SCARD', KEYS[1])
redis.call('HSET', KEYS[2], KEYS[1], used)
return used
