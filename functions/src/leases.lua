-- leases.lua: RL.ACQUIRE, RL.RELEASE, RL.RENEW and RL.LEASES (core/src/lease/): their
-- grammar, errors and replies, on the module's layout (lease_layout.lua).
--
-- Lease ids the library makes: the module draws 128 bits from the operating system, which
-- Lua cannot reach (math.random is a seeded 48-bit generator). Here an id is the SHA1 of
-- the server's TIME, the key, math.random and a counter, cut to 16 bytes (32 hex digits,
-- as the module shows its ids); it is checked against the key's held leases and drawn
-- again with the next counter until it differs from all of them, so two held leases of a
-- key never share an id. Such an id is unique but not secret: a client that must keep
-- others from releasing its lease passes its own random ID.

local L = RL.lease
-- The module's defaults of ratelimit.max-leases and ratelimit.max-window-ms, which Lua
-- cannot read.
local MAX_LEASES_CONFIG = 10000
local MAX_TTL_MS = 366 * 86400 * 1000

local ERR = {
    max = 'ERR max must be an integer from 1 to 10000 (ratelimit.max-leases)',
    ttl = 'ERR ttl must be a positive duration (e.g. 500ms, 30s) of at most 366d '
        .. '(ratelimit.max-window-ms)',
    id = 'ERR ID must be followed by a lease id of 1 to 64 bytes',
    repeated_id = 'ERR ID is given more than once',
    options = 'ERR ALGO, BURST and COST apply to tiers: give limit window first',
    not_leases = 'ERR key holds a value that is not leases (a rate-limit state of RL.HIT, '
        .. 'or another string)',
    duplicate = 'ERR ID is already held on this key: release or renew it',
}
local HIT_UNKNOWN = "(expected ALGO, BURST, COST, TZ or ANCHOR)"
local LEASE_UNKNOWN = "(expected ALGO, BURST, COST, TZ, ANCHOR or ID)"

-- ---- Arguments -------------------------------------------------------------------------

