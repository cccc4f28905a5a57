-- Shared by every otpmcp event-store script. Every key a script touches is one of its
-- KEYS, and all of them carry the session id as their Redis Cluster hash tag, so a
-- script touches one slot:
--   KEYS[1] session hash   (open, bytes, and the session directory's fields)
--   KEYS[2] streams hash   (per stream <n>: <n>:open, <n>:end, <n>:done, <n>:nonces,
--                           <n>:kept events retained, <n>:evicted the last one evicted)
--   KEYS[3] arrivals list  ("<n>:<seq>:<len>:<ms>" per retained event, oldest first)
--   KEYS[4] events hash    (field "<n>:<seq>", value "<ms>:<last 0|1>:<payload>")

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function forget_stream(m)
  redis.call('HDEL', KEYS[2], m .. ':open', m .. ':end', m .. ':done', m .. ':nonces',
    m .. ':kept', m .. ':evicted')
end

-- Drops the session's oldest retained event; a finished stream left empty goes too.
-- Returns the event's length, or false if none is left.
local function evict_oldest()
  local a = redis.call('LPOP', KEYS[3])
  if not a then return false end
  local m, sq, len = string.match(a, '^(%d+):(%d+):(%d+):%d+$')
  redis.call('HDEL', KEYS[4], m .. ':' .. sq)
  redis.call('HINCRBY', KEYS[1], 'bytes', -tonumber(len))
  redis.call('HSET', KEYS[2], m .. ':evicted', sq)
  local kept = redis.call('HINCRBY', KEYS[2], m .. ':kept', -1)
  if kept <= 0 and redis.call('HEXISTS', KEYS[2], m .. ':done') == 1 then
    forget_stream(m)
  end
  return tonumber(len)
end

-- Drops events older than ttl_ms, oldest first; returns how many.
local function expire(now, ttl_ms)
  local n = 0
  while true do
    local a = redis.call('LINDEX', KEYS[3], 0)
    if not a then break end
    local at = tonumber(string.match(a, ':(%d+)$'))
    if now - at <= ttl_ms then break end
    evict_oldest()
    n = n + 1
  end
  return n
end

local function keep_alive(session_ttl_ms)
  for i = 1, 4 do redis.call('PEXPIRE', KEYS[i], session_ttl_ms) end
end
