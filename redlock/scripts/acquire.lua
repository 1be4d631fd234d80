-- Takes a lock on one node, atomically: every lock key must be free (or ours), the node must
-- not be in quarantine; then the keys are taken and a fencing token issued.
--
-- KEYS[1]   boot marker of this node (quarantine after memory loss)
-- KEYS[2]   fencing counter
-- KEYS[3..] lock keys; KEYS[3] is the primary key; then the ARGV[6] RefuseWhile keys
-- ARGV[1]   lock value (random, unique per attempt)
-- ARGV[2]   TTL in milliseconds
-- ARGV[3]   quarantine length in milliseconds (0: quarantine off)
-- ARGV[4]   holder label (shown to others, never trusted)
-- ARGV[5]   metadata (e.g. a trace context), shown to others
-- ARGV[6]   how many of the last KEYS are RefuseWhile keys (string keys; 0 if none)
--
-- Returns {0, token} when taken, {1, key index, label, metadata, state, pttl} when a key is
-- held by another value, {2, remaining ms} while the node is in quarantine, {3, index among
-- the RefuseWhile keys, value} while a RefuseWhile key exists.

-- RefuseWhile keys come last; a refusal because one exists comes before everything else.
local last = #KEYS - tonumber(ARGV[6])
for i = last + 1, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    return {3, i - last, v}
  end
end

-- A refusal first: it needs no clock and no marker, and is the common case under contention.
for i = 3, last do
  local h = redis.call('HMGET', KEYS[i], 'v', 'l', 'm', 's')
  if h[1] and h[1] ~= ARGV[1] then
    return {1, i - 2, h[2] or '', h[3] or '', h[4] or '', redis.call('PTTL', KEYS[i])}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local q = tonumber(ARGV[3])
if q > 0 then
  local boot = redis.call('GET', KEYS[1])
  if not boot then
    boot = now + q * 1000
    redis.call('SET', KEYS[1], string.format('%.0f', boot))
  else
    boot = tonumber(boot)
  end
  if now < boot then
    return {2, math.ceil((boot - now) / 1000)}
  end
end

-- A counter that does not exist yet starts at this node's time in microseconds, so a node that
-- lost its memory comes back above every token it issued before.
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('SET', KEYS[2], string.format('%.0f', now))
end
local token = string.format('%.0f', redis.call('INCR', KEYS[2]))

for i = 3, last do
  redis.call('HSET', KEYS[i], 'v', ARGV[1], 'l', ARGV[4], 'm', ARGV[5], 'f', token)
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return {0, token}
