-- lease_layout.lua: a key's leases byte for byte as the module stores them
-- (core/src/lease/layout.rs), so a lease key written by one backend is read and continued
-- by the other:
--   0x02                    LEASE_V1: never a digit, 0x01 or 0xF8.., so no RL.HIT state
--                           is read as leases nor the reverse
--   varint tier_len         0: no tier state
--   tier_len bytes          the tiers' state, as RL.HIT stores it in a key of its own
--   i64 LE tier_expires     that state's absolute expiry (only when tier_len > 0)
--   varint count            leases, at most 10000
--   count times: u8 tag (0x80: 16 id bytes follow; 1..64: that many), id, i64 LE end
-- A lease is held while now < end. A write keeps only the held leases, in the order they
-- were taken; the key expires with its last lease or its tier state, whichever ends
-- later, and is deleted when it has neither.
--
-- A key holds up to 10000 leases and every call reads them all, so this file reads and
-- writes the value in place: one pass that notes where each record starts and when it
-- ends (no table per record), and writes that copy runs of kept records as they are. The
-- string functions are taken into locals inside each function: the globals are not there
-- while FUNCTION LOAD runs this file.

local LEASE_V1 = 2
local RAW_ID = 128
local MAX_LEASES = 10000
local MAX_ID_LEN = 64
-- 2^53: every integer below it in size is exact in a double.
local EXACT_LIMIT = 9007199254740992

local L = {}
RL.lease = L
L.MAX_ID_LEN = MAX_ID_LEN

