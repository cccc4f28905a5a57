-- ARGV: 1 evprefix, 2 op, 3 stream no or session ttl ms, 4 ttl ms
-- op 'open': registers the session (ARGV[3] = session ttl); returns 0.
-- op 'complete': ends stream ARGV[3] with no final event; returns 0, or -1 if unknown.
-- op 'forget': drops every key of the session; returns 0.
-- op 'sweep': drops events older than ARGV[4]; returns the count, or -1 if the session
--   is gone.
-- op 'positions': returns {n1, end1, n2, end2, ...}.
local evprefix, op = ARGV[1], ARGV[2]
if op == 'open' then
  redis.call('HSET', KEYS[1], 'open', 1)
  keep_alive(ARGV[3])
  return 0
end
if op == 'forget' then
  local fields = redis.call('HKEYS', KEYS[2])
  for _, f in ipairs(fields) do
    local m = string.match(f, '^(%d+):open$')
    if m then redis.call('DEL', evprefix .. m) end
  end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if op == 'complete' then
  if redis.call('HEXISTS', KEYS[2], ARGV[3] .. ':open') == 0 then return -1 end
  redis.call('HSET', KEYS[2], ARGV[3] .. ':done', 1)
  return 0
end
if op == 'sweep' then
  return expire(evprefix, now_ms(), tonumber(ARGV[4]))
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
