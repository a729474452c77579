-- log.lua: the exact sliding log (core/src/sliding_log.rs). A state is its entries, oldest
-- first: { at, units } per distinct ms, times strictly increasing, every entry holding
-- units but the newest, which may be a marker of 0 after a refund. Here the entries are
-- decoded whole and checked whole (the module reads only those a call needs); the bytes
-- written are the module's:
--   header  0, varints count, total units, the oldest time as 8 bytes, its units, the ms
--           from the oldest to the newest, the byte length of the pairs, then per further
--           entry varints the ms since the previous one and its units;
--   plain   (older) varint count, the oldest time as 8 bytes, its units, then the pairs:
--           read, and written back as they were while unchanged.

local Log = { id = 3, name = 'log', has_burst = false }
local MAX_ENTRIES = 10001

-- A call decodes and writes the whole log, one step per entry, where the module touches
-- only the entries it changes: the library takes limits up to 1000, so a call stays well
-- under a millisecond, and refuses a longer log the module wrote.
RL.LIBRARY_LOG_LIMIT = 1000
local LIBRARY_ENTRIES = RL.LIBRARY_LOG_LIMIT + 1
local TOO_LONG = 'ERR key holds an ALGO log of more than 1001 entries, more than the functions '
    .. 'library reads in one call: use the module'

-- A state is { ats, units, legacy }: two arrays of numbers, oldest first, rather than a
-- table per entry, so that a call on a long log allocates little.

local function total_of(units, first)
    local total = 0
    for i = first or 1, #units do
        total = total + math.max(units[i], 0)
    end
    return total
end

-- The state as it stands at max(now, newest): `first`, the index of its oldest entry
-- still in the window (nil when none is), and the units from there on.
local function seen_at(state, now, window)
    if state == nil then
        return { at = now, used = 0 }
    end
    local ats = state.ats
    local n = #ats
    local at = math.max(ats[n], now)
    local horizon = at - window
    if ats[n] <= horizon then
        return { at = at, used = 0 }
    end
    local first = 1
    while ats[first] <= horizon do
        first = first + 1
    end
    return { at = at, state = state, first = first, used = total_of(state.units, first) }
end

-- The time of the newest live entry holding units (the one before a marker), or nil.
local function newest_counted(state, first)
    local n = #state.ats
    if state.units[n] > 0 then
        return state.ats[n]
    elseif n > first then
        return state.ats[n - 1]
    end
    return nil
end

local function reset_after(state, first, window, now)
    local at = first and newest_counted(state, first)
    if at == nil then
        return 0
    end
    return at + window - now
end

local function remaining(seen, limit)
    return math.max(math.min(limit - seen.used, limit), 0)
end

