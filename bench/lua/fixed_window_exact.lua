-- Fixed window the way a careful user writes it with RL.HIT's semantics: a denied hit is
-- not counted (GET and compare first, INCRBY only when allowed), the window is aligned to
-- the epoch as RL.HIT's is, and the counter gets the window's end as its expiry on the
-- window's first hit (PEXPIREAT, so a late call cannot stretch it).
--   KEYS[1] the counter; ARGV[1] limit; ARGV[2] window in ms; ARGV[3] cost.
-- Reply: {allowed, limit, remaining, reset_after_ms, retry_after_ms}, the shape of RL.HIT.
-- Unlike RL.HIT it trusts the key: a count left by another window length, or a key that
-- lost its expiry, is taken for this window's.
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])

-- The server's clock, never the client's; effects replication (the 7.0 default) sends
-- the INCRBY and the PEXPIREAT to replicas, so they never read a clock either.
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = now - now % window + window

local count = tonumber(redis.call('GET', KEYS[1]) or 0)
if count + cost > limit then
    local remaining = limit - count
    if remaining < 0 then
        remaining = 0
    end
    return {0, limit, remaining, ends - now, ends - now}
end
redis.call('INCRBY', KEYS[1], ARGV[3])
if count == 0 then
    redis.call('PEXPIREAT', KEYS[1], ends)
end
return {1, limit, limit - count - cost, ends - now, 0}
