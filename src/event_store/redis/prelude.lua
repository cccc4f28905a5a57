-- Shared by every otpmcp event-store script. KEYS of one session share a hash tag, so
-- a script touches one Redis Cluster slot.
--   KEYS[1] session hash   (open, bytes, and the session directory's fields)
--   KEYS[2] streams hash   (<n>:open, <n>:end, <n>:done, <n>:nonces per stream)
--   KEYS[3] arrivals list  ("<n>:<seq>:<len>:<ms>" per retained event, oldest first)
-- Events of stream <n> are the Redis Stream named EVPREFIX .. n, entry id <seq>-<ms>
-- (its position, then when it was stored: ids stay increasing because positions do),
-- fields d (payload), and l = 1 on the stream's last event only.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops the session's oldest retained event; a finished stream left empty goes too.
local function evict_oldest(evprefix)
  local a = redis.call('LPOP', KEYS[3])
  if not a then return false end
  local m, sq, len, at = string.match(a, '^(%d+):(%d+):(%d+):(%d+)$')
  local ev = evprefix .. m
  redis.call('XDEL', ev, sq .. '-' .. at)
  redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(len))
  if redis.call('HEXISTS', KEYS[2], m .. ':done') == 1 and redis.call('XLEN', ev) == 0 then
    redis.call('HDEL', KEYS[2], m .. ':open', m .. ':end', m .. ':done', m .. ':nonces')
    redis.call('DEL', ev)
  end
  return true
end

-- Drops events older than ttl_ms, oldest first; returns how many.
local function expire(evprefix, now, ttl_ms)
  local n = 0
  while true do
    local a = redis.call('LINDEX', KEYS[3], 0)
    if not a then break end
    local at = tonumber(string.match(a, ':(%d+)$'))
    if now - at <= ttl_ms then break end
    evict_oldest(evprefix)
    n = n + 1
  end
  return n
end

local function keep_alive(session_ttl_ms)
  redis.call('PEXPIRE', KEYS[1], session_ttl_ms)
  redis.call('PEXPIRE', KEYS[2], session_ttl_ms)
  redis.call('PEXPIRE', KEYS[3], session_ttl_ms)
end
