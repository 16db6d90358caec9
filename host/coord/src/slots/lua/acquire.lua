-- Grant slots of one pool atomically (docs/state-machine.md), each new slot only when every
-- quota window of every create log given has room (the pool's, an account's), counted in each
-- log in the same step (docs/accounts-deadlines-budgets.md "Quotas"), and, for a slot set on a
-- shared provider account, only when the account's rule allows it ("One account, many pools":
-- the set within its max, the account within its limit, the other waiting members' unmet
-- minimums left free; the same rule as `SharedAccount::room`).
-- KEYS[1] holder set (of submissions, "{unit id}@{submitted_at}"), KEYS[2] "reconciled"
-- marker, KEYS[3..] create logs (sorted sets of "{unit id}@{ms}" scored by ms); then, on a shared account of M members, each member's holder
-- set and marker (2M keys) and the account's waiting hash (member set key -> until ms); the
-- last KEYS the counts hash (field KEYS[1]: the set's size, what a tick reads for every
-- account in one HMGET).
-- ARGV[1] max, ARGV[2] now (ms), ARGV[3] number of logs L, then per log: keep-since (ms),
-- number of checks n, n pairs (limit, since); then M (0: no shared account) and, when M > 0,
-- the account's limit, this set's member index (1-based) and per member (min, max); then the
-- holder names in fill order.
-- Returns {used_after, {granted ids}, 0}; {-1, {}, i} when a marker is missing: that set was lost
-- (Redis flushed or restarted) and must be rebuilt from the database before any grant; the
-- lost set's 1-based member index is i (0 for this set itself).
if redis.call('EXISTS', KEYS[2]) == 0 then
  return {-1, {}, 0}
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
-- The shared account: members' use, minimums owed to the other waiting members.
local members = tonumber(ARGV[a])
a = a + 1
local shared_limit, this, total, owed, this_max = 0, 0, 0, 0, 0
if members > 0 then
  shared_limit = tonumber(ARGV[a])
  this = tonumber(ARGV[a + 1])
  a = a + 2
  local waiting_key = KEYS[2 + nlogs + 2 * members + 1]
  for m = 1, members do
    local set_key = KEYS[2 + nlogs + 2 * m - 1]
    if redis.call('EXISTS', KEYS[2 + nlogs + 2 * m]) == 0 then
      return {-1, {}, m}
    end
    local min_m = tonumber(ARGV[a])
    local max_m = tonumber(ARGV[a + 1])
    a = a + 2
    local used_m = redis.call('SCARD', set_key)
    total = total + used_m
    if m == this then
      this_max = max_m
    else
      local until_ms = tonumber(redis.call('HGET', waiting_key, set_key) or '-1')
      if until_ms >= tonumber(now) and min_m > used_m then
        owed = owed + (min_m - used_m)
      end
    end
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
    if members > 0 and (used >= this_max or total + 1 + owed > shared_limit) then
      room = false
    end
    if room then
      redis.call('SADD', KEYS[1], id)
      used = used + 1
      total = total + 1
      granted[#granted + 1] = id
      for l = 1, nlogs do
        -- Counted under the unit's name (a holder names its submission: "{unit}@{ms}").
        redis.call('ZADD', KEYS[2 + l], now, (string.match(id, '^(.*)@[^@]*$') or id) .. '@' .. now)
        for c = 1, #counts[l] do
          counts[l][c] = counts[l][c] + 1
        end
      end
    end
  end
end
redis.call('HSET', KEYS[#KEYS], KEYS[1], used)
return {used, granted, 0}
