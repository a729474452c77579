-- calendar.lua: calendar windows (day, week from Monday, month with an optional ANCHOR day,
-- year) in UTC, the one zone that needs no tz database (core/src/calendar.rs). A stored
-- calendar of another zone is read (its usage carries over) but never computed.

local DAY_MS = RL.DAY_MS

-- FNV-1a of "UTC": the zone's id in stored values.
local UTC_ID = 3228456573

local PERIODS = {
    day = { name = 'day', code = 1, nominal_ms = DAY_MS },
    week = { name = 'week', code = 2, nominal_ms = 7 * DAY_MS },
    month = { name = 'month', code = 3, nominal_ms = 31 * DAY_MS },
    year = { name = 'year', code = 4, nominal_ms = 366 * DAY_MS },
}
local BY_CODE = { PERIODS.day, PERIODS.week, PERIODS.month, PERIODS.year }

function RL.period_named(name)
    return PERIODS[string.lower(name)]
end

-- Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
local function days_from_civil(y, m, d)
    if m <= 2 then
        y = y - 1
    end
    local era = math.floor(y / 400)
    local yoe = y - era * 400
    local mp = (m + 9) % 12
    local doy = math.floor((153 * mp + 2) / 5) + d - 1
    local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
    return era * 146097 + doe - 719468
end

local function civil_from_days(z)
    z = z + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
        - math.floor(doe / 146096)) / 365)
    local y = yoe + era * 400
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp + 3
    if m > 12 then
        m = m - 12
    end
    if m <= 2 then
        y = y + 1
    end
    return y, m, d
end

local function days_in_month(y, m)
    if m == 12 then
        return days_from_civil(y + 1, 1, 1) - days_from_civil(y, 12, 1)
    end
    return days_from_civil(y, m + 1, 1) - days_from_civil(y, m, 1)
end

-- The day a month bills on: the anchor, or its last day when it is shorter.
local function billing_day(y, m, anchor)
    return days_from_civil(y, m, math.min(math.max(anchor, 1), days_in_month(y, m)))
end

-- The first day (since the epoch) of the period after the one `today` falls in.
local function next_period(today, period, anchor)
    if period == 'day' then
        return today + 1
    elseif period == 'week' then
        return today + 7 - (today + 3) % 7
    end
    local y, m = civil_from_days(today)
    if period == 'year' then
        return days_from_civil(y + 1, 1, 1)
    end
    local this_month = billing_day(y, m, anchor)
    if today < this_month then
        return this_month
    end
    if m == 12 then
        return billing_day(y + 1, 1, anchor)
    end
    return billing_day(y, m + 1, anchor)
end

local function make_calendar(period, anchor, zone_id)
    local calendar = {
        period = period,
        anchor = anchor,
        code = period.code + anchor * 8 + zone_id * 256,
        nominal_ms = period.nominal_ms,
    }
    function calendar.period_end(now)
        if zone_id ~= UTC_ID then
            RL.fail(RL.ERR.tz)
        end
        return next_period(math.floor(now / DAY_MS), period.name, anchor) * DAY_MS
    end
    return calendar
end

-- The UTC calendar of `period` (a PERIODS entry), `anchor` 0 or 2..31 for a month.
function RL.calendar_of(period, anchor)
    return make_calendar(period, anchor, UTC_ID)
end

-- The calendar a stored code stands for (any zone), or nil.
function RL.calendar_from_code(code)
    local period = BY_CODE[code % 8]
    local anchor = math.floor(code / 8) % 32
    local zone_id = math.floor(code / 256)
    if period == nil or zone_id > 4294967295 or (anchor ~= 0 and (period.name ~= 'month' or anchor < 2)) then
        return nil
    end
    return make_calendar(period, anchor, zone_id)
end
