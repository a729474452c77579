-- bucket.lua: GCRA and the token bucket, one arithmetic (core/src/bucket.rs). The state is
-- the theoretical arrival time (TAT) in ns since the epoch, which no double holds exactly
-- (about 1.7e18), so it is kept as { ms, ns } (TAT = ms * 10^6 + ns, 0 <= ns < 10^6).
--
-- The module computes in ticks of 1/L ns (L the limit), so that the interval T = window / L
-- is exact. Here a time in ticks is a pair { ms, t }: whole ms and the ticks below the ms,
-- 0 <= t < P = L * 10^6. Every product stays below 2^53 when (burst + 1) * window (ms) + L
-- does and P * 2 does; a rule beyond that is refused (RL.too_large).

local NS_PER_MS = 1000000

local function gcd(a, b)
    while b ~= 0 do
        a, b = b, a % b
    end
    return a
end

-- Tick times and durations: { ms, t }.
local function norm(ms, t, p)
    if t >= p then
        return { ms = ms + 1, t = t - p }
    elseif t < 0 then
        return { ms = ms - 1, t = t + p }
    end
    return { ms = ms, t = t }
end

local function add(a, b, p)
    return norm(a.ms + b.ms, a.t + b.t, p)
end

local function sub(a, b, p)
    return norm(a.ms - b.ms, a.t - b.t, p)
end

local function less_eq(a, b)
    return a.ms < b.ms or (a.ms == b.ms and a.t <= b.t)
end

local function positive(a)
    return a.ms > 0 or (a.ms == 0 and a.t > 0)
end

local ZERO = { ms = 0, t = 0 }

-- The quota in ticks.
local function rate_of(quota)
    local l, w, b = quota.limit, quota.window, quota.burst
    if (b + 1) * w + l > RL.MAX_EXACT or l * NS_PER_MS * 2 > RL.MAX_EXACT then
        RL.too_large()
    end
    local r = { l = l, w = w, b = b, p = l * NS_PER_MS, grid = gcd(l, w) * NS_PER_MS }
    -- `units` intervals as a duration: units * W ms / L.
    function r.units(units)
        local x = RL.mul(units, w)
        return { ms = RL.div_floor(x, l), t = (x % l) * NS_PER_MS }
    end
    r.tolerance = r.units(b)
    return r
end

-- The TAT a stored state stands for, in ticks: the grid point within the ns rounded up.
local function load(r, state)
    local t = state.ns * r.l
    local on_grid = t - t % r.grid
    if t - on_grid < r.l then
        t = on_grid
    end
    return { ms = state.ms, t = t }
end

-- The state that stores `tat`, and the TAT it reads back as.
local function store(r, tat)
    local ns = RL.ceil_div(tat.t, r.l)
    local state = { ms = tat.ms, ns = ns }
    if ns >= NS_PER_MS then
        state = { ms = tat.ms + 1, ns = ns - NS_PER_MS }
    end
    return state, load(r, state)
end

local function fill_of(r, state, now)
    if state == nil then
        return ZERO
    end
    local fill = sub(load(r, state), now, r.p)
    if positive(fill) then
        return fill
    end
    return ZERO
end

-- Whole units of duration `d` (>= 0), rounded down: floor(d / T).
local function units_floor(r, d)
    return RL.div_floor(RL.mul(d.ms, r.l) + math.floor(d.t / NS_PER_MS), r.w)
end

local function remaining(r, fill)
    local left = sub(r.tolerance, fill, r.p)
    if left.ms < 0 then
        return 0
    end
    return math.min(units_floor(r, left), r.b)
end

local function ceil_ms(d)
    if d.t > 0 then
        return d.ms + 1
    end
    return d.ms
end

