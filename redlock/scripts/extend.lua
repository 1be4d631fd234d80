-- Extends a lock on one node if every key still holds our value and none was revoked.
--
-- KEYS      lock keys
-- ARGV[1]   lock value
-- ARGV[2]   new TTL in milliseconds
--
-- Returns 1 when extended, 0 when the lock is not ours (anymore) on this node, -1 when it is
-- ours but one of its keys was revoked (revoke.lua): it is not extended.
for i = 1, #KEYS do
  local h = redis.call('HMGET', KEYS[i], 'v', 'x')
  if h[1] ~= ARGV[1] then
    return 0
  end
  if h[2] then
    return -1
  end
end
for i = 1, #KEYS do
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
