-- sliding.lua: the sliding window counter (core/src/sliding_window.rs). State { prev, curr,
-- ends }: the previous and current windows' counts and the current window's end. The
-- estimate prev * (W - elapsed) / W + curr is decided in exact integers, which here means
-- products below 2^53: limit x window (ms) beyond that is refused (RL.mul).

local Sliding = { id = 2, name = 'sliding', has_burst = false }

-- a * b for exact integers, refused when the product is no longer exact.
function RL.mul(a, b)
    return RL.exact(a * b)
end

-- floor(a / b) for exact integers a and b >= 1, corrected for the division's rounding.
function RL.div_floor(a, b)
    local q = math.floor(a / b)
    if q * b > a then
        q = q - 1
    elseif (q + 1) * b <= a then
        q = q + 1
    end
    return q
end

-- The state as it stands at `now`: rolled over to the window `now` counts in.
local function seen_at(state, now, w)
    if state ~= nil then
        local prev, curr = math.max(state.prev, 0), math.max(state.curr, 0)
        if now < state.ends then
            return { prev = prev, curr = curr, ends = state.ends,
                elapsed = math.max(now - (state.ends - w), 0), w = w }
        end
        if now < state.ends + w then
            return { prev = curr, curr = 0, ends = state.ends + w, elapsed = now - state.ends, w = w }
        end
    end
    local ends = now - now % w + w
    return { prev = 0, curr = 0, ends = ends, elapsed = now - (ends - w), w = w }
end

local function weighted_prev(s)
    return RL.mul(s.prev, s.w - s.elapsed)
end

-- The most units that fit now, possibly negative.
local function allowance(s, limit)
    return RL.div_floor(RL.mul(limit, s.w) - weighted_prev(s), s.w) - s.curr
end

local function remaining(s, limit)
    return math.max(math.min(allowance(s, limit), limit), 0)
end

local function expires_at(s)
    if s.curr > 0 then
        return s.ends + s.w
    end
    return s.ends
end

local function reset_after(s, now)
    if s.prev == 0 and s.curr == 0 then
        return 0
    end
    return expires_at(s) - now
end

local function retry_after(s, now, limit, cost)
    local w = s.w
    local start = s.ends - w
    local spare = limit - s.curr - cost
    if spare >= 0 and s.prev > 0 then
        local keep = RL.div_floor(RL.mul(spare, w), s.prev)
        local e = w - math.min(keep, w)
        if e < w then
            return start + e - now
        end
    end
    local keep = w
    if s.curr > 0 then
        keep = RL.div_floor(RL.mul(limit - cost, w), s.curr)
    end
    return s.ends + w - math.min(keep, w) - now
end

function Sliding.capacity(quota)
    return quota.limit
end

function Sliding.span(quota)
    return quota.window * 2
end

function Sliding.view(state, now, quota)
    local s = seen_at(state, now, quota.window)
    return remaining(s, quota.limit), reset_after(s, now)
end

function Sliding.check(state, now, quota, cost)
    local s = seen_at(state, now, quota.window)
    if cost <= allowance(s, quota.limit) then
        local charged = { prev = s.prev, curr = s.curr + cost, ends = s.ends, elapsed = s.elapsed, w = s.w }
        return { allowed = true, limit = quota.limit, remaining = remaining(charged, quota.limit),
            reset = reset_after(charged, now), retry = 0 },
            { prev = charged.prev, curr = charged.curr, ends = charged.ends }
    end
    local retry = RL.NEVER
    if cost <= quota.limit then
        retry = retry_after(s, now, quota.limit, cost)
    end
    return { allowed = false, limit = quota.limit, remaining = remaining(s, quota.limit),
        reset = reset_after(s, now), retry = retry }, nil
end

function Sliding.refund(state, now, quota, amount)
    if state == nil then
        return nil
    end
    local s = seen_at(state, now, quota.window)
    if s.curr <= 0 then
        return nil
    end
    return { prev = s.prev, curr = s.curr - math.min(s.curr, amount), ends = s.ends }
end

function Sliding.used(state, now, quota)
    local s = seen_at(state, now, quota.window)
    local weighted = weighted_prev(s)
    return -RL.div_floor(-weighted, s.w) + s.curr
end

function Sliding.seeded(used, now, quota)
    return { prev = math.max(used, 0), curr = 0, ends = now + quota.window }
end

function Sliding.expires_at(state, quota)
    if state.curr > 0 then
        return state.ends + quota.window
    end
    return state.ends
end

function Sliding.encode(state, out)
    RL.put_varint(out, state.prev)
    RL.put_varint(out, state.curr)
    RL.put_i64(out, state.ends)
end

function Sliding.decode(r)
    local prev = RL.read_varint(r)
    local curr = prev and RL.read_varint(r)
    local ends = curr and RL.read_i64(r)
    if ends == nil then
        return nil
    end
    return { prev = prev, curr = curr, ends = ends }
end

RL.add_algorithm(Sliding)
