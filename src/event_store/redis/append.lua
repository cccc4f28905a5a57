-- ARGV: 1 evprefix, 2 stream no, 3 payload, 4 last (0|1), 5 nonce, 6 store (0|1),
--       7 ttl ms, 8 max events, 9 max bytes, 10 session ttl ms, 11 channel, 12 origin
-- Returns {status, seq}: 0 stored, 1 duplicate (seq of the first append),
-- -1 unknown session, -2 stream completed.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local evprefix, n, payload, last, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local recent = redis.call('HGET', KEYS[2], n .. ':nonces') or ''
for seen, sq in string.gmatch(recent, '(%d+):(%d+)') do
  if seen == nonce then return {1, tonumber(sq)} end
end
if redis.call('HEXISTS', KEYS[2], n .. ':done') == 1 then return {-2, 0} end
local now = now_ms()
redis.call('HSETNX', KEYS[2], n .. ':open', now)
local seq = redis.call('HINCRBY', KEYS[2], n .. ':end', 1)
local kept = {}
for entry in string.gmatch(recent, '[^,]+') do kept[#kept + 1] = entry end
kept[#kept + 1] = nonce .. ':' .. seq
while #kept > 16 do table.remove(kept, 1) end
redis.call('HSET', KEYS[2], n .. ':nonces', table.concat(kept, ','))
if last == '1' then redis.call('HSET', KEYS[2], n .. ':done', 1) end
if ARGV[6] == '1' then
  local ev = evprefix .. n
  -- Approximate MAXLEN is only a backstop; the exact per-session caps follow.
  if last == '1' then
    redis.call('XADD', ev, 'MAXLEN', '~', ARGV[8], seq .. '-' .. now, 'd', payload, 'l', 1)
  else
    redis.call('XADD', ev, 'MAXLEN', '~', ARGV[8], seq .. '-' .. now, 'd', payload)
  end
  redis.call('RPUSH', KEYS[3], n .. ':' .. seq .. ':' .. #payload .. ':' .. now)
  redis.call('HINCRBY', KEYS[1], 'bytes', #payload)
  expire(evprefix, now, tonumber(ARGV[7]))
  local max_events, max_bytes = tonumber(ARGV[8]), tonumber(ARGV[9])
  while true do
    local count = redis.call('LLEN', KEYS[3])
    local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
    if not (count > max_events or (bytes > max_bytes and count > 1)) then break end
    evict_oldest(evprefix)
  end
  -- Events cannot outlive the TTL anyway; the key goes with its last event.
  if redis.call('EXISTS', ev) == 1 then redis.call('PEXPIRE', ev, tonumber(ARGV[7]) + 1000) end
elseif last == '1' then
  redis.call('HDEL', KEYS[2], n .. ':open', n .. ':end', n .. ':done', n .. ':nonces')
end
keep_alive(ARGV[10])
redis.call('PUBLISH', ARGV[11], ARGV[12] .. '\n' .. seq .. '\n' .. last .. '\n' .. payload)
return {0, seq}
