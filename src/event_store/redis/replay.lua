-- ARGV: 1 evprefix, 2 stream no, 3 after ('' = none), 4 store (0|1), 5 ttl ms,
--       6 window ms, 7 create (0|1), 8 session ttl ms
-- Returns {status, end, done, outcome}:
-- status 0 ok, -1 unknown session or stream, -3 position past the end;
-- outcome 0 replayable (the caller reads the events), 2 outside window, 3 disabled.
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local evprefix, n = ARGV[1], ARGV[2]
local now = now_ms()
if ARGV[7] == '1' then redis.call('HSETNX', KEYS[2], n .. ':open', now) end
expire(evprefix, now, tonumber(ARGV[5]))
local opened = redis.call('HGET', KEYS[2], n .. ':open')
if not opened then return {-1} end
keep_alive(ARGV[8])
local last_pos = tonumber(redis.call('HGET', KEYS[2], n .. ':end') or '0')
local done = redis.call('HEXISTS', KEYS[2], n .. ':done')
if ARGV[3] == '' then return {0, last_pos, done, 0, 0} end
local after = tonumber(ARGV[3])
if after > last_pos then return {-3, last_pos} end
if ARGV[4] ~= '1' then return {0, last_pos, done, 3, 0} end
local ev = evprefix .. n
local issued = nil
if after == 0 then
  issued = tonumber(opened)
else
  local e = redis.call('XRANGE', ev, after .. '-0', after .. '-18446744073709551615')
  if e[1] then issued = tonumber(string.match(e[1][1], '^%d+%-(%d+)$')) end
end
if issued and now - issued > tonumber(ARGV[6]) then return {0, last_pos, done, 2, 0} end
-- The events themselves are read by the caller with a plain XRANGE: converting 10,000
-- entries to Lua tables and back costs more than the round trip.
return {0, last_pos, done, 0, 0}