local function new_bucket(id, name)
    local B = { id = id, name = name, has_burst = true }

    function B.capacity(quota)
        return quota.burst
    end

    function B.span(quota)
        return RL.ceil_div(RL.mul(quota.burst, quota.window), quota.limit)
    end

    function B.check(state, now_ms, quota, cost)
        local r = rate_of(quota)
        local now = { ms = now_ms, t = 0 }
        local fill = fill_of(r, state, now)
        if cost > r.b then
            return { allowed = false, limit = r.b, remaining = remaining(r, fill),
                reset = ceil_ms(fill), retry = RL.NEVER }, nil
        end
        local needed = add(fill, r.units(cost), r.p)
        if less_eq(needed, r.tolerance) then
            local next, tat = store(r, add(now, needed, r.p))
            local after = sub(tat, now, r.p)
            return { allowed = true, limit = r.b, remaining = remaining(r, after),
                reset = ceil_ms(after), retry = 0 }, next
        end
        return { allowed = false, limit = r.b, remaining = remaining(r, fill), reset = ceil_ms(fill),
            retry = ceil_ms(sub(needed, r.tolerance, r.p)) }, nil
    end

    function B.view(state, now_ms, quota)
        local r = rate_of(quota)
        local fill = fill_of(r, state, { ms = now_ms, t = 0 })
        return remaining(r, fill), ceil_ms(fill)
    end

    function B.refund(state, now_ms, quota, amount)
        if state == nil then
            return nil
        end
        local r = rate_of(quota)
        local now = { ms = now_ms, t = 0 }
        local fill = fill_of(r, state, now)
        if not positive(fill) then
            return nil
        end
        local next
        if amount >= B.used(state, now_ms, quota) then
            next = store(r, now)
        else
            next = store(r, add(now, sub(fill, r.units(amount), r.p), r.p))
        end
        if next.ms == state.ms and next.ns == state.ns then
            return nil
        end
        return next
    end

    -- Units the state counts: ceil(fill / T); a fill too long to compute counts as huge.
    function B.used(state, now_ms, quota)
        local r = rate_of(quota)
        local fill = fill_of(r, state, { ms = now_ms, t = 0 })
        if fill.ms * r.l > RL.MAX_EXACT then
            return RL.MAX_EXACT
        end
        local n = fill.ms * r.l + math.floor(fill.t / NS_PER_MS)
        if fill.t % NS_PER_MS > 0 then
            return RL.div_floor(n, r.w) + 1
        end
        return RL.ceil_div(n, r.w)
    end

    function B.seeded(used, now_ms, quota)
        local r = rate_of(quota)
        return (store(r, add({ ms = now_ms, t = 0 }, r.units(math.max(used, 0)), r.p)))
    end

    function B.expires_at(state, _quota)
        if state.ns > 0 then
            return state.ms + 1
        end
        return state.ms
    end

    function B.to_short(state, expires_at)
        local short = (expires_at - state.ms) * NS_PER_MS - state.ns
        if short >= 0 and short < NS_PER_MS then
            return short
        end
        return nil
    end

    function B.from_short(short, expires_at)
        if short < 0 or short >= NS_PER_MS then
            return nil
        end
        if short == 0 then
            return { ms = expires_at, ns = 0 }
        end
        return { ms = expires_at - 1, ns = NS_PER_MS - short }
    end

    -- The TAT in ns as 8 little-endian bytes, from its two parts without rounding:
    -- 2^32 = 4294 * 10^6 + 967296.
    function B.encode(state, out)
        local ms_low = state.ms % 4294967296
        local ms_high = (state.ms - ms_low) / 4294967296
        local low = ms_low * NS_PER_MS + state.ns
        local lo = low % 4294967296
        local hi = ms_high * NS_PER_MS + (low - lo) / 4294967296
        RL.put_i64_parts(out, hi, lo)
    end

    function B.decode(r)
        local hi, lo = RL.read_i64_parts(r)
        if hi == nil then
            return nil
        end
        local below = hi * 967296 + lo
        local ns = below % NS_PER_MS
        return { ms = hi * 4294 + (below - ns) / NS_PER_MS, ns = ns }
    end

    RL.add_algorithm(B)
    return B
end

new_bucket(4, 'token')
new_bucket(5, 'gcra')