-- An id as a record stores it: tag, then bytes. 32 lowercase hex digits are the 16 bytes
-- they spell (as a generated id), anything else is kept as given.
function L.stored_id(id)
    local byte, sub, find, char = string.byte, string.sub, string.find, string.char
    if #id == 32 and find(id, '^[0-9a-f]+$') then
        local raw = string.gsub(id, '%x%x', function(pair)
            return char(tonumber(pair, 16))
        end)
        return char(RAW_ID) .. raw
    end
    return char(#id) .. id
end

-- The id as replies show it.
function L.display_id(stored)
    local byte, sub, find, char = string.byte, string.sub, string.find, string.char
    if byte(stored, 1) == RAW_ID then
        return (string.gsub(sub(stored, 2), '.', function(c)
            return string.format('%02x', byte(c))
        end))
    end
    return sub(stored, 2)
end

-- The varint at `pos` in its shortest form (the one the module writes) and the position
-- after it; nil for any other. A value too large to be exact is refused by its caller's
-- bound (a length or a count), as the module refuses it.
local function varint_at(s, pos)
    local byte, sub, find, char = string.byte, string.sub, string.find, string.char
    local value, scale = 0, 1
    for i = 0, 9 do
        local b = byte(s, pos + i)
        if b == nil or (i > 0 and b == 0) then
            return nil
        end
        value = value + (b % 128) * scale
        if b < 128 then
            return value, pos + i + 1
        end
        scale = scale * 128
    end
    return nil
end

-- Whether a stored time is beyond what a double holds exactly (2^53 either way). No backend
-- writes one; a value that holds one is refused with the library's error for numbers it
-- cannot hold, once it has been read whole (so a value that is not leases at all still
-- gets the module's error for that).
local function inexact(ms)
    return ms >= EXACT_LIMIT or ms <= -EXACT_LIMIT
end

-- The tier state at `pos`: { bytes, ends } or false for none, and the position after it.
local function tier_at(s, pos)
    local byte, sub, find, char = string.byte, string.sub, string.find, string.char
    local len, at = varint_at(s, pos)
    if len == nil or at + len - 1 > #s then
        return nil
    end
    if len == 0 then
        return false, at
    end
    if at + len + 7 > #s then
        return nil
    end
    local ends = struct.unpack('<i8', s, at + len)
    return { bytes = sub(s, at, at + len - 1), ends = ends }, at + len + 8
end

-- Reads the value `s` at `now`, looking for the held lease `want` (a stored id, or nil):
-- { s, tier, count, starts, ends, held, earliest, latest, at }, `starts[i]` where record i
-- begins (starts[count + 1] is past the end), `at` the index of the lease `want`. nil for
-- anything the module would not read as leases.
-- `want` for a check of the layout only (RL.is_lease): no lease is looked for, and a time
-- beyond 2^53 is no error.
L.ANY = {}

function L.read(s, now, want)
    local byte, sub, find, unpack_i64 = string.byte, string.sub, string.find, struct.unpack
    if byte(s, 1) ~= LEASE_V1 then
        return nil
    end
    local tier, pos = tier_at(s, 2)
    local count
    if tier ~= nil then
        count, pos = varint_at(s, pos)
    end
    if count == nil or count > MAX_LEASES then
        return nil
    end
    local v = { s = s, tier = tier or nil, count = count, starts = {}, ends = {}, held = 0 }
    local starts, ends, size = v.starts, v.ends, #s
    local held, earliest, latest, lenient = 0, nil, nil, false
    local beyond = tier and inexact(tier.ends)
    if want == L.ANY then
        want = nil
        lenient = true
    end
    -- Where `want` occurs next (a plain search in C): a record is that lease when it
    -- starts there, its tag being the id's length.
    local seen = want and find(s, want, pos, true)
    for i = 1, count do
        local tag = byte(s, pos)
        local len = tag
        if tag == RAW_ID then
            len = 16
        elseif tag == nil or tag < 1 or tag > MAX_ID_LEN then
            return nil
        elseif tag == 32 and find(sub(s, pos + 1, pos + 32), '^[0-9a-f]+$') then
            -- Not canonical: 32 lowercase hex digits are always stored as their 16 bytes.
            return nil
        end
        -- The end: 8 bytes LE, signed, read in C (struct is Redis's and Valkey's), which
        -- rounds beyond 2^53 (see `inexact`).
        local at = pos + len + 1
        if at + 7 > size then
            return nil
        end
        local e = unpack_i64('<i8', s, at)
        beyond = beyond or inexact(e)
        starts[i], ends[i] = pos, e
        if e > now then
            held = held + 1
            if earliest == nil or e < earliest then
                earliest = e
            end
            if latest == nil or e > latest then
                latest = e
            end
            while seen and seen < pos do
                seen = find(s, want, pos, true)
            end
            if seen == pos and v.at == nil then
                v.at = i
            end
        end
        pos = at + 8
    end
    if pos ~= size + 1 then
        return nil
    end
    if beyond and not lenient then
        RL.too_large()
    end
    starts[count + 1] = pos
    v.held, v.earliest, v.latest = held, earliest, latest
    return v
end

-- Whether `s` is a whole lease value (RL.RESET deletes them; RL.HIT names them).
function RL.is_lease(s)
    return L.read(s, 0, L.ANY) ~= nil
end

-- Whether a lease held at `now` has the stored id `id`.
function L.holds(v, now, id)
    if v == nil or v.count == 0 then
        return false
    end
    local starts, ends = v.starts, v.ends
    -- Each place the id's bytes occur (a plain search in C) is that lease if a record
    -- starts there (found by bisection), its tag being the id's length.
    local at = string.find(v.s, id, starts[1], true)
    while at ~= nil do
        local low, high = 1, v.count
        while low < high do
            local middle = math.floor((low + high + 1) / 2)
            if starts[middle] <= at then
                low = middle
            else
                high = middle - 1
            end
        end
        if starts[low] == at and ends[low] > now then
            return true
        end
        at = string.find(v.s, id, at + 1, true)
    end
    return false
end

-- The ends of the held leases, earliest first.
function L.held_ends(v, now)
    local out = {}
    for i = 1, (v and v.count or 0) do
        if v.ends[i] > now then
            out[#out + 1] = v.ends[i]
        end
    end
    table.sort(out)
    return out
end

-- Appends `value` as 8 little-endian bytes to the list of strings `out`.
local function put_i64(out, value)
    RL.put_i64(out, value)
end

-- L.rebuild when every record is held: the records are copied in at most two pieces around
-- the one that changes, whatever their number.
local function whole(v, out, tier, edit)
    local sub = string.sub
    local s, starts, ends, n = v.s, v.starts, v.ends, v.count
    local first, stop = starts[1], starts[n + 1] - 1
    local count, last = n, v.latest
    if edit.remove ~= nil then
        local i = edit.remove
        count = n - 1
        RL.put_varint(out, count)
        out[#out + 1] = sub(s, first, starts[i] - 1)
        out[#out + 1] = sub(s, starts[i + 1], stop)
        if ends[i] == last then
            last = nil
            for j = 1, n do
                if j ~= i and (last == nil or ends[j] > last) then
                    last = ends[j]
                end
            end
        end
    else
        if edit.id ~= nil then
            count = n + 1
        end
        RL.put_varint(out, count)
        if edit.renew ~= nil then
            local i = edit.renew
            out[#out + 1] = sub(s, first, starts[i + 1] - 9)
            RL.put_i64(out, edit.ends)
            out[#out + 1] = sub(s, starts[i + 1], stop)
        else
            out[#out + 1] = sub(s, first, stop)
        end
        if edit.id ~= nil then
            out[#out + 1] = edit.id
            RL.put_i64(out, edit.ends)
        end
        if edit.ends ~= nil and edit.ends > last then
            last = edit.ends
        end
    end
    if tier ~= nil and (last == nil or tier.ends > last) then
        last = tier.ends
    end
    return table.concat(out), last
end

-- The value holding `tier` (nil: none) and the leases of `v` (nil: no key) held at `now`,
-- changed by `edit` ({ remove = i } | { renew = i, ends = ms } | { id = stored, ends = ms }
-- appended | {}); and the key's end: the later of the last lease's and the tier's, nil
-- when there is neither.
function L.rebuild(v, now, tier, edit)
    local byte, sub, find, char = string.byte, string.sub, string.find, string.char
    local out = { char(LEASE_V1) }
    if tier ~= nil and #tier.bytes > 0 then
        RL.put_varint(out, #tier.bytes)
        out[#out + 1] = tier.bytes
        put_i64(out, tier.ends)
    else
        RL.put_varint(out, 0)
        tier = nil
    end
    if v ~= nil and v.held == v.count and v.count > 0 then
        return whole(v, out, tier, edit)
    end
    local count_at = #out + 1
    out[count_at] = ''
    local count, last = 0, tier and tier.ends
    -- Runs of kept records are copied as they are.
    local run_start, run_stop
    local function flush()
        if run_start ~= nil then
            out[#out + 1] = sub(v.s, run_start, run_stop)
            run_start = nil
        end
    end
    for i = 1, (v and v.count or 0) do
        local e = v.ends[i]
        if e > now and i ~= edit.remove then
            local start, stop = v.starts[i], v.starts[i + 1] - 1
            if i == edit.renew then
                flush()
                out[#out + 1] = sub(v.s, start, stop - 8)
                e = edit.ends
                put_i64(out, e)
            elseif run_start ~= nil and run_stop + 1 == start then
                run_stop = stop
            else
                flush()
                run_start, run_stop = start, stop
            end
            count = count + 1
            if last == nil or e > last then
                last = e
            end
        else
            flush()
        end
    end
    flush()
    if edit.id ~= nil then
        out[#out + 1] = edit.id
        put_i64(out, edit.ends)
        count = count + 1
        if last == nil or edit.ends > last then
            last = edit.ends
        end
    end
    local head = {}
    RL.put_varint(head, count)
    out[count_at] = head[1]
    return table.concat(out), last
end

-- Writes what `L.rebuild` made: SET ... PXAT its end, or DEL when it has none.
function L.store(key, value, last)
    if last == nil then
        redis.call('DEL', key)
    else
        redis.call('SET', key, value, 'PXAT', last)
    end
end
