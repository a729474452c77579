-- leases.lua: concurrency leases (core/src/lease/), byte for byte the module's layout, so
-- a lease key written by one backend is read and continued by the other:
--   0x02                    LEASE_V1
--   varint tier_len         0: no tier state
--   tier_len bytes          the tiers' state, as RL.HIT stores it in a key of its own
--   i64 LE tier_expires     that state's absolute expiry (only when tier_len > 0)
--   varint count            leases, at most 10000
--   count times: u8 tag (0x80: 16 id bytes follow; 1..64: that many), id, i64 LE end
-- A lease is held while now < end. Every write keeps only the held leases (in the order
-- they were taken), and the key expires with its last lease or its tier state, whichever
-- ends later; with neither it is deleted.
--
-- Lease ids the library makes: the module draws 128 bits from the operating system, which
-- Lua cannot reach (math.random is a seeded 48-bit generator). Here an id is the SHA1 of
-- the server's TIME, the key, math.random and a counter, cut to 16 bytes (32 hex digits,
-- as the module shows its ids); it is checked against the key's held leases and drawn
-- again with the next counter until it differs from all of them, so two held leases of a
-- key never share an id. Such an id is unique but not secret: a client that must keep
-- others from releasing its lease passes its own random ID.

local LEASE_V1 = 2
local RAW_ID = 128
local MAX_LEASES = 10000
local MAX_ID_LEN = 64
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