-- `max`: 1 to 19 digits, 1 to the cap. (Not RL.parse_digits: a large max is this error,
-- as in the module, not the library's error for numbers beyond 2^53.)
local function parse_max(arg)
    if arg == nil or #arg > 19 or not string.find(arg, '^%d+$') then
        RL.fail(ERR.max)
    end
    local max = tonumber(arg)
    if max < 1 or max > MAX_LEASES_CONFIG then
        RL.fail(ERR.max)
    end
    return max
end

local TTL_UNITS = { [''] = 1000, s = 1000, ms = 1, m = 60000, h = 3600000, d = 86400000 }

-- `ttl`: digits and an optional unit, 1ms to 366d; every refusal is the one ttl error.
local function parse_ttl(arg)
    local digits, unit = string.match(arg or '', '^(%d+)(%a*)$')
    local unit_ms = unit and TTL_UNITS[string.lower(unit)]
    if unit_ms == nil then
        RL.fail(ERR.ttl)
    end
    -- Approximate only for amounts far beyond the bound, so the comparison stays right.
    local ttl = tonumber(digits) * unit_ms
    if ttl < 1 or ttl > MAX_TTL_MS then
        RL.fail(ERR.ttl)
    end
    return ttl
end

local stored_id, display_id = L.stored_id, L.display_id

local function parse_id(arg)
    if arg == nil or #arg == 0 or #arg > L.MAX_ID_LEN then
        RL.fail(ERR.id)
    end
    return stored_id(arg)
end

-- An error caught by pcall as its reply text (the server hands errors over as text there).
local function error_text(err)
    if type(err) == 'table' and err.err ~= nil then
        return err.err
    end
    return tostring(err)
end

local TIER_OPTIONS = { ALGO = true, BURST = true, COST = true }

-- RL.HIT's rule grammar for the tiers, with the errors RL.ACQUIRE gives for it.
local function parse_tiers(others)
    local first = others[1]
    if TIER_OPTIONS[string.upper(first)] then
        RL.fail(ERR.options)
    end
    local upper = string.upper(first)
    if string.find(first, '^%a') and upper ~= 'TZ' and upper ~= 'ANCHOR' then
        RL.fail("ERR unknown option '" .. RL.excerpt(first) .. "' " .. LEASE_UNKNOWN)
    end
    if others[2] == nil then
        -- One word where a tier belongs: the module's "each limit needs a window".
        RL.fail(RL.ERR.missing_window)
    end
    local ok, rule = pcall(RL.parse_limits, 'RL.ACQUIRE', others, 1)
    if ok then
        return rule
    end
    local text = error_text(rule)
    local head = "ERR unknown option '"
    if string.sub(text, 1, #head) == head and string.sub(text, -#HIT_UNKNOWN) == HIT_UNKNOWN then
        RL.fail(string.sub(text, 1, -#HIT_UNKNOWN - 1) .. LEASE_UNKNOWN)
    end
    RL.fail(text)
end

-- RL.ACQUIRE's arguments after the key: max ttl [limit window ...] [options] [ID id].
-- Tiers and options come in pairs, so ID is only ever the first word of a pair.
local function parse_acquire(args)
    if #args < 2 then
        RL.arity('RL.ACQUIRE')
    end
    local request = { max = parse_max(args[1]), ttl = parse_ttl(args[2]) }
    local others = {}
    for i = 3, #args, 2 do
        if RL.is_word(args[i], 'ID') then
            if args[i + 1] == nil then
                RL.fail(ERR.id)
            end
            local id = parse_id(args[i + 1])
            if request.id ~= nil then
                RL.fail(ERR.repeated_id)
            end
            request.id = id
        else
            others[#others + 1] = args[i]
            others[#others + 1] = args[i + 1]
        end
    end
    if #others > 0 then
        request.rule = parse_tiers(others)
    end
    return request
end

-- The server's clock, read once per call: ms for the leases, and the whole reading for
-- the ids drawn in this call.
local function clock()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), time
end


-- A 16-byte id that no lease held on the key has (see the top of this file).
local function new_id(key, time, v, now)
    local counter = 0
    while true do
        local seed = table.concat({ time[1], time[2], key, tostring(math.random()), counter }, ':')
        local id = stored_id(string.sub(redis.sha1hex(seed), 1, 32))
        if not L.holds(v, now, id) then
            return id
        end
        counter = counter + 1
    end
end

-- ---- The commands ------------------------------------------------------------------

-- The key's leases at `now` (nil: no key), the held lease `want` looked for.
local function look(key, now, want)
    local stored = redis.pcall('GET', key)
    if type(stored) == 'table' and stored.err then
        -- WRONGTYPE, exactly as the server words it.
        RL.fail(stored.err)
    end
    if stored == false then
        return nil
    end
    local v = L.read(stored, now, want)
    if v == nil then
        RL.fail(ERR.not_leases)
    end
    return v
end

local function held_count(v)
    return v and v.held or 0
end

-- The tier state that still counts at `now`.
local function live_tier(v, now)
    local tier = v and v.tier
    if tier ~= nil and tier.ends > now then
        return tier
    end
    return nil
end

-- Ms until fewer than `max` leases are held: the end of the (held - max + 1)-th earliest
-- held lease (the earliest when exactly `max` are held); 0 when a slot is free.
local function slot_wait(v, now, max)
    local held = held_count(v)
    if held < max then
        return 0
    end
    if held == max then
        return v.earliest - now
    end
    return L.held_ends(v, now)[held - max + 1] - now
end

-- RL.ACQUIRE's reply: acquired, max, free, id (nil when none was taken), ttl_ms, retry.
local function acquired_reply(taken, max, free, id, ttl, retry)
    if taken then
        return { 1, max, free, display_id(id), ttl, 0 }
    end
    -- false is a null bulk string under RESP2 and a null under RESP3, as the module's.
    return { 0, max, free, false, 0, retry }
end

-- The tiers' answer for the tier state `tier` (nil: none) at `now`. The module's state
-- error names leases here, since a tier state inside a lease value is only ever ours.
local function run_tiers(rule, step, tier, now)
    local ok, outcome = pcall(RL.run, rule, step, tier and tier.bytes, function()
        return tier and tier.ends
    end, now)
    if ok then
        return outcome
    end
    local text = error_text(outcome)
    if text == RL.NOT_OURS then
        RL.fail(ERR.not_leases)
    end
    RL.fail(text)
end

-- A full key: the wait until a slot frees, or the tiers' wait if longer (never: -1).
local function acquire_full(request, v, tier, now)
    local retry = slot_wait(v, now, request.max)
    if request.rule ~= nil then
        local wait = run_tiers(request.rule, 'peek', tier, now).decision.retry
        if wait == RL.NEVER then
            retry = RL.NEVER
        else
            retry = math.max(retry, wait)
        end
    end
    return acquired_reply(false, request.max, 0, nil, 0, retry)
end

-- Counts the hit in the tiers: the tier state to keep, and the reply when a tier denies
-- (a denied hit stores only what the tiers must keep, a renewal after a rule change,
-- with the leases as they are).
local function hit_tiers(key, request, v, tier, now)
    local hit = run_tiers(request.rule, 'hit', tier, now)
    if hit.write == 'delete' then
        tier = nil
    elseif hit.write ~= nil then
        tier = { bytes = hit.write.value, ends = hit.write.expires }
    end
    if hit.decision.allowed then
        return tier, nil
    end
    if hit.write ~= nil then
        L.store(key, L.rebuild(v, now, tier, {}))
    end
    local free = math.max(request.max - held_count(v), 0)
    return tier, acquired_reply(false, request.max, free, nil, 0, hit.decision.retry)
end

local function acquire(keys, args)
    if #keys ~= 1 then
        RL.arity('RL.ACQUIRE')
    end
    local request = parse_acquire(args)
    local key = keys[1]
    local now, time = clock()
    local v = look(key, now, request.id)
    if v ~= nil and v.at ~= nil then
        RL.fail(ERR.duplicate)
    end
    local ends = RL.exact(now + request.ttl)
    local tier = live_tier(v, now)
    local held = held_count(v)
    if held >= request.max then
        return acquire_full(request, v, tier, now)
    end
    if request.rule ~= nil then
        local denied
        tier, denied = hit_tiers(key, request, v, tier, now)
        if denied ~= nil then
            return denied
        end
    end
    local id = request.id or new_id(key, time, v, now)
    L.store(key, L.rebuild(v, now, tier, { id = id, ends = ends }))
    return acquired_reply(true, request.max, math.max(request.max - held - 1, 0), id, request.ttl)
end

-- RL.RELEASE and RL.RENEW: `edit(v, i)` gives the change to the held lease i, or nil
-- when there is nothing to write. 1 when that lease was held, 0 (nothing written) when
-- not.
local function change(key, id, now, edit)
    local v = look(key, now, id)
    if v == nil or v.at == nil then
        return 0
    end
    local change = edit(v, v.at)
    if change ~= nil then
        L.store(key, L.rebuild(v, now, live_tier(v, now), change))
    end
    return 1
end

local function release(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        RL.arity('RL.RELEASE')
    end
    local id = parse_id(args[1])
    return change(keys[1], id, clock(), function(_, at)
        return { remove = at }
    end)
end

local function renew(keys, args)
    if #keys ~= 1 or #args ~= 2 then
        RL.arity('RL.RENEW')
    end
    local id = parse_id(args[1])
    local ttl = parse_ttl(args[2])
    local now = clock()
    local until_ms = RL.exact(now + ttl)
    return change(keys[1], id, now, function(v, at)
        -- A renewal never shortens a lease; one that already ends later writes nothing.
        if v.ends[at] >= until_ms then
            return nil
        end
        return { renew = at, ends = until_ms }
    end)
end

-- RL.LEASES: held, max, free, retry_after_ms, reset_after_ms; reads only.
local function leases(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        RL.arity('RL.LEASES')
    end
    local max = parse_max(args[1])
    local now = clock()
    local v = look(keys[1], now, nil)
    local held = held_count(v)
    local free = math.max(max - held, 0)
    local retry = 0
    if free == 0 then
        retry = slot_wait(v, now, max)
    end
    local reset = 0
    if held > 0 then
        reset = v.latest - now
    end
    return { held, max, free, retry, reset }
end

RL.register('rl_acquire', RL.guarded(acquire))
-- RL.RELEASE and RL.RENEW are not deny-oom in the module, so a holder can still give its
-- lease back (which frees memory) or renew it (the value keeps its length) on a server
-- over maxmemory: the functions say `allow-oom` for the same.
redis.register_function({ function_name = 'rl_release', callback = RL.guarded(release),
    flags = { 'allow-oom' } })
redis.register_function({ function_name = 'rl_renew', callback = RL.guarded(renew),
    flags = { 'allow-oom' } })
RL.register('rl_leases', RL.guarded(leases), true)
