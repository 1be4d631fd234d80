-- Raises a counter to at least ARGV[1]: the write-back of the highest fencing token a quorum
-- returned (or of an acquisition count), so that the next acquisition on any quorum sees it.
--
-- A fencing counter is not written on a node without a boot marker or still in quarantine:
-- acquire.lua takes a counter that exists as the sign that the node ended its quarantine.
--
-- KEYS[1]   the counter
-- KEYS[2]   the boot marker of the counter's node (or slot), for a fencing counter while
--           quarantine is on; absent otherwise
-- ARGV[1]   the counter's new least value
-- ARGV[2]   TTL in milliseconds to give it when raised (0: none, the counter stays)
--
-- Returns 1 when the counter holds at least ARGV[1], 0 when the node is in quarantine.
if KEYS[2] then
  local booted = tonumber(redis.call('GET', KEYS[2]) or '-1')
  if booted < 0 then
    return 0
  end
  if booted > 0 then
    local t = redis.call('TIME')
    if tonumber(t[1]) * 1000000 + tonumber(t[2]) < booted then
      return 0
    end
  end
end
local c = redis.call('GET', KEYS[1])
if not c or tonumber(c) < tonumber(ARGV[1]) then
  if ARGV[2] ~= '0' then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1])
  end
end
return 1