-- The live entries with `cost` units logged at `at`: merged into the newest entry at that
-- ms, in place of a marker, or after it; at most MAX_ENTRIES kept, the oldest merged on.
local function logged(seen, at, cost)
    local ats, units = {}, {}
    if seen.first then
        for i = seen.first, #seen.state.ats do
            ats[#ats + 1] = seen.state.ats[i]
            units[#units + 1] = seen.state.units[i]
        end
    end
    local n = #ats
    if n > 0 and ats[n] == at then
        units[n] = RL.exact(units[n] + cost)
    elseif n > 0 and units[n] == 0 then
        ats[n], units[n] = at, cost
    else
        ats[n + 1], units[n + 1] = at, cost
    end
    while #ats > MAX_ENTRIES do
        table.remove(ats, 1)
        local oldest = table.remove(units, 1)
        units[1] = RL.exact(units[1] + oldest)
    end
    return { ats = ats, units = units }
end

function Log.capacity(quota)
    return quota.limit
end

function Log.span(quota)
    return quota.window * 2
end

function Log.view(state, now, quota)
    local seen = seen_at(state, now, quota.window)
    return remaining(seen, quota.limit), reset_after(seen.state, seen.first, quota.window, now)
end

function Log.check(state, now, quota, cost)
    local seen = seen_at(state, now, quota.window)
    local total = seen.used + cost
    if total > quota.limit then
        local retry = RL.NEVER
        if cost <= quota.limit then
            local excess = total - quota.limit
            local leaves = seen.at
            if seen.first then
                local freed = 0
                for i = seen.first, #state.ats do
                    freed = freed + state.units[i]
                    if freed >= excess then
                        leaves = state.ats[i]
                        break
                    end
                end
            end
            retry = leaves + quota.window - now
        end
        return { allowed = false, limit = quota.limit, remaining = remaining(seen, quota.limit),
            reset = reset_after(seen.state, seen.first, quota.window, now), retry = retry }, nil
    end
    local charged = logged(seen, seen.at, cost)
    return { allowed = true, limit = quota.limit, remaining = quota.limit - total,
        reset = reset_after(charged, 1, quota.window, now), retry = 0 }, charged
end

-- Takes units off the newest entries in the window first; an entry left with none is
-- dropped, but the newest taken, which stays as a marker. Entries are not dropped by time.
function Log.refund(state, now, quota, amount)
    if state == nil then
        return nil
    end
    local seen = seen_at(state, now, quota.window)
    if seen.used == 0 or seen.first == nil then
        return nil
    end
    local live = #state.ats - seen.first + 1
    -- Entries n + 1 .. are taken, newest first, until they hold `amount` units.
    local n, held = #state.ats, 0
    while held < amount and #state.ats - n < live and n > 0 do
        held = held + math.max(state.units[n], 0)
        n = n - 1
    end
    local ats, units = {}, {}
    for i = 1, n do
        ats[i], units[i] = state.ats[i], state.units[i]
    end
    local newest = #state.ats
    local left = amount
    local after = {}
    for i = newest, n + 1, -1 do
        local take = math.min(math.max(state.units[i], 0), left)
        after[i] = state.units[i] - take
        left = left - take
    end
    for i = n + 1, newest do
        if after[i] > 0 or i == newest then
            ats[#ats + 1], units[#units + 1] = state.ats[i], after[i]
        end
    end
    return { ats = ats, units = units }
end

function Log.used(state, now, quota)
    return seen_at(state, now, quota.window).used
end

function Log.seeded(used, now, _quota)
    return { ats = { now }, units = { math.max(used, 0) } }
end

function Log.expires_at(state, quota)
    return state.ats[#state.ats] + quota.window
end

function Log.encode(state, out)
    local ats, units = state.ats, state.units
    -- The pairs' bytes as numbers first, turned into a string a few thousand at a time
    -- (string.char takes its bytes as arguments): one call per chunk, not per varint.
    local bytes = {}
    local function varint(value)
        repeat
            local low = value % 128
            value = (value - low) / 128
            if value > 0 then
                low = low + 128
            end
            bytes[#bytes + 1] = low
        until value == 0
    end
    for i = 2, #ats do
        varint(ats[i] - ats[i - 1])
        varint(units[i])
    end
    local chunks = {}
    for from = 1, #bytes, 4000 do
        chunks[#chunks + 1] = string.char(unpack(bytes, from, math.min(from + 3999, #bytes)))
    end
    local pairs = table.concat(chunks)
    if state.legacy then
        RL.put_varint(out, #ats)
    else
        RL.put_byte(out, 0)
        RL.put_varint(out, #ats)
        RL.put_varint(out, total_of(units))
    end
    RL.put_i64(out, ats[1])
    RL.put_varint(out, units[1])
    if not state.legacy then
        RL.put_varint(out, ats[#ats] - ats[1])
        RL.put_varint(out, #pairs)
    end
    out[#out + 1] = pairs
end

-- Reads `count - 1` pairs after the oldest entry into the state; nil if one is not there
-- or breaks the rules (a gap of 0, no units before the newest). The bytes are taken out
-- a few thousand at a time and decoded here, not one function call per byte.
local function read_pairs(r, state, count)
    local ats, units = state.ats, state.units
    local s, pos, last = r.s, r.pos, #r.s
    local bytes, base = {}, pos
    -- The varint at `pos`, within 0..2^53-1 (else the library's error), or nil.
    local function varint()
        local value, scale = 0, 1
        for _ = 1, 10 do
            if pos > last then
                return nil
            end
            local at = pos - base + 1
            if at > #bytes then
                base = pos
                bytes = { string.byte(s, pos, math.min(pos + 3999, last)) }
                at = 1
            end
            local b = bytes[at]
            pos = pos + 1
            value = value + (b % 128) * scale
            if b < 128 then
                return RL.exact(value)
            end
            scale = scale * 128
        end
        return nil
    end
    for n = 2, count do
        local gap = varint()
        local u = gap and varint()
        if u == nil or gap < 1 or (u < 1 and n < count) then
            return nil
        end
        ats[n], units[n] = RL.exact(ats[n - 1] + gap), u
    end
    r.pos = pos
    return state
end

local function decode_header(r)
    local count = RL.read_positive(r)
    local total = count and RL.read_varint(r)
    local at = total and RL.read_i64(r)
    local units = at and RL.read_varint(r)
    local span = units and RL.read_varint(r)
    local len = span and RL.read_varint(r)
    if len == nil or count > MAX_ENTRIES or r.pos + len - 1 > #r.s then
        return nil
    end
    if count > LIBRARY_ENTRIES then
        RL.fail(TOO_LONG)
    end
    if count > 1 and units < 1 then
        return nil
    end
    local ends = r.pos + len
    local state = read_pairs(r, { ats = { at }, units = { units } }, count)
    if state == nil or r.pos ~= ends or state.ats[count] - at ~= span
        or total_of(state.units) ~= total then
        return nil
    end
    return state
end

local function decode_plain(r)
    local count = RL.read_positive(r)
    if count ~= nil and count > LIBRARY_ENTRIES and count <= MAX_ENTRIES then
        RL.fail(TOO_LONG)
    end
    local at = count and count <= MAX_ENTRIES and RL.read_i64(r)
    local units = at and RL.read_varint(r)
    if units == nil or (count > 1 and units < 1) then
        return nil
    end
    local state = read_pairs(r, { ats = { at }, units = { units } }, count)
    if state then
        state.legacy = true
    end
    return state
end

function Log.decode(r)
    if string.byte(r.s, r.pos) == 0 then
        r.pos = r.pos + 1
        return decode_header(r)
    end
    return decode_plain(r)
end

RL.add_algorithm(Log)
