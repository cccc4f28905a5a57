-- ARGV: 1 stream no, 2 after ('' = none), 3 store (0|1), 4 ttl ms, 5 window ms,
--       6 create (0|1), 7 session ttl ms
-- Returns {status, end, done, outcome, evicted}:
-- status 0 ok, -1 unknown session or stream, -3 position past the end;
-- outcome 0 replayable (the caller reads the events), 2 outside window, 3 disabled;
-- evicted: the stream's last evicted position (the caller reads after it).
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local n = ARGV[1]
local now = now_ms()
if ARGV[6] == '1' then redis.call('HSETNX', KEYS[2], n .. ':open', now) end
expire(now, tonumber(ARGV[4]))
local opened = redis.call('HGET', KEYS[2], n .. ':open')
if not opened then return {-1} end
keep_alive(ARGV[7])
local last_pos = tonumber(redis.call('HGET', KEYS[2], n .. ':end') or '0')
local done = redis.call('HEXISTS', KEYS[2], n .. ':done')
if ARGV[2] == '' then return {0, last_pos, done, 0, 0} end
local after = tonumber(ARGV[2])
if after > last_pos then return {-3, last_pos} end
if ARGV[3] ~= '1' then return {0, last_pos, done, 3, 0} end
local issued = nil
if after == 0 then
  issued = tonumber(opened)
else
  local e = redis.call('HGET', KEYS[4], n .. ':' .. after)
  if e then issued = tonumber(string.match(e, '^(%d+):')) end
end
if issued and now - issued > tonumber(ARGV[5]) then return {0, last_pos, done, 2, 0} end
local evicted = tonumber(redis.call('HGET', KEYS[2], n .. ':evicted') or '0')
-- The events themselves are read by the caller with HMGET, a page at a time: building
-- 10,000 Lua strings into a reply costs more than the round trip.
return {0, last_pos, done, 0, evicted}
