-- Fixed window the way most Lua limiters do it: INCR the counter, and give it an expiry on
-- the first hit (the INCR + PEXPIRE pattern of the Redis docs). The window is aligned to
-- the epoch, as RL.HIT's is, so both measure the same semantics.
--   KEYS[1] the counter; ARGV[1] limit; ARGV[2] window in ms.
-- Reply: {allowed, limit, remaining, reset_after_ms, retry_after_ms}, the shape of RL.HIT.
-- Like the classic pattern (and unlike RL.HIT) a denied hit is counted too; the benchmark's
-- limit is high enough that nothing is denied.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])

-- The server's clock, never the client's. Effects replication (the 7.0 default) sends the
-- INCR and the PEXPIRE (as PEXPIREAT) to replicas, so they never read a clock either.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local reset_after = window - now % window

local count = redis.call('INCR', KEYS[1])
if count == 1 then
    redis.call('PEXPIRE', KEYS[1], reset_after)
end
if count > limit then
    return {0, limit, 0, reset_after, reset_after}
end
return {1, limit, limit - count, reset_after, 0}
