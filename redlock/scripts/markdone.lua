-- Marks a lock done on one node after its work completed, unless another holder took it: the
-- primary key becomes (or stays) our done marker when it is absent (it expired) or ours, and
-- is left alone and reported when it holds another value. The other keys are released where
-- they are ours.
--
-- KEYS      lock keys; KEYS[1] is the primary key
-- ARGV[1]   lock value
-- ARGV[2]   milliseconds to keep KEYS[1] as a done marker
-- ARGV[3]   holder label
--
-- Returns {0} when KEYS[1] is our done marker, {1, label, metadata, state, token, pttl} when
-- another value holds it (token: this node's fencing counter when that holder took it).
for i = 2, #KEYS do
  if redis.call('HGET', KEYS[i], 'v') == ARGV[1] then
    redis.call('DEL', KEYS[i])
  end
end
local h = redis.call('HMGET', KEYS[1], 'v', 'l', 'm', 's', 'f')
if h[1] and h[1] ~= ARGV[1] then
  return {1, h[2] or '', h[3] or '', h[4] or '', h[5] or '0', redis.call('PTTL', KEYS[1])}
end
if not h[1] then
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'l', ARGV[3], 's', 'done')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif h[4] ~= 'done' then
  -- A retried mark (its first try timed out after it ran) keeps the marker's expiry.
  redis.call('HSET', KEYS[1], 's', 'done')
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {0}
