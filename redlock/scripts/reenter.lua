-- Takes a nested hold of a lock on one node: if every key holds our value, the primary key's
-- hold count goes up by one.
--
-- KEYS      lock keys; KEYS[1] is the primary key
-- ARGV[1]   lock value
--
-- Returns {0, token} when nested, {1} when the lock is not ours on this node.
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'v') ~= ARGV[1] then
    return {1}
  end
end
redis.call('HINCRBY', KEYS[1], 'n', 1)
return {0, redis.call('HGET', KEYS[1], 'f')}
