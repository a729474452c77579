-- Token bucket in a hash: the tokens left and the time (ms) they were counted at. Tokens
-- refill continuously at limit per window, up to limit.
--   KEYS[1] the hash; ARGV[1] limit per window (also the capacity); ARGV[2] window in ms;
--   ARGV[3] cost (default 1).
-- Reply: {allowed, limit, remaining, reset_after_ms, retry_after_ms}, the shape of RL.HIT.
local capacity = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or 1)
local rate = capacity / window -- tokens per ms

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000

-- A missing hash is a full bucket (tonumber(false) is nil).
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local counted_at = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - counted_at) * rate)

if tokens < cost then
    -- Denied: nothing is written, the refill is recomputed from the stored time next call.
    local full_in = math.ceil((capacity - tokens) / rate)
    return {0, capacity, math.floor(tokens), full_in, math.ceil((cost - tokens) / rate)}
end
tokens = tokens - cost
local full_in = math.max(1, math.ceil((capacity - tokens) / rate))
-- Three decimals keep the fraction of a token and the microseconds of the time.
redis.call('HSET', KEYS[1], 'tokens', string.format('%.3f', tokens),
    'ts', string.format('%.3f', now))
-- The key lives until the bucket would be full again: then it is the same as a missing one.
redis.call('PEXPIRE', KEYS[1], full_in)
return {1, capacity, math.floor(tokens), full_in, 0}
