-- Raises a counter to at least ARGV[1]: the write-back of the highest fencing token a quorum
-- returned (or of an acquisition count), so that the next acquisition on any quorum sees it.
--
-- KEYS[1]   the counter
-- ARGV[1]   its new least value
-- ARGV[2]   TTL in milliseconds to give it when raised (absent: none, the counter stays)
local c = redis.call('GET', KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
  if ARGV[2] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
end
return 1
