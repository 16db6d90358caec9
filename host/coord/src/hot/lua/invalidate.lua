-- After a commit that changed these tasks: bump each generation (so a reader holding an older
-- database read cannot store it) and drop the snapshot.
-- KEYS pairs (snapshot, generation); ARGV[1] generation ttl ms.
for i = 1, #KEYS, 2 do
  redis.call('DEL', KEYS[i])
  redis.call('INCR', KEYS[i + 1])
  redis.call('PEXPIRE', KEYS[i + 1], ARGV[1])
end
return #KEYS / 2
