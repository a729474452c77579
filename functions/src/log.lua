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

local function total_of(entries)
    local total = 0
    for _, e in ipairs(entries) do
        total = total + math.max(e.units, 0)
    end
    return total
end

-- The entries still in the window at max(now, newest): nil when none is left.
local function seen_at(state, now, window)
    if state == nil then
        return { at = now, live = nil, used = 0 }
    end
    local entries = state.entries
    local at = math.max(entries[#entries].at, now)
    local horizon = at - window
    if entries[#entries].at <= horizon then
        return { at = at, live = nil, used = 0 }
    end
    local first = 1
    while entries[first].at <= horizon do
        first = first + 1
    end
    local live = {}
    for i = first, #entries do
        live[#live + 1] = entries[i]
    end
    return { at = at, live = live, used = total_of(live) }
end

-- The time of the newest entry holding units (the one before a marker), or nil.
local function newest_counted(entries)
    local n = #entries
    if entries[n].units > 0 then
        return entries[n].at
    elseif n > 1 then
        return entries[n - 1].at
    end
    return nil
end

local function reset_after(live, window, now)
    local at = live and newest_counted(live)
    if at == nil then
        return 0
    end
    return at + window - now
end

local function remaining(seen, limit)
    return math.max(math.min(limit - seen.used, limit), 0)
end

-- `live` with `cost` units logged at `at`: merged into the newest entry at that ms, in
-- place of a marker, or after it; at most MAX_ENTRIES kept, the oldest merged forward.
local function logged(live, at, cost)
    local entries = {}
    for i, e in ipairs(live or {}) do
        entries[i] = { at = e.at, units = e.units }
    end
    local n = #entries
    if n > 0 and entries[n].at == at then
        entries[n].units = RL.exact(entries[n].units + cost)
    elseif n > 0 and entries[n].units == 0 then
        entries[n] = { at = at, units = cost }
    else
        entries[n + 1] = { at = at, units = cost }
    end
    while #entries > MAX_ENTRIES do
        local oldest = table.remove(entries, 1)
        entries[1].units = RL.exact(entries[1].units + oldest.units)
    end
    return { entries = entries }
end

function Log.capacity(quota)
    return quota.limit
end

function Log.span(quota)
    return quota.window * 2
end

function Log.view(state, now, quota)
    local seen = seen_at(state, now, quota.window)
    return remaining(seen, quota.limit), reset_after(seen.live, quota.window, now)
end

function Log.check(state, now, quota, cost)
    local seen = seen_at(state, now, quota.window)
    local total = seen.used + cost
    if total > quota.limit then
        local retry = RL.NEVER
        if cost <= quota.limit then
            local excess = total - quota.limit
            local leaves = seen.at
            local freed = 0
            for _, e in ipairs(seen.live or {}) do
                freed = freed + e.units
                if freed >= excess then
                    leaves = e.at
                    break
                end
            end
            retry = leaves + quota.window - now
        end
        return { allowed = false, limit = quota.limit, remaining = remaining(seen, quota.limit),
            reset = reset_after(seen.live, quota.window, now), retry = retry }, nil
    end
    local charged = logged(seen.live, seen.at, cost)
    return { allowed = true, limit = quota.limit, remaining = quota.limit - total,
        reset = reset_after(charged.entries, quota.window, now), retry = 0 }, charged
end

-- Takes units off the newest entries in the window first; an entry left with none is
-- dropped, but the newest taken, which stays as a marker. Entries are not dropped by time.
function Log.refund(state, now, quota, amount)
    if state == nil then
        return nil
    end
    local seen = seen_at(state, now, quota.window)
    if seen.used == 0 or seen.live == nil then
        return nil
    end
    local kept = {}
    for i, e in ipairs(state.entries) do
        kept[i] = e
    end
    local taken, held = {}, 0
    while held < amount and #taken < #seen.live and #kept > 0 do
        local e = table.remove(kept)
        held = held + math.max(e.units, 0)
        taken[#taken + 1] = { at = e.at, units = e.units }
    end
    local newest_at = taken[1].at
    local left = amount
    for _, e in ipairs(taken) do
        local take = math.min(math.max(e.units, 0), left)
        e.units = e.units - take
        left = left - take
    end
    for i = #taken, 1, -1 do
        local e = taken[i]
        if e.units > 0 or e.at == newest_at then
            kept[#kept + 1] = e
        end
    end
    return { entries = kept }
end

function Log.used(state, now, quota)
    return seen_at(state, now, quota.window).used
end

function Log.seeded(used, now, _quota)
    return { entries = { { at = now, units = math.max(used, 0) } } }
end

function Log.expires_at(state, quota)
    return state.entries[#state.entries].at + quota.window
end

local function pairs_bytes(entries)
    local out = {}
    for i = 2, #entries do
        RL.put_varint(out, entries[i].at - entries[i - 1].at)
        RL.put_varint(out, entries[i].units)
    end
    return table.concat(out)
end

function Log.encode(state, out)
    local entries = state.entries
    local oldest = entries[1]
    local pairs = pairs_bytes(entries)
    if state.legacy then
        RL.put_varint(out, #entries)
    else
        RL.put_byte(out, 0)
        RL.put_varint(out, #entries)
        RL.put_varint(out, total_of(entries))
    end
    RL.put_i64(out, oldest.at)
    RL.put_varint(out, oldest.units)
    if not state.legacy then
        RL.put_varint(out, entries[#entries].at - oldest.at)
        RL.put_varint(out, #pairs)
    end
    out[#out + 1] = pairs
end

-- Reads `count - 1` pairs after the oldest entry into `entries`; nil if one is not there
-- or breaks the rules (a gap of 0, no units before the newest).
local function read_pairs(r, entries, count)
    for n = 2, count do
        local gap = RL.read_positive(r)
        local units = gap and RL.read_varint(r)
        if units == nil or (units < 1 and n < count) then
            return nil
        end
        entries[n] = { at = RL.exact(entries[n - 1].at + gap), units = units }
    end
    return entries
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
    if count > 1 and units < 1 then
        return nil
    end
    local ends = r.pos + len
    local entries = read_pairs(r, { { at = at, units = units } }, count)
    if entries == nil or r.pos ~= ends or entries[count].at - at ~= span
        or total_of(entries) ~= total then
        return nil
    end
    return { entries = entries }
end

local function decode_plain(r)
    local count = RL.read_positive(r)
    local at = count and count <= MAX_ENTRIES and RL.read_i64(r)
    local units = at and RL.read_varint(r)
    if units == nil or (count > 1 and units < 1) then
        return nil
    end
    local entries = read_pairs(r, { { at = at, units = units } }, count)
    return entries and { entries = entries, legacy = true }
end

function Log.decode(r)
    if string.byte(r.s, r.pos) == 0 then
        r.pos = r.pos + 1
        return decode_header(r)
    end
    return decode_plain(r)
end

RL.add_algorithm(Log)
