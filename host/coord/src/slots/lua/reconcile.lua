-- Make a pool's holder set equal to the database's submitted units, atomically, and mark the
-- set as reconciled. KEYS[1] holder set, KEYS[2] marker, KEYS[3] counts hash (field KEYS[1]:
-- the set's size, written here afresh), KEYS[4] the pool lease's fencing counter.
-- ARGV[1] the rebuilder's lease token ('' when it holds none), ARGV[2] '1' to rebuild only a
-- set still lost, ARGV[3..] the submitted unit ids.
-- Returns {status, {freed ids}, {restored ids}, fencing counter}, status one of 'rebuilt',
-- 'fenced' (a newer lease token was drawn: its holder may have granted since the ids were
-- read, so nothing is changed) or 'kept' (the set was rebuilt already).
local current = tonumber(redis.call('GET', KEYS[4]) or '0') or 0
if ARGV[1] ~= '' and current > tonumber(ARGV[1]) then
  return {'fenced', {}, {}, current}
end
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[2]) == 1 then
  return {'kept', {}, {}, current}
end
local want = {}
for i = 3, #ARGV do
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
for i = 3, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then
    restored[#restored + 1] = ARGV[i]
  end
end
redis.call('SET', KEYS[2], '1')
redis.call('HSET', KEYS[3], KEYS[1], redis.call('SCARD', KEYS[1]))
return {'rebuilt', freed, restored, current}
