-- Extends a lock on one node if every key still holds our value.
--
-- KEYS      lock keys
-- ARGV[1]   lock value
-- ARGV[2]   new TTL in milliseconds
--
-- Returns 1 when extended, 0 when the lock is not ours (anymore) on this node.
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'v') ~= ARGV[1] then
    return 0
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
