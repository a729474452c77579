-- common.lua: what every other file uses: the shared table, errors, the clock, integer
-- bounds and the byte codec of stored values (LEB128 varints, 8-byte little-endian times).
--
-- Lua numbers are doubles: integers are exact up to 2^53 - 1, so every number the library
-- accepts or reads is bounded to that, and anything larger is refused with an error
-- instead of being rounded.

local RL = {}

-- The largest integer a double holds exactly.
RL.MAX_EXACT = 9007199254740991
-- The largest i64, the module's bound, as the decimal text arguments are compared with.
RL.I64_MAX_TEXT = '9223372036854775807'
-- retry_after_ms when waiting can never help.
RL.NEVER = -1

RL.TOO_LARGE = 'ERR the functions library handles values up to 9007199254740991: '
    .. 'use the module for larger limits, windows, costs or stored counts'

-- Raises an error reply; the function's guard returns it to the client as it is.
function RL.fail(message)
    error({ err = message }, 0)
end

-- The text of an error caught by pcall: the server hands it over as a string, or (on a
-- server that keeps error tables) as { err = text }.
function RL.error_text(caught)
    if type(caught) == 'table' and caught.err ~= nil then
        return caught.err
    end
    return tostring(caught)
end

-- Raises the error for a number the library cannot hold exactly.
function RL.too_large()
    RL.fail(RL.TOO_LARGE)
end

-- `n` if it is an exact integer (it is below 2^53), else the error.
function RL.exact(n)
    if n > RL.MAX_EXACT or n < -RL.MAX_EXACT then
        RL.too_large()
    end
    return n
end

-- The server's clock in ms, read once per call (effects replication makes that safe).
function RL.now_ms()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- Integer division rounded down, and its ceiling, for exact integers.
function RL.floor_div(a, b)
    return math.floor(a / b)
end

function RL.ceil_div(a, b)
    local q = math.floor(a / b)
    if q * b < a then
        q = q + 1
    end
    return q
end

-- a % b, never negative for b > 0 (Lua's % is already the floor modulo).
function RL.rem_euclid(a, b)
    return a % b
end

-- The decimal text `text` as an integer >= 0 when it is digits only; nil otherwise. A
-- value above i64 (the module's bound too) is nil; one between 2^53 and i64 is refused.
function RL.parse_digits(text)
    if text == nil or not string.find(text, '^%d+$') then
        return nil
    end
    if #text <= 15 then
        -- Below 10^15 < 2^53: exact, and the common case, without the checks below.
        return tonumber(text)
    end
    local digits = string.gsub(text, '^0+', '')
    if #digits > #RL.I64_MAX_TEXT or (#digits == #RL.I64_MAX_TEXT and digits > RL.I64_MAX_TEXT) then
        return nil
    end
    local n = tonumber(text)
    if n > RL.MAX_EXACT then
        RL.too_large()
    end
    return n
end

-- An integer >= 1 in plain decimal digits, or nil.
function RL.parse_positive(text)
    local n = RL.parse_digits(text)
    if n == nil or n < 1 then
        return nil
    end
    return n
end

-- ASCII case-insensitive equality of an argument with an upper-case word.
function RL.is_word(arg, word)
    return arg ~= nil and #arg == #word and string.upper(arg) == word
end

-- At most 32 bytes of a user argument, anything but printable ASCII replaced, as the
-- module quotes arguments in its errors.
function RL.excerpt(arg)
    local head = string.sub(arg, 1, 32)
    local text = string.gsub(head, '[^%w%p]', '?')
    if #arg > 32 then
        text = text .. '...'
    end
    return text
end

-- A cursor over a stored value: RL.reader(s), then the read functions below. Each returns
-- nil on malformed or truncated input (a value this library did not write).
function RL.reader(bytes)
    return { s = bytes, pos = 1 }
end

function RL.read_byte(r)
    local b = string.byte(r.s, r.pos)
    if b == nil then
        return nil
    end
    r.pos = r.pos + 1
    return b
end

function RL.is_empty(r)
    return r.pos > #r.s
end

-- A varint of 0..=i64::MAX. Above that it is nil (not a state), as for the module; from
-- 2^53 up it is the error for a value the library cannot hold.
function RL.read_varint(r)
    local s, pos = r.s, r.pos
    local value, scale = 0, 1
    for shift = 0, 63, 7 do
        local b = string.byte(s, pos)
        if b == nil then
            return nil
        end
        pos = pos + 1
        local bits = b % 128
        if shift == 63 and bits > 0 then
            -- Bit 63 set: above i64::MAX (or more bits lost): no state.
            return nil
        end
        value = value + bits * scale
        scale = scale * 128
        if b < 128 then
            r.pos = pos
            return RL.exact(value)
        end
    end
    return nil
end

function RL.read_positive(r)
    local v = RL.read_varint(r)
    if v == nil or v < 1 then
        return nil
    end
    return v
end

-- 8 little-endian bytes as two 32-bit halves: the high one signed, the low one not.
function RL.read_i64_parts(r)
    if r.pos + 7 > #r.s then
        return nil
    end
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(r.s, r.pos, r.pos + 7)
    r.pos = r.pos + 8
    local lo = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    local hi = b5 + b6 * 256 + b7 * 65536 + b8 * 16777216
    if hi >= 2147483648 then
        hi = hi - 4294967296
    end
    return hi, lo
end

-- 8 little-endian bytes, a signed time in ms; beyond 2^53 either way is refused.
function RL.read_i64(r)
    local hi, lo = RL.read_i64_parts(r)
    if hi == nil then
        return nil
    end
    if hi >= 2097152 or hi < -2097152 then
        RL.too_large()
    end
    return RL.exact(hi * 4294967296 + lo)
end

-- Appends `value` (>= 0) as a varint to the list of strings `out`: its bytes are made
-- in one string.char, with no table, for it runs several times per stored tier.
function RL.put_varint(out, value)
    if value < 128 then
        out[#out + 1] = string.char(value)
        return
    end
    local b1 = value % 128
    value = (value - b1) / 128
    if value < 128 then
        out[#out + 1] = string.char(b1 + 128, value)
        return
    end
    local b2 = value % 128
    value = (value - b2) / 128
    if value < 128 then
        out[#out + 1] = string.char(b1 + 128, b2 + 128, value)
        return
    end
    local bytes = { b1 + 128, b2 + 128 }
    repeat
        local low = value % 128
        value = (value - low) / 128
        if value > 0 then
            low = low + 128
        end
        bytes[#bytes + 1] = low
    until value == 0
    out[#out + 1] = string.char(unpack(bytes))
end

-- Appends hi * 2^32 + lo as 8 little-endian bytes (hi signed, 0 <= lo < 2^32).
function RL.put_i64_parts(out, hi, lo)
    if hi < 0 then
        hi = hi + 4294967296
    end
    out[#out + 1] = string.char(lo % 256, math.floor(lo / 256) % 256, math.floor(lo / 65536) % 256,
        math.floor(lo / 16777216) % 256, hi % 256, math.floor(hi / 256) % 256,
        math.floor(hi / 65536) % 256, math.floor(hi / 16777216) % 256)
end

-- Appends `value` (an exact integer) as 8 little-endian bytes.
function RL.put_i64(out, value)
    local lo = value % 4294967296
    RL.put_i64_parts(out, (value - lo) / 4294967296, lo)
end

function RL.put_byte(out, b)
    out[#out + 1] = string.char(b)
end
