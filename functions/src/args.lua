-- args.lua: the module's argument grammar (core/src/args.rs) and its error texts:
--   limit window [limit window ...] [ALGO name] [BURST b] [COST n] [TZ zone] [ANCHOR day]
-- The module's configs cannot be read from Lua: their defaults apply (ALGO fixed, windows
-- up to 366d, ALGO log limits up to 10000).

local SECOND_MS = 1000
local DAY_MS = 86400 * SECOND_MS
RL.DAY_MS = DAY_MS
local MAX_WINDOW_MS = 366 * DAY_MS
local LARGEST_WINDOW_MS = 10 * MAX_WINDOW_MS
local MAX_LOG_LIMIT = 10000

local UNITS = { [''] = SECOND_MS, S = SECOND_MS, MS = 1, M = 60 * SECOND_MS, H = 3600 * SECOND_MS,
    D = DAY_MS }

RL.ERR = {
    limit = 'ERR limit must be a positive integer',
    window_malformed = 'ERR window must be a positive integer of seconds or an integer with a '
        .. 'unit (ms, s, m, h, d), e.g. 250ms or 5m, or a calendar period: day, week, month or year',
    window_unit = 'ERR window has an unknown unit: use ms, s, m, h or d (a week is 7d), or a '
        .. 'calendar period: day, week, month or year',
    window_short = 'ERR window must be at least 1ms',
    window_max = 'ERR window must be at most 366d (ratelimit.max-window-ms)',
    missing_window = 'ERR each limit needs a window: limit window [limit window ...]',
    tiers = 'ERR at most 8 tiers per key',
    cost = 'ERR COST must be a positive integer',
    burst = 'ERR BURST must be a positive integer',
    burst_na = 'ERR BURST applies to ALGO token or gcra with a single tier',
    algo = 'ERR ALGO must be one of fixed, sliding, log, token, gcra',
    log_limit = 'ERR ALGO log allows a limit of at most 10000',
    log_library = 'ERR ALGO log allows a limit of at most 1000 in the functions library (a call '
        .. 'reads the whole log): use the module, or ALGO sliding',
    anchor = 'ERR ANCHOR must be a day of the month from 1 to 31',
    tz_without = 'ERR TZ applies to calendar windows: day, week, month or year',
    anchor_without = 'ERR ANCHOR applies to a month window',
    policy = 'ERR POLICY needs the module: named policies live in its RDB data, which the '
        .. 'functions library cannot read; pass the rule (limit window ...) instead',
    tz = 'ERR TZ other than UTC needs the module: the functions library has no time zone '
        .. 'database (use TZ UTC, or the module)',
}

local OPTIONS = { ALGO = true, BURST = true, COST = true, MODE = true, TZ = true, ANCHOR = true }

local function is_option(arg)
    return arg ~= nil and string.find(arg, '^%a') ~= nil and OPTIONS[string.upper(arg)] == true
end

local function starts_with_letter(arg)
    return string.find(arg, '^%a') ~= nil
end

-- A duration in ms, or the error text.
local function parse_duration_ms(text)
    local digits, unit = string.match(text, '^(%d+)(.*)$')
    if digits == nil then
        return nil, RL.ERR.window_malformed
    end
    if not string.find(unit, '^%a*$') then
        return nil, RL.ERR.window_malformed
    end
    local unit_ms = UNITS[string.upper(unit)]
    if unit_ms == nil then
        return nil, RL.ERR.window_unit
    end
    -- Approximate for huge amounts, exact for every amount that passes the bound.
    local total = tonumber(digits) * unit_ms
    if total == 0 then
        return nil, RL.ERR.window_short
    end
    if total > LARGEST_WINDOW_MS then
        return nil, RL.ERR.window_max
    end
    return total
end