-- An id as a record stores it: tag, then bytes. 32 lowercase hex digits are the 16 bytes
-- they spell (as a generated id), anything else is kept as given.
local function stored_id(id)
    if #id == 32 and string.find(id, '^[0-9a-f]+$') then
        local raw = string.gsub(id, '%x%x', function(pair)
            return string.char(tonumber(pair, 16))
        end)
        return string.char(RAW_ID) .. raw
    end
    return string.char(#id) .. id
end

-- The id as replies show it.
local function display_id(stored)
    if string.byte(stored, 1) == RAW_ID then
        return (string.gsub(string.sub(stored, 2), '.', function(c)
            return string.format('%02x', string.byte(c))
        end))
    end
    return string.sub(stored, 2)
end

local function parse_id(arg)
    if arg == nil or #arg == 0 or #arg > MAX_ID_LEN then
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

-- ---- The stored value ----------------------------------------------------------------

local function varint_len(value)
    local len = 1
    while value >= 128 do
        value = math.floor(value / 128)
        len = len + 1
    end
    return len
end

-- A varint in its shortest form (the one the module writes), or nil.
local function minimal_varint(r)
    local before = r.pos
    local value = RL.read_varint(r)
    if value == nil or r.pos - before ~= varint_len(value) then
        return nil
    end
    return value
end

local function read_record(r)
    local tag = RL.read_byte(r)
    local len
    if tag == RAW_ID then
        len = 16
    elseif tag ~= nil and tag >= 1 and tag <= MAX_ID_LEN then
        len = tag
    else
        return nil
    end
    if r.pos + len - 1 > #r.s then
        return nil
    end
    local id = string.sub(r.s, r.pos - 1, r.pos + len - 1)
    r.pos = r.pos + len
    -- Canonical only: 32 lowercase hex digits are always stored as their 16 bytes.
    if tag ~= RAW_ID and stored_id(string.sub(id, 2)) ~= id then
        return nil
    end
    local ends = RL.read_i64(r)
    if ends == nil then
        return nil
    end
    return { id = id, ends = ends }
end

-- Reads a whole lease value: { tier = { bytes, ends } | nil, records = { {id, ends}... } },
-- or nil for anything the module would not read as leases.
local function decode(bytes)
    if string.byte(bytes, 1) ~= LEASE_V1 then
        return nil
    end
    local r = RL.reader(bytes)
    r.pos = 2
    local tier_len = minimal_varint(r)
    if tier_len == nil then
        return nil
    end
    local value = { records = {} }
    if tier_len > 0 then
        if r.pos + tier_len - 1 > #bytes then
            return nil
        end
        local tier_bytes = string.sub(bytes, r.pos, r.pos + tier_len - 1)
        r.pos = r.pos + tier_len
        local ends = RL.read_i64(r)
        if ends == nil then
            return nil
        end
        value.tier = { bytes = tier_bytes, ends = ends }
    end
    local count = minimal_varint(r)
    if count == nil or count > MAX_LEASES then
        return nil
    end
    for i = 1, count do
        local record = read_record(r)
        if record == nil then
            return nil
        end
        value.records[i] = record
    end
    if not RL.is_empty(r) then
        return nil
    end
    return value
end

-- Whether `bytes` are a whole lease value (RL.RESET deletes them; RL.HIT names them).
function RL.is_lease(bytes)
    local ok, value = pcall(decode, bytes)
    return ok and value ~= nil
end

-- The key's value at `now`: { value, held = { record... }, by_id = { [id] = record } }.
local function look(key, now)
    local stored = redis.pcall('GET', key)
    if type(stored) == 'table' and stored.err then
        -- WRONGTYPE, exactly as the server words it.
        RL.fail(stored.err)
    end
    local found = { held = {}, by_id = {} }
    if stored == false then
        return found
    end
    local value = decode(stored)
    if value == nil then
        RL.fail(ERR.not_leases)
    end
    found.value = value
    for _, record in ipairs(value.records) do
        if record.ends > now then
            found.held[#found.held + 1] = record
            if found.by_id[record.id] == nil then
                found.by_id[record.id] = record
            end
        end
    end
    return found
end

-- Writes `records` (held ones, in order) beside `tier` (nil: none): SET ... PXAT at the
-- later of the last lease's end and the tier's, or DEL when there is neither.
local function store(key, tier, records)
    local out = { string.char(LEASE_V1) }
    if tier ~= nil and #tier.bytes > 0 then
        RL.put_varint(out, #tier.bytes)
        out[#out + 1] = tier.bytes
        RL.put_i64(out, tier.ends)
    else
        RL.put_varint(out, 0)
        tier = nil
    end
    RL.put_varint(out, #records)
    local last = tier and tier.ends
    for _, record in ipairs(records) do
        out[#out + 1] = record.id
        RL.put_i64(out, record.ends)
        if last == nil or record.ends > last then
            last = record.ends
        end
    end
    if last == nil then
        redis.call('DEL', key)
    else
        redis.call('SET', key, table.concat(out), 'PXAT', last)
    end
end

-- The tier state that still counts at `now`.
local function live_tier(found, now)
    local tier = found.value and found.value.tier
    if tier ~= nil and tier.ends > now then
        return tier
    end
    return nil
end

-- Ms until fewer than `max` leases are held: the end of the (held - max + 1)-th earliest
-- held lease; 0 when a slot is free.
local function slot_wait(held, now, max)
    if #held < max then
        return 0
    end
    local ends = {}
    for i, record in ipairs(held) do
        ends[i] = record.ends
    end
    table.sort(ends)
    return ends[#held - max + 1] - now
end

-- The server's clock, read once per call: ms for the leases, and the whole reading for
-- the ids drawn in this call.
local function clock()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000), time
end

-- A 16-byte id that no lease held on the key has (see the top of this file).
local function new_id(key, time, by_id)
    local counter = 0
    while true do
        local seed = table.concat({ time[1], time[2], key, tostring(math.random()), counter }, ':')
        local id = stored_id(string.sub(redis.sha1hex(seed), 1, 32))
        if by_id[id] == nil then
            return id
        end
        counter = counter + 1
    end
end

-- ---- The commands ----------------------------------------------------------------

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
local function acquire_denied(request, found, tier, now)
    local retry = slot_wait(found.held, now, request.max)
    if request.rule ~= nil then
        local wait = run_tiers(request.rule, 'peek', tier, now).decision.retry
        if wait == RL.NEVER then
            retry = RL.NEVER
        else
            retry = math.max(retry, wait)
        end
    end
    return acquired_reply(false, request.max, math.max(request.max - #found.held, 0), nil, 0, retry)
end

local function acquire(keys, args)
    if #keys ~= 1 then
        RL.arity('RL.ACQUIRE')
    end
    local request = parse_acquire(args)
    local key = keys[1]
    local now, time = clock()
    local found = look(key, now)
    if request.id ~= nil and found.by_id[request.id] ~= nil then
        RL.fail(ERR.duplicate)
    end
    local ends = RL.exact(now + request.ttl)
    local tier = live_tier(found, now)
    local held = #found.held
    if held >= request.max then
        return acquire_denied(request, found, tier, now)
    end
    if request.rule ~= nil then
        local hit = run_tiers(request.rule, 'hit', tier, now)
        if hit.write == 'delete' then
            tier = nil
        elseif hit.write ~= nil then
            tier = { bytes = hit.write.value, ends = hit.write.expires }
        end
        if not hit.decision.allowed then
            -- A denied hit stores only what the tiers must keep (a renewal after a rule
            -- change), with the leases as they are.
            if hit.write ~= nil then
                store(key, tier, found.held)
            end
            local free = math.max(request.max - held, 0)
            return acquired_reply(false, request.max, free, nil, 0, hit.decision.retry)
        end
    end
    local id = request.id or new_id(key, time, found.by_id)
    local records = found.held
    records[#records + 1] = { id = id, ends = ends }
    store(key, tier, records)
    return acquired_reply(true, request.max, math.max(request.max - held - 1, 0), id, request.ttl)
end

-- RL.RELEASE and RL.RENEW: `edit(records, i)` changes the held lease at i and says whether
-- there is anything to write. 1 when that lease was held, 0 (nothing written) when not.
local function change(key, id, now, edit)
    local found = look(key, now)
    local lease = found.by_id[id]
    if lease == nil then
        return 0
    end
    local at
    for i, record in ipairs(found.held) do
        if record == lease then
            at = i
            break
        end
    end
    if edit(found.held, at) then
        store(key, live_tier(found, now), found.held)
    end
    return 1
end

local function release(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        RL.arity('RL.RELEASE')
    end
    local id = parse_id(args[1])
    local now = clock()
    return change(keys[1], id, now, function(records, at)
        table.remove(records, at)
        return true
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
    return change(keys[1], id, now, function(records, at)
        -- A renewal never shortens a lease; one that already ends later writes nothing.
        if records[at].ends >= until_ms then
            return false
        end
        records[at].ends = until_ms
        return true
    end)
end

-- RL.LEASES: held, max, free, retry_after_ms, reset_after_ms; reads only.
local function leases(keys, args)
    if #keys ~= 1 or #args ~= 1 then
        RL.arity('RL.LEASES')
    end
    local max = parse_max(args[1])
    local now = clock()
    local found = look(keys[1], now)
    local held = #found.held
    local free = math.max(max - held, 0)
    local retry = 0
    if free == 0 then
        retry = slot_wait(found.held, now, max)
    end
    local reset = 0
    for _, record in ipairs(found.held) do
        reset = math.max(reset, record.ends - now)
    end
    return { held, max, free, retry, reset }
end

RL.register('rl_acquire', RL.guarded(acquire))
RL.register('rl_release', RL.guarded(release))
RL.register('rl_renew', RL.guarded(renew))
RL.register('rl_leases', RL.guarded(leases), true)
