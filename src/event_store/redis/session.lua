-- ARGV: 1 op, 2 stream no or session ttl ms, 3 ttl ms, 4 the shared format written
-- op 'open': registers the session (ARGV[2] = session ttl) and, from format 2, the
--   format of its keys; returns 0.
-- op 'complete': ends stream ARGV[2] with no final event; returns 0, or -1 if unknown.
-- op 'forget': drops every key of the session; returns 0.
-- op 'sweep': drops events older than ARGV[3]; returns the count, or -1 if the session
--   is gone.
-- op 'positions': returns {n1, end1, n2, end2, ...}.
-- op 'adopt': stream ARGV[2] goes on from position ARGV[3], past its end (a failover
--   lost the events up to there): returns 0, or -1 if the session or stream is unknown,
--   -3 if the stream is complete.
local op = ARGV[1]
if op == 'open' then
  redis.call('HSET', KEYS[1], 'open', 1)
  if tonumber(ARGV[4] or '1') > 1 then redis.call('HSET', KEYS[1], 'format', ARGV[4]) end
  keep_alive(ARGV[2])
  return 0
end
if op == 'forget' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if op == 'complete' then
  if redis.call('HEXISTS', KEYS[2], ARGV[2] .. ':open') == 0 then return -1 end
  redis.call('HSET', KEYS[2], ARGV[2] .. ':done', 1)
  return 0
end
if op == 'adopt' then
  local n = ARGV[2]
  if redis.call('HEXISTS', KEYS[2], n .. ':open') == 0 then return -1 end
  if redis.call('HEXISTS', KEYS[2], n .. ':done') == 1 then return -3 end
  local at = tonumber(ARGV[3])
  if tonumber(redis.call('HGET', KEYS[2], n .. ':end') or '0') < at then
    redis.call('HSET', KEYS[2], n .. ':end', at)
  end
  return 0
end
if op == 'sweep' then
  return expire(now_ms(), tonumber(ARGV[3]))
end
if op == 'positions' then
  local out = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local m = string.match(all[i], '^(%d+):open$')
    if m then
      out[#out + 1] = tonumber(m)
      out[#out + 1] = tonumber(redis.call('HGET', KEYS[2], m .. ':end') or '0')
    end
  end
  return out
end
return redis.error_reply('unknown op ' .. op)
