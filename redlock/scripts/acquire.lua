-- Takes a lock on one node, atomically: every lock key must be free (or ours), the node must
-- not be in quarantine; then the keys are taken and a fencing token issued.
--
-- KEYS[1]   boot marker (quarantine after memory loss): the node's, or on a Redis Cluster the
--           one of the lock's slot; absent when ARGV[3] is 0, and the keys below move up by one
-- KEYS[2]   fencing counter
-- KEYS[3..] lock keys; KEYS[3] is the primary key; then the ARGV[6] RefuseWhile keys; then,
--           when ARGV[7] is 1, the acquisition counter (CountAcquisitions)
-- ARGV[1]   lock value (random, unique per attempt)
-- ARGV[2]   TTL in milliseconds
-- ARGV[3]   quarantine length in milliseconds (0: quarantine off, and no boot marker is given)
-- ARGV[4]   holder label (shown to others, never trusted)
-- ARGV[5]   metadata (e.g. a trace context), shown to others
-- ARGV[6]   how many KEYS before the counter are RefuseWhile keys (string keys; 0 if none)
-- ARGV[7]   1 when the last key is an acquisition counter (absent or 0: none)
-- ARGV[8]   1 when the caller listens for the lock's release (WakeOnRelease, subscribed): a
--           refusal by the primary key then marks it (field 'w'), and its release publishes
--           (see release.lua); absent or 0: no mark
--
-- Returns {0, token, count} when taken (count: the acquisition counter's value, 0 without one), {1, key index, label, metadata, state, pttl, value} when a key is
-- held by another value, {2, remaining ms} while the node is in quarantine, {3, index among
-- the RefuseWhile keys, value} while a RefuseWhile key exists.

local q = tonumber(ARGV[3])
local boot = 0 -- the index of the boot marker, if given
if q > 0 then
  boot = 1
end
local fence, first = boot + 1, boot + 2 -- the fencing counter, the primary key

-- RefuseWhile keys come last (before the counter); a refusal because one exists comes before
-- everything else.
local counter, refusing = 0, #KEYS -- the acquisition counter's index (if given), the last RefuseWhile key's
if ARGV[7] == '1' then
  counter, refusing = #KEYS, #KEYS - 1
end
local last = refusing - tonumber(ARGV[6])
for i = last + 1, refusing do
  local v = redis.call('GET', KEYS[i])
  if v then
    return {3, i - last, v}
  end
end

-- A refusal first: it needs no clock and no marker, and is the common case under contention.
for i = first, last do
  local h = redis.call('HMGET', KEYS[i], 'v', 'l', 'm', 's')
  if h[1] and h[1] ~= ARGV[1] then
    if i == first and ARGV[8] == '1' then
      redis.call('HSET', KEYS[i], 'w', '1')
    end
    return {1, i - first + 1, h[2] or '', h[3] or '', h[4] or '', redis.call('PTTL', KEYS[i]), h[1]}
  end
end

-- This node's time in microseconds, read only where a rule needs it: a fencing counter to
-- create, a boot marker to create or to compare with (one of 0, quarantine ended, needs none).
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end

-- INCR answers 1 only where the counter did not exist (a counter starts above 0 and only
-- grows). A new counter starts at this node's time in microseconds instead, so a node that
-- lost its memory comes back above every token it issued before.
--
-- Only a new counter needs the boot marker: a node loses its counters and its marker together,
-- and a counter is created only here, past the quarantine, or by fence.lua, which writes none
-- on a node in quarantine or without a marker. A counter that exists therefore shows that
-- this node ended its quarantine since it last lost its memory.
local token = redis.call('INCR', KEYS[fence])
if token == 1 then
  if q > 0 then
    local booted = redis.call('GET', KEYS[boot])
    if not booted then
      booted = clock() + q * 1000
      redis.call('SET', KEYS[boot], string.format('%.0f', booted))
    else
      booted = tonumber(booted)
    end
    if booted > 0 and clock() < booted then
      redis.call('DEL', KEYS[fence]) -- as before this attempt: no counter
      return {2, math.ceil((booted - clock()) / 1000)}
    end
  end
  token = clock() + 1
  redis.call('SET', KEYS[fence], string.format('%.0f', token))
end
token = string.format('%.0f', token)

for i = first, last do
  redis.call('HSET', KEYS[i], 'v', ARGV[1], 'l', ARGV[4], 'm', ARGV[5], 'f', token)
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
local count = 0
if counter > 0 then
  count = tonumber(redis.call('GET', KEYS[counter]) or '0')
end
return {0, token, count}
