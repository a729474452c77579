-- bucket.lua: GCRA and the token bucket, one arithmetic (core/src/bucket.rs). The state is
-- the theoretical arrival time (TAT) in ns since the epoch, which no double holds exactly
-- (about 1.7e18), so it is kept as { ms, ns } (TAT = ms * 10^6 + ns, 0 <= ns < 10^6).
--
-- The module computes in ticks of 1/L ns (L the limit), so that the interval T = window / L
-- is exact. Here a time in ticks is a pair (ms, t): whole ms and the ticks below the ms,
-- 0 <= t < P = L * 10^6. Every product stays below 2^53 when (burst + 1) * window (ms) + L
-- does and P * 2 does; a rule beyond that is refused (RL.too_large).

local NS_PER_MS = 1000000

local function gcd(a, b)
    while b ~= 0 do
        a, b = b, a % b
    end
    return a
end

-- Tick times and durations are pairs (ms, t), passed as two values rather than tables: a
-- call makes a dozen of them.
local function norm(ms, t, p)
    if t >= p then
        return ms + 1, t - p
    elseif t < 0 then
        return ms - 1, t + p
    end
    return ms, t
end

local function less_eq(ams, at, bms, bt)
    return ams < bms or (ams == bms and at <= bt)
end

local function positive(ms, t)
    return ms > 0 or (ms == 0 and t > 0)
end

-- `units` intervals as a duration: units * W ms / L.
local function units_of(r, units)
    local x = RL.mul(units, r.w)
    return RL.div_floor(x, r.l), (x % r.l) * NS_PER_MS
end

-- The quota in ticks; kept on the quota, which never changes once parsed or decoded.
local function rate_of(quota)
    local r = quota.rate
    if r then
        return r
    end
    local l, w, b = quota.limit, quota.window, quota.burst
    if (b + 1) * w + l > RL.MAX_EXACT or l * NS_PER_MS * 2 > RL.MAX_EXACT then
        RL.too_large()
    end
    r = { l = l, w = w, b = b, p = l * NS_PER_MS, grid = gcd(l, w) * NS_PER_MS }
    r.tol_ms, r.tol_t = units_of(r, b)
    quota.rate = r
    return r
end

-- The TAT a stored state stands for, in ticks: the grid point within the ns rounded up.
local function load(r, state)
    local t = state.ns * r.l
    local on_grid = t - t % r.grid
    if t - on_grid < r.l then
        t = on_grid
    end
    return state.ms, t
end

-- The state that stores the TAT (ms, t), and the TAT it reads back as.
local function store(r, ms, t)
    local ns = RL.ceil_div(t, r.l)
    local state
    if ns >= NS_PER_MS then
        state = { ms = ms + 1, ns = ns - NS_PER_MS }
    else
        state = { ms = ms, ns = ns }
    end
    return state, load(r, state)
end

-- How far the TAT is ahead of `now` (whole ms), >= 0.
local function fill_of(r, state, now)
    if state == nil then
        return 0, 0
    end
    local ms, t = load(r, state)
    ms, t = norm(ms - now, t, r.p)
    if positive(ms, t) then
        return ms, t
    end
    return 0, 0
end

-- Whole units that fit on top of a fill, within 0..burst.
local function remaining(r, fill_ms, fill_t)
    local ms, t = norm(r.tol_ms - fill_ms, r.tol_t - fill_t, r.p)
    if ms < 0 then
        return 0
    end
    return math.min(RL.div_floor(RL.mul(ms, r.l) + math.floor(t / NS_PER_MS), r.w), r.b)
end

local function ceil_ms(ms, t)
    if t > 0 then
        return ms + 1
    end
    return ms
end

