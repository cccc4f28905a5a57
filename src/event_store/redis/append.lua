-- A run of consecutive events of one stream (group commit: one call for all of them).
-- ARGV: 1 stream no, 2 store (0|1), 3 ttl ms, 4 max events, 5 max bytes,
--       6 session ttl ms, 7 channel, 8 origin, 9 floor (the last position the writer
--       saw stored, 0: none); then per event: payload, last (0|1), nonce
-- Returns {status, seq} per event, flattened: 0 stored, 1 duplicate (seq of the first
-- append), -1 unknown session, -2 stream completed.
local n, store = ARGV[1], ARGV[2] == '1'
local count = math.floor((#ARGV - 9) / 3)
local out = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
  for _ = 1, count do out[#out + 1] = -1; out[#out + 1] = 0 end
  return out
end
-- The stream's fields in one read; every command saved is saved on each call that
-- answers at once (a run of one event).
local state = redis.call('HMGET', KEYS[2], n .. ':nonces', n .. ':done', n .. ':end',
  n .. ':open', n .. ':kept')
-- The stream's recent nonces, ",<nonce>:<seq>" each, oldest first, searched as plain
-- text: a re-send is rare, and parsing the list into a table on every call cost more
-- than the run's appends. (A list written without leading commas gets one.)
local recent = state[1] or ''
if recent ~= '' and string.sub(recent, 1, 1) ~= ',' then recent = ',' .. recent end
local function seen(nonce)
  local at = string.find(recent, ',' .. nonce .. ':', 1, true)
  if not at then return nil end
  return tonumber(string.match(recent, '^(%d+)', at + #nonce + 2))
end
local done = state[2] ~= false
local now = now_ms()
local now_s = string.format('%d', now)
-- Positions are taken here and written once; events, arrivals and bytes go in one
-- command each after the loop.
local seq = tonumber(state[3] or '0')
-- Positions up to the floor were stored and answered, then lost: a failover to a replica
-- that had not copied them. They are never issued again, so no id means two events; a
-- replay across them finds them gone and reports them missing.
local floor = tonumber(ARGV[9])
if seq < floor and not done then
  seq = floor
  redis.call('HSET', KEYS[2], n .. ':end', seq)
end
local fields, arrivals, added, bytes = {}, {}, {}, 0
local stored, ended = 0, false
for i = 0, count - 1 do
  local payload, last, nonce = ARGV[10 + 3 * i], ARGV[11 + 3 * i], ARGV[12 + 3 * i]
  local first = seen(nonce)
  if first then
    out[#out + 1] = 1; out[#out + 1] = first
  elseif done then
    out[#out + 1] = -2; out[#out + 1] = 0
  else
    seq = seq + 1
    local at = n .. ':' .. seq
    recent = recent .. ',' .. nonce .. ':' .. seq
    if last == '1' then done, ended = true, true end
    if store then
      fields[#fields + 1] = at
      fields[#fields + 1] = now_s .. ':' .. last .. ':' .. payload
      arrivals[#arrivals + 1] = at .. ':' .. #payload .. ':' .. now_s
      bytes = bytes + #payload
    end
    redis.call('PUBLISH', ARGV[7], ARGV[8] .. '\n' .. seq .. '\n' .. last .. '\n' .. payload)
    out[#out + 1] = 0; out[#out + 1] = seq
    stored = stored + 1
  end
end
if stored == 0 then return out end
-- Keep the last 16 nonces: drop entries from the front while there are more.
local entries = select(2, string.gsub(recent, ',', ','))
local from = 1
while entries > 16 do
  from = string.find(recent, ',', from + 1, true)
  entries = entries - 1
end
-- The stream's fields in one write.
local changed = { n .. ':end', seq, n .. ':nonces', string.sub(recent, from) }
local function set(field, value)
  changed[#changed + 1] = n .. field
  changed[#changed + 1] = value
end
if ended then set(':done', 1) end
if not state[4] then set(':open', now_s) end
if store then set(':kept', tonumber(state[5] or '0') + stored) end
redis.call('HSET', KEYS[2], unpack(changed))
if store then
  redis.call('HSET', KEYS[4], unpack(fields))
  -- The list's length and the byte count, as the commands that grow them return them.
  local events = redis.call('RPUSH', KEYS[3], unpack(arrivals))
  local total = redis.call('HINCRBY', KEYS[1], 'bytes', bytes)
  if expire(now, tonumber(ARGV[3])) > 0 then
    events = redis.call('LLEN', KEYS[3])
    total = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
  end
  local max_events, max_bytes = tonumber(ARGV[4]), tonumber(ARGV[5])
  while events > max_events or (total > max_bytes and events > 1) do
    local len = evict_oldest()
    if not len then break end
    events, total = events - 1, total - len
  end
elseif ended then
  forget_stream(n)
end
keep_alive(ARGV[6])
return out
