-- Raises a fencing counter to at least ARGV[1] (the write-back of the highest token a quorum
-- returned, so that the next acquisition on any quorum sees it).
--
-- KEYS[1]   fencing counter
-- ARGV[1]   token
local c = redis.call('GET', KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1])
end
return 1
