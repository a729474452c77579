-- GCRA (generic cell rate algorithm) with one key holding the theoretical arrival time
-- (TAT) in microseconds: the pattern of redis-cell and of most Lua GCRA limiters.
--   KEYS[1] the TAT; ARGV[1] limit per window (also the burst); ARGV[2] window in ms;
--   ARGV[3] cost (default 1).
-- Reply: {allowed, limit, remaining, reset_after_ms, retry_after_ms}, the shape of RL.HIT.
local limit = tonumber(ARGV[1])
local window_us = tonumber(ARGV[2]) * 1000
local cost = tonumber(ARGV[3] or 1)
local interval = window_us / limit -- µs each unit occupies
local tolerance = window_us        -- a whole window's worth may arrive at once

-- Microseconds since the epoch (about 1.8e15) are exact in a Lua double (< 2^53).
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])

local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then
    tat = now
end
local new_tat = math.ceil(tat + cost * interval)
local allow_at = new_tat - tolerance
if allow_at > now then
    local remaining = math.max(0, math.floor((now + tolerance - tat) / interval))
    return {0, limit, remaining, math.ceil((tat - now) / 1000), math.ceil((allow_at - now) / 1000)}
end

-- string.format('%d'), because Lua's own number-to-string keeps only 14 digits.
local reset_after = math.ceil((new_tat - now) / 1000)
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', reset_after)
local remaining = math.floor((now + tolerance - new_tat) / interval)
return {1, limit, remaining, reset_after, 0}
