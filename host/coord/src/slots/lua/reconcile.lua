-- Make a pool's holder set equal to the database's submitted units, atomically, and mark the
-- set as reconciled. KEYS[1] holder set, KEYS[2] marker, KEYS[3] counts hash (field KEYS[1]:
-- the set's size, written here afresh); ARGV the submitted unit ids.
-- Returns {{freed ids}, {restored ids}}.
local want = {}
for i = 1, #ARGV do
  want[ARGV[i]] = true
end
local freed = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if not want[id] then
    freed[#freed + 1] = id
    redis.call('SREM', KEYS[1], id)
  end
end
local restored = {}
for i = 1, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then
    restored[#restored + 1] = ARGV[i]
  end
end
redis.call('SET', KEYS[2], '1')
redis.call('HSET', KEYS[3], KEYS[1], redis.call('SCARD', KEYS[1]))
return {freed, restored}
