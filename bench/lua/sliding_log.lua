-- Sliding log in a sorted set: one member per counted unit, scored by its time in µs.
-- Drop what left the window, count what is left, add the hit.
--   KEYS[1] the log; ARGV[1] limit per window; ARGV[2] window in ms; ARGV[3] cost (default 1).
-- Reply: {allowed, limit, remaining, reset_after_ms, retry_after_ms}, the shape of RL.HIT.
-- The log holds up to limit members per key, so the benchmark uses a small limit.
local limit = tonumber(ARGV[1])
local window_ms = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or 1)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
-- string.format('%d'), because Lua's own number-to-string keeps only 14 digits.
local now_text = string.format('%d', now)

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - window_ms * 1000))
local count = redis.call('ZCARD', KEYS[1])
if count + cost > limit then
    -- Denied: room comes back when the oldest entry leaves the window.
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    local retry_after = math.max(1, math.ceil((tonumber(oldest[2]) + window_ms * 1000 - now) / 1000))
    return {0, limit, math.max(0, limit - count), window_ms, retry_after}
end

-- Members must be unique: the time alone is not (several hits in one µs), the time with the
-- running count is, because within one µs the count only grows.
for unit = 1, cost do
    redis.call('ZADD', KEYS[1], now_text, now_text .. '-' .. (count + unit))
end
redis.call('PEXPIRE', KEYS[1], window_ms)
return {1, limit, limit - count - cost, window_ms, 0}
