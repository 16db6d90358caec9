-- Release slots of one pool. KEYS[1] holder set; ARGV unit ids. Returns the slots still used.
for i = 1, #ARGV do
  redis.call('SREM', KEYS[1], ARGV[i])
end
return redis.call('SCARD', KEYS[1])
