-- Creates a task record counted against its principal's quota (tasks.max_per_principal).
-- KEYS[1]: the principal's sorted set of live task ids, scored by expiry (ms, Redis's
-- clock); KEYS[2], where it shares KEYS[1]'s slot (one server, not a cluster): the
-- record, set here in the same step.
-- ARGV: id, ttl (ms), max, record (with KEYS[2]).
-- Returns 1 when stored (or, without KEYS[2], reserved), 0 when the principal holds max.
-- A counter cannot follow key expiry, so the set is the count: members whose expiry has
-- passed are dropped before counting, so an expired record stops counting at once.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
-- The set lives as long as its longest-lived member.
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
if KEYS[2] then
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
end
return 1
