-- Replace a create log with the database's record of creates, atomically.
-- KEYS[1] the log; ARGV pairs (ms, entry).
redis.call('DEL', KEYS[1])
for i = 1, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
return #ARGV / 2
