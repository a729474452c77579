-- commands.lua: the functions, registered last. Calling convention:
--   FCALL rl_<command> <numkeys> <keys...> <the module command's other arguments>
-- Replies are the module's RESP2 replies under RESP2 and RESP3 alike: a function cannot
-- learn its caller's protocol.

-- The library's version: the Cargo workspace's, written in by scripts/functions_bundle.py.
RL.VERSION = '@VERSION@'

-- Runs `body`, turning the errors it raises (ours, and the server's from redis.call) into
-- error replies. Under pcall the server hands every error over as its text; an error
-- reply returned as a table reaches the client as it is, where an uncaught one would get
-- the script's name and line appended.
local function guarded(body)
    return function(keys, args)
        local ok, result = pcall(body, keys, args)
        if ok then
            return result
        end
        local text = RL.error_text(result)
        if not string.find(text, '^[A-Z]+ ') then
            -- A Lua runtime error is a bug of this library: say so, with its text.
            text = 'ERR internal error in the ratelimit library: ' .. text
        end
        return { err = text }
    end
end

-- The key's value (nil: no key) and a reader of its absolute expiry (nil: none), asked at
-- most once, as the module does.
function RL.open_key(key)
    local value = redis.call('GET', key)
    if value == false then
        value = nil
    end
    local expiry, known = nil, false
    local function read_expiry()
        if not known then
            local at = redis.call('PEXPIRETIME', key)
            if at >= 0 then
                expiry = at
            end
            known = true
        end
        return expiry
    end
    return value, read_expiry
end

-- Makes the change the limiter decided: SET key value PXAT expiry, or DEL; replicated as
-- those effects, which are the bytes the module propagates.
function RL.apply(key, write)
    if write == 'delete' then
        redis.call('DEL', key)
    elseif write ~= nil then
        redis.call('SET', key, write.value, 'PXAT', write.expires)
    end
end

function RL.values(d)
    local allowed = 0
    if d.allowed then
        allowed = 1
    end
    return { allowed, d.limit, d.remaining, d.reset, d.retry }
end

local LEASES_NOT_STATE = 'ERR key holds leases (RL.ACQUIRE), not a rate-limit state: use '
    .. 'RL.LEASES to read it'

-- Whether a value holds leases; leases.lua overrides it.
function RL.is_lease(_value)
    return false
end

-- RL.HIT, RL.PEEK and RL.REFUND on one key: the fast path (fast.lua) first, then the
-- general path for what it leaves.
local function single(command, step)
    local general = guarded(function(keys, args)
        if #keys ~= 1 then
            RL.arity(command)
        end
        local rule = RL.parse_limits(command, args, 1)
        local value, expiry = RL.open_key(keys[1])
        local now = RL.now_ms()
        if value ~= nil and RL.is_lease(value) then
            RL.fail(LEASES_NOT_STATE)
        end
        local outcome = RL.run(rule, step, value, expiry, now)
        RL.apply(keys[1], outcome.write)
        return RL.values(outcome.decision)
    end)
    return RL.fast_single(command, step, general)
end

local function reset(keys, args)
    if #keys ~= 1 or #args ~= 0 then
        RL.arity('RL.RESET')
    end
    local value, expiry = RL.open_key(keys[1])
    if value == nil then
        return 0
    end
    if not (RL.is_state(value, expiry()) or RL.is_lease(value)) then
        RL.fail(RL.NOT_OURS)
    end
    redis.call('DEL', keys[1])
    return 1
end

-- Registers `callback` as function `name` with the flags that match the module command's:
-- READ_ONLY ones (`no-writes`) for commands that only read, so FCALL_RO and replicas take
-- them; ALLOW_OOM for writes the module does not refuse over maxmemory (a refund, a reset,
-- a release: they free or keep memory, and a holder must be able to give units back); none
-- for the deny-oom ones. The files after this one (leases.lua, take.lua) register theirs
-- through RL.register and RL.guarded too, and take.lua answers a lease key with this
-- file's error for it.
local READ_ONLY = { 'no-writes' }
local ALLOW_OOM = { 'allow-oom' }
RL.READ_ONLY = READ_ONLY
RL.ALLOW_OOM = ALLOW_OOM

local function register(name, callback, flags)
    redis.register_function({ function_name = name, callback = callback, flags = flags or {} })
end

RL.register = register
RL.guarded = guarded
RL.LEASES_NOT_STATE = LEASES_NOT_STATE

register('rl_version', function()
    return RL.VERSION
end, READ_ONLY)
register('rl_hit', single('RL.HIT', 'hit'))
register('rl_peek', single('RL.PEEK', 'peek'), READ_ONLY)
register('rl_refund', single('RL.REFUND', 'refund'), ALLOW_OOM)
register('rl_reset', guarded(reset), ALLOW_OOM)
register('rl_mhit', guarded(RL.several('hit')))
register('rl_mpeek', guarded(RL.several('peek')), READ_ONLY)
register('rl_mrefund', guarded(RL.several('refund')), ALLOW_OOM)
