-- Add the database's record of creates to a create log, atomically, keeping what it holds:
-- a grant another scheduler made since the slot store was lost, whose marker the record may
-- not hold yet, must still count. Entries are named {unit}@{ms} both ways, so a create the
-- log already holds is not counted twice.
-- KEYS[1] the log; ARGV pairs (ms, entry).
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
return #ARGV / 2
