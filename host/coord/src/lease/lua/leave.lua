-- A scheduler instance leaving: KEYS[1] the instance set, ARGV[1] owner.
return redis.call('ZREM', KEYS[1], ARGV[1])
