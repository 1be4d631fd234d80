-- Releases one hold of a lock on one node. A lock has an outer hold (its acquisition) and the
-- nested holds taken of it (reenter.lua), each counted on the nodes that took it: the primary
-- key's field 'h'..id per nested hold, and 'n' their number. A nested hold's release removes
-- its own id, or, when its reenter has not reached the node (yet), leaves the field 'r'..id so
-- that the reenter will not count it: the two may arrive in either order. The outer hold's
-- release, while nested holds are counted, records that it came (field 'o', the milliseconds
-- of done marker it asked for). The lock stays while a hold is counted here. The last hold
-- deletes every key that still holds our value — except the primary key when this release or
-- the outer one asked to keep it as a done marker — and publishes the release on
-- KEYS[1]..ARGV[3] if a waiter listening for it was refused here (it marked the primary key,
-- field 'w', see acquire.lua; a PUBLISH would be propagated to the AOF and replicas even with
-- no one listening). A done marker of our value is never deleted by a release.
--
-- The last hold also raises the fencing counter to the lock's token, when the counter is
-- lower: the token was written back to a quorum before the lock was won, but not necessarily
-- to this node, and an acquisition that takes the key here after this release — the next
-- holder — must see it, even when its attempt reached the other nodes of its quorum before
-- the write-back did. A counter that does not exist is not created (see acquire.lua).
--
-- KEYS      lock keys; KEYS[1] is the primary key; then the fencing counter when ARGV[4] is
--           not 0
-- ARGV[1]   lock value
-- ARGV[2]   milliseconds to keep KEYS[1] as a done marker (0: delete it)
-- ARGV[3]   suffix of the channel on which to publish the release: KEYS[1]..ARGV[3]
-- ARGV[4]   the lock's fencing token; 0 for an attempt that failed (no token, no counter)
-- ARGV[5]   the nested hold's id; absent for the outer hold
--
-- Returns the number of keys that were ours.
local keep = tonumber(ARGV[2])
local locks = #KEYS
if ARGV[4] ~= '0' then
  locks = locks - 1
end
local h = redis.call('HMGET', KEYS[1], 'v', 's', 'n', 'o', 'w')
local ours = h[1] == ARGV[1]
local done = ours and h[2] == 'done'
if ours and not done then
  local nested = tonumber(h[3] or '0')
  local hold = ARGV[5]
  if hold then
    if redis.call('HDEL', KEYS[1], 'h' .. hold) == 1 then
      nested = nested - 1
      redis.call('HSET', KEYS[1], 'n', nested)
    else
      redis.call('HSET', KEYS[1], 'r' .. hold, '1')
    end
    local outer = h[4]
    if nested > 0 or not outer then
      return locks
    end
    keep = math.max(keep, tonumber(outer))
  elseif nested > 0 then
    redis.call('HSET', KEYS[1], 'o', ARGV[2])
    return locks
  end
end
local n = 0
for i = 1, locks do
  if (i == 1 and ours) or (i > 1 and redis.call('HGET', KEYS[i], 'v') == ARGV[1]) then
    -- A done marker of ours was released here before (a retried release, or a hold's release
    -- that came after the last): it keeps its expiry.
    if i > 1 or (keep == 0 and not done) then
      redis.call('DEL', KEYS[i])
    elseif not done then
      redis.call('HSET', KEYS[i], 's', 'done')
      redis.call('PEXPIRE', KEYS[i], keep)
    end
    n = n + 1
  end
end
if locks < #KEYS and n > 0 then
  local c = redis.call('GET', KEYS[#KEYS])
  if c and tonumber(c) < tonumber(ARGV[4]) then
    redis.call('SET', KEYS[#KEYS], ARGV[4])
  end
end
if h[5] and n > 0 and keep == 0 and not done then
  redis.call('PUBLISH', KEYS[1] .. ARGV[3], '1')
end
return n