local function new_bucket(id, name)
    local B = { id = id, name = name, has_burst = true }

    function B.capacity(quota)
        return quota.burst
    end

    function B.span(quota)
        return RL.ceil_div(RL.mul(quota.burst, quota.window), quota.limit)
    end

    function B.check(state, now, quota, cost)
        local r = rate_of(quota)
        local fms, ft = fill_of(r, state, now)
        if cost > r.b then
            return { allowed = false, limit = r.b, remaining = remaining(r, fms, ft),
                reset = ceil_ms(fms, ft), retry = RL.NEVER }, nil
        end
        local cms, ct = units_of(r, cost)
        local nms, nt = norm(fms + cms, ft + ct, r.p)
        if less_eq(nms, nt, r.tol_ms, r.tol_t) then
            local next, tms, tt = store(r, norm(now + nms, nt, r.p))
            local ams, at = norm(tms - now, tt, r.p)
            return { allowed = true, limit = r.b, remaining = remaining(r, ams, at),
                reset = ceil_ms(ams, at), retry = 0 }, next
        end
        return { allowed = false, limit = r.b, remaining = remaining(r, fms, ft),
            reset = ceil_ms(fms, ft),
            retry = ceil_ms(norm(nms - r.tol_ms, nt - r.tol_t, r.p)) }, nil
    end

    function B.view(state, now, quota)
        local r = rate_of(quota)
        local fms, ft = fill_of(r, state, now)
        return remaining(r, fms, ft), ceil_ms(fms, ft)
    end

    function B.refund(state, now, quota, amount)
        if state == nil then
            return nil
        end
        local r = rate_of(quota)
        local fms, ft = fill_of(r, state, now)
        if not positive(fms, ft) then
            return nil
        end
        local next
        if amount >= B.used(state, now, quota) then
            next = store(r, now, 0)
        else
            local ums, ut = units_of(r, amount)
            local lms, lt = norm(fms - ums, ft - ut, r.p)
            next = store(r, norm(now + lms, lt, r.p))
        end
        if next.ms == state.ms and next.ns == state.ns then
            return nil
        end
        return next
    end

    -- Units the state counts: ceil(fill / T); a fill too long to compute counts as huge.
    function B.used(state, now, quota)
        local r = rate_of(quota)
        local fms, ft = fill_of(r, state, now)
        if fms * r.l > RL.MAX_EXACT then
            return RL.MAX_EXACT
        end
        local n = fms * r.l + math.floor(ft / NS_PER_MS)
        if ft % NS_PER_MS > 0 then
            return RL.div_floor(n, r.w) + 1
        end
        return RL.ceil_div(n, r.w)
    end

    function B.seeded(used, now, quota)
        local r = rate_of(quota)
        local ums, ut = units_of(r, math.max(used, 0))
        return (store(r, now + ums, ut))
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

    -- The common case with fewer steps: a hit or a look with one tier of fixed length, on
    -- no key or on the short form this algorithm wrote with the same parameters, lasting
    -- no longer than its span. It answers what the general path does (the tests compare
    -- both with the module); anything else gets nil and takes that path.
    function B.fast(rule, step, stored, expiry, now)
        local quota = rule.tiers[2] == nil and rule.tiers[1]
        if not quota or quota.calendar or (step ~= 'hit' and step ~= 'peek') then
            return nil
        end
        local state
        if stored ~= nil then
            local form = RL.classify(stored)
            if form == nil or form.form ~= 'short' or form.algorithm ~= id then
                return nil
            end
            local q, at = form.quota, expiry()
            if at == nil or q.limit ~= quota.limit or q.window ~= quota.window
                or q.burst ~= quota.burst or at - now > B.span(quota) then
                return nil
            end
            state = B.from_short(form.short, at)
            if state == nil then
                return nil
            end
        end
        local d, charged = B.check(state, now, quota, rule.cost)
        local write
        if charged and step == 'hit' then
            local expires = B.expires_at(charged, quota)
            if expires <= now then
                write = 'delete'
            else
                write = { value = RL.encode_short(B, quota, B.to_short(charged, expires)),
                    expires = expires }
            end
        end
        return { decision = d, tiers = { d }, write = write }
    end

    RL.add_algorithm(B)
    return B
end

new_bucket(4, 'token')
new_bucket(5, 'gcra')
