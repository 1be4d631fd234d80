-- Takes a nested hold of a lock on one node: if every key holds our value and the lock was not
-- released here, the hold's id joins the primary key's holds (field 'h'..id) and the number of
-- nested holds counted here (field 'n') goes up by one. The hold's release may reach the node
-- first (the two travel on different connections): it leaves the field 'r'..id, and the hold is
-- then not counted (see release.lua).
--
-- KEYS      lock keys; KEYS[1] is the primary key
-- ARGV[1]   lock value
-- ARGV[2]   the nested hold's id, unique among the lock's holds
--
-- Returns {0, token} when the hold is counted, {1} when the lock is not ours on this node (or
-- the hold was released already).
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'v') ~= ARGV[1] then
    return {1}
  end
end
if redis.call('HGET', KEYS[1], 's') == 'done' or redis.call('HEXISTS', KEYS[1], 'r' .. ARGV[2]) == 1 then
  return {1}
end
if redis.call('HSETNX', KEYS[1], 'h' .. ARGV[2], '1') == 1 then
  redis.call('HINCRBY', KEYS[1], 'n', 1)
end
return {0, redis.call('HGET', KEYS[1], 'f')}