-- The tiers: a list of quotas { limit, window, burst, period }, `i` the next argument.
local function parse_tiers(args, i)
    local tiers = {}
    local any_calendar = false
    while args[i] ~= nil and not is_option(args[i]) and (#tiers == 0 or not starts_with_letter(args[i])) do
        local limit = RL.parse_positive(args[i])
        if limit == nil then
            RL.fail(RL.ERR.limit)
        end
        local window = args[i + 1]
        if window == nil or is_option(window) then
            RL.fail(RL.ERR.missing_window)
        end
        i = i + 2
        local quota
        local period = starts_with_letter(window) and RL.period_named(window)
        if period then
            quota = { limit = limit, window = period.nominal_ms, burst = limit, period = period }
            any_calendar = true
        else
            local ms, err = parse_duration_ms(window)
            if ms == nil then
                RL.fail(err)
            end
            quota = { limit = limit, window = ms, burst = limit }
        end
        if quota.window > MAX_WINDOW_MS then
            RL.fail(RL.ERR.window_max)
        end
        if #tiers == RL.MAX_TIERS then
            RL.fail(RL.ERR.tiers)
        end
        tiers[#tiers + 1] = quota
    end
    if #tiers == 0 then
        RL.fail(RL.ERR.limit)
    end
    return tiers, any_calendar, i
end

local function set_once(options, name, value, err)
    if value == nil then
        RL.fail(err)
    end
    if options[name] ~= nil then
        RL.fail('ERR ' .. name .. ' is given more than once')
    end
    options[name] = value
end

local function parse_options(args, i)
    local o = {}
    while args[i] ~= nil do
        local option = string.upper(args[i])
        local value = args[i + 1]
        if option == 'ALGO' then
            set_once(o, 'ALGO', value and RL.ALGO_BY_NAME[string.lower(value)], RL.ERR.algo)
        elseif option == 'BURST' then
            set_once(o, 'BURST', RL.parse_positive(value), RL.ERR.burst)
        elseif option == 'COST' then
            set_once(o, 'COST', RL.parse_positive(value), RL.ERR.cost)
        elseif option == 'TZ' then
            set_once(o, 'TZ', RL.zone_named(value), RL.ERR.tz)
        elseif option == 'ANCHOR' then
            local day = RL.parse_positive(value)
            if day ~= nil and day > 31 then
                day = nil
            end
            set_once(o, 'ANCHOR', day, RL.ERR.anchor)
        else
            RL.fail("ERR unknown option '" .. RL.excerpt(args[i])
                .. "' (expected ALGO, BURST, COST, TZ or ANCHOR)")
        end
        i = i + 2
    end
    return o
end

-- Gives the calendar windows their anchor and checks the options apply (UTC only here);
-- returns the algorithm, which is fixed for a rule with a calendar window.
local function calendars(tiers, o)
    local has_calendar, has_month = false, false
    for _, q in ipairs(tiers) do
        if q.period then
            has_calendar = true
            has_month = has_month or q.period.name == 'month'
        end
    end
    if not has_calendar then
        if o.TZ then
            RL.fail(RL.ERR.tz_without)
        elseif o.ANCHOR then
            RL.fail(RL.ERR.anchor_without)
        end
        return o.ALGO
    end
    if o.ANCHOR and not has_month then
        RL.fail(RL.ERR.anchor_without)
    end
    if o.ALGO and o.ALGO.name ~= 'fixed' then
        RL.fail('ERR calendar windows (day, week, month, year) count as ALGO fixed, not ALGO '
            .. o.ALGO.name)
    end
    local anchor = 0
    if o.ANCHOR and o.ANCHOR > 1 then
        anchor = o.ANCHOR
    end
    for _, q in ipairs(tiers) do
        if q.period then
            local tier_anchor = 0
            if q.period.name == 'month' then
                tier_anchor = anchor
            end
            q.calendar = RL.calendar_of(q.period, tier_anchor)
        end
    end
    return RL.ALGO_BY_NAME.fixed
end

-- The module's reply to a call with too few arguments (RedisModule_WrongArity's text).
function RL.arity(command)
    RL.fail("ERR wrong number of arguments for '" .. command .. "' command")
end

-- Rules already parsed, by their arguments: a call repeats the same few rules, and parsing
-- is pure (no config is read), so a rule is parsed once. Never changed once made (but for
-- the rate a bucket keeps on its quota); the cache is emptied when it holds 1000 rules,
-- and long arguments are not kept, so it stays small.
local parsed, cached = {}, 0

local function parse_uncached(command, args, first)
    if args[first] ~= nil and RL.is_word(args[first], 'POLICY') then
        RL.fail(RL.ERR.policy)
    end
    if args[first] == nil or args[first + 1] == nil then
        RL.arity(command)
    end
    local tiers, any_calendar, i = parse_tiers(args, first)
    local o = parse_options(args, i)
    local algo = o.ALGO
    if any_calendar or o.TZ or o.ANCHOR then
        algo = calendars(tiers, o)
    end
    algo = algo or RL.ALGO_BY_NAME.fixed
    if o.BURST then
        if not algo.has_burst or #tiers ~= 1 then
            RL.fail(RL.ERR.burst_na)
        end
        tiers[1].burst = o.BURST
    end
    if algo.name == 'log' then
        for _, q in ipairs(tiers) do
            if q.limit > MAX_LOG_LIMIT then
                RL.fail(RL.ERR.log_limit)
            elseif q.limit > RL.LIBRARY_LOG_LIMIT then
                RL.fail(RL.ERR.log_library)
            end
        end
    end
    return { algo = algo, tiers = tiers, cost = o.COST or 1 }
end

-- The zone `TZ` names: only UTC, which needs no tz database; any other name is refused.
function RL.zone_named(name)
    if RL.is_word(name, 'UTC') then
        return 'UTC'
    end
    return nil
end

-- Parses the rule in args[first..] of `command` (its name, for the arity error): returns
-- { algo, tiers, cost }, which the caller must not change. `POLICY name` is refused.
function RL.parse_limits(command, args, first)
    -- The count tells ["5", "1m"] from ["5\01m"]: a rule that parses has no NUL in it.
    local key = (#args - first) .. '\0' .. table.concat(args, '\0', first)
    local rule = parsed[key]
    if rule == nil then
        rule = parse_uncached(command, args, first)
        if #key > 256 then
            -- No rule that parses is this long but with padding (leading zeros): such
            -- arguments are parsed every time rather than kept.
            return rule
        end
        if cached >= 1000 then
            parsed, cached = {}, 0
        end
        parsed[key] = rule
        cached = cached + 1
    end
    return rule
end
