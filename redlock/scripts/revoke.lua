-- Revokes a holder's lock on one node: marks the key (field 'x') so that the holder's next
-- extension here is refused (extend.lua). The key is not deleted: the holder keeps the lock
-- until it releases it or it expires. A done marker is not revoked.
--
-- KEYS[1]   the lock key found held (the primary key or an Also key)
-- ARGV[1]   the holder's lock value
-- ARGV[2]   a channel to publish ARGV[3] on when the key was marked; empty for none
-- ARGV[3]   the message
--
-- Returns 1 when the key was marked (now or before), 0 when the holder does not hold it here.
local h = redis.call('HMGET', KEYS[1], 'v', 's', 'x')
if h[1] ~= ARGV[1] or h[2] == 'done' then
  return 0
end
if not h[3] then
  redis.call('HSET', KEYS[1], 'x', '1')
end
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
