-- ARGV: 1 stream no, 2 payload, 3 last (0|1), 4 nonce, 5 store (0|1), 6 ttl ms,
--       7 max events, 8 max bytes, 9 session ttl ms, 10 channel, 11 origin
-- Returns {status, seq}: 0 stored, 1 duplicate (seq of the first append),
-- -1 unknown session, -2 stream completed.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1, 0} end
local n, payload, last, nonce = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
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
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[4], n .. ':' .. seq, now .. ':' .. last .. ':' .. payload)
  redis.call('HINCRBY', KEYS[2], n .. ':kept', 1)
  redis.call('RPUSH', KEYS[3], n .. ':' .. seq .. ':' .. #payload .. ':' .. now)
  redis.call('HINCRBY', KEYS[1], 'bytes', #payload)
  expire(now, tonumber(ARGV[6]))
  local max_events, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8])
  while true do
    local count = redis.call('LLEN', KEYS[3])
    local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
    if not (count > max_events or (bytes > max_bytes and count > 1)) then break end
    evict_oldest()
  end
elseif last == '1' then
  forget_stream(n)
end
keep_alive(ARGV[9])
redis.call('PUBLISH', ARGV[10], ARGV[11] .. '\n' .. seq .. '\n' .. last .. '\n' .. payload)
return {0, seq}
