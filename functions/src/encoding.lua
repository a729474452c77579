-- encoding.lua: the module's stored forms, byte for byte (see core/src/encoding.rs), so a
-- key written by one backend is read by the other:
--   plain count  decimal digits, the window's end in the key's expiry (single fixed tier);
--   short        tag 0xF8 | gcra << 2 | has_number << 1 | has_burst, varints limit, window
--                (whole seconds s * 2 + 1, else ms * 2), [burst], [short number];
--   tiers        0x01 (0x02 with calendar codes), algorithm id, count, then per tier varints
--                limit, window_ms, burst, [calendar code], and the algorithm's state.

RL.FORMAT_V1 = 1
RL.FORMAT_V2 = 2
RL.MAX_TIERS = 8
local SHORT_TAG = 0xF8

-- Algorithms by stored id and by name; each algorithm file adds itself.
RL.ALGO_BY_ID = {}
RL.ALGO_BY_NAME = {}
RL.ALGO_NAMES = { 'fixed', 'sliding', 'log', 'token', 'gcra' }

function RL.add_algorithm(algo)
    RL.ALGO_BY_ID[algo.id] = algo
    RL.ALGO_BY_NAME[algo.name] = algo
end

-- A canonical decimal count >= 1 (no sign, no leading zero, within i64), or nil.
function RL.decode_count(bytes)
    if #bytes == 0 or #bytes > 19 or string.sub(bytes, 1, 1) == '0' then
        return nil
    end
    return RL.parse_digits(bytes)
end

local function decode_short(tag, r)
    local limit = RL.read_positive(r)
    local window = limit and RL.read_positive(r)
    if window == nil then
        return nil
    end
    local window_ms
    if window % 2 == 1 then
        window_ms = RL.exact((window - 1) / 2 * 1000)
    else
        window_ms = window / 2
    end
    local burst = limit
    if tag % 2 == 1 then
        burst = RL.read_positive(r)
    end
    local short = 0
    if math.floor(tag / 2) % 2 == 1 then
        short = RL.read_positive(r)
    end
    if burst == nil or short == nil or window_ms < 1 or not RL.is_empty(r) then
        return nil
    end
    local id = 4
    if math.floor(tag / 4) % 2 == 1 then
        id = 5
    end
    return {
        form = 'short',
        algorithm = id,
        quota = { limit = limit, window = window_ms, burst = burst },
        short = short,
    }
end

-- What form `bytes` are in: a table with `form` = 'count' | 'short' | 'tiers', or nil for
-- a value the module or this library did not write.
function RL.classify(bytes)
    local first = string.byte(bytes, 1)
    if first == nil then
        return nil
    end
    if first >= 0x31 and first <= 0x39 then
        local count = RL.decode_count(bytes)
        return count and { form = 'count', count = count }
    end
    if first == RL.FORMAT_V1 or first == RL.FORMAT_V2 then
        local r = RL.reader(bytes)
        r.pos = 2
        local algorithm = RL.read_byte(r)
        local count = RL.read_byte(r)
        if count == nil or count < 1 or count > RL.MAX_TIERS then
            return nil
        end
        return { form = 'tiers', algorithm = algorithm, count = count, reader = r,
            calendars = first == RL.FORMAT_V2 }
    end
    if first >= SHORT_TAG then
        local r = RL.reader(bytes)
        r.pos = 2
        return decode_short(first, r)
    end
    return nil
end

-- Writes one tier of a bucket algorithm in the short form.
function RL.encode_short(algo, quota, short)
    local tag = SHORT_TAG
    if algo.id == 5 then
        tag = tag + 4
    end
    if quota.burst ~= quota.limit then
        tag = tag + 1
    end
    if short ~= 0 then
        tag = tag + 2
    end
    local out = {}
    RL.put_byte(out, tag)
    RL.put_varint(out, quota.limit)
    if quota.window % 1000 == 0 then
        RL.put_varint(out, quota.window / 1000 * 2 + 1)
    else
        RL.put_varint(out, quota.window * 2)
    end
    if quota.burst ~= quota.limit then
        RL.put_varint(out, quota.burst)
    end
    if short ~= 0 then
        RL.put_varint(out, short)
    end
    return table.concat(out)
end

-- Reads the tiers of `algo` from a classified tiers form; nil if they are not exactly that.
function RL.decode_tiers(algo, form)
    local r = form.reader
    r.pos = 4
    local tiers = {}
    local any_calendar = false
    for i = 1, form.count do
        local limit = RL.read_positive(r)
        local window = limit and RL.read_positive(r)
        local burst = window and RL.read_positive(r)
        if burst == nil then
            return nil
        end
        local quota = { limit = limit, window = window, burst = burst }
        if form.calendars then
            local code = RL.read_varint(r)
            if code == nil then
                return nil
            end
            if code ~= 0 then
                local calendar = RL.calendar_from_code(code)
                if calendar == nil or calendar.nominal_ms ~= window then
                    return nil
                end
                quota.calendar = calendar
                any_calendar = true
            end
        end
        local state = algo.decode(r)
        if state == nil then
            return nil
        end
        tiers[i] = { quota = quota, state = state }
    end
    if not RL.is_empty(r) or any_calendar ~= form.calendars then
        return nil
    end
    return tiers
end

-- Writes tiers of `algo` (quotas and states, pairwise) in the tiers form.
function RL.encode_tiers(algo, quotas, states)
    local calendars = false
    for _, quota in ipairs(quotas) do
        if quota.calendar then
            calendars = true
        end
    end
    local out = {}
    if calendars then
        RL.put_byte(out, RL.FORMAT_V2)
    else
        RL.put_byte(out, RL.FORMAT_V1)
    end
    RL.put_byte(out, algo.id)
    RL.put_byte(out, #quotas)
    for i, quota in ipairs(quotas) do
        RL.put_varint(out, quota.limit)
        RL.put_varint(out, quota.window)
        RL.put_varint(out, quota.burst)
        if calendars then
            RL.put_varint(out, quota.calendar and quota.calendar.code or 0)
        end
        algo.encode(states[i], out)
    end
    return table.concat(out)
end
