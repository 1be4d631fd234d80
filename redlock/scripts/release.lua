-- Releases one hold of a lock on one node. While nested holds remain (the primary key's hold
-- count is above 0), the count goes down by one and the lock stays. The last hold deletes
-- every key that still holds our value — except the primary key when ARGV[2] asks to keep it
-- as a done marker — and publishes the release on KEYS[1]..ARGV[3] if anyone subscribed to it on this
-- node (a PUBLISH would be propagated to the AOF and replicas even with no one listening).
--
-- KEYS      lock keys; KEYS[1] is the primary key
-- ARGV[1]   lock value
-- ARGV[2]   milliseconds to keep KEYS[1] as a done marker (0: delete it)
-- ARGV[3]   suffix of the channel on which to publish the release: KEYS[1]..ARGV[3]
--
-- Returns the number of keys that were ours.
if redis.call('HGET', KEYS[1], 'v') == ARGV[1] then
  local nested = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
  if nested > 0 then
    redis.call('HINCRBY', KEYS[1], 'n', -1)
    return #KEYS
  end
end
local n = 0
local keep = tonumber(ARGV[2])
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'v') == ARGV[1] then
    if i == 1 and keep > 0 then
      -- A retried release (its first try timed out after it ran) keeps the marker's expiry.
      if redis.call('HGET', KEYS[i], 's') ~= 'done' then
        redis.call('HSET', KEYS[i], 's', 'done')
        redis.call('PEXPIRE', KEYS[i], keep)
      end
    else
      redis.call('DEL', KEYS[i])
    end
    n = n + 1
  end
end
local channel = KEYS[1] .. ARGV[3]
if n > 0 and keep == 0 and redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
  redis.call('PUBLISH', channel, '1')
end
return n
