-- fixed.lua: the fixed window (core/src/fixed_window.rs). State { count, ends }: the units
-- counted and the absolute ms the window ends; windows aligned to multiples of their length
-- since the epoch, or to the calendar's boundaries for a calendar window.

local Fixed = { id = 1, name = 'fixed', has_burst = false }

local function window_end(now, quota)
    if quota.calendar then
        return quota.calendar.period_end(now)
    end
    return now - now % quota.window + quota.window
end

-- The window `now` counts in: the stored one while it has not ended, else a new one.
local function current(state, now, quota)
    if state ~= nil and state.ends > now then
        return state
    end
    return { count = 0, ends = window_end(now, quota) }
end

function Fixed.capacity(quota)
    return quota.limit
end

function Fixed.span(quota)
    if quota.calendar then
        return quota.window + RL.DAY_MS
    end
    return quota.window
end

function Fixed.view(state, now, quota)
    local w = current(state, now, quota)
    local reset = 0
    if w.count ~= 0 then
        reset = w.ends - now
    end
    return math.max(quota.limit - w.count, 0), reset
end

function Fixed.check(state, now, quota, cost)
    local w = current(state, now, quota)
    local until_end = w.ends - now
    local total = w.count + cost
    if total <= quota.limit then
        return { allowed = true, limit = quota.limit, remaining = quota.limit - total,
            reset = until_end, retry = 0 }, { count = total, ends = w.ends }
    end
    local remaining, reset = Fixed.view(w, now, quota)
    local retry = until_end
    if cost > quota.limit then
        retry = RL.NEVER
    end
    return { allowed = false, limit = quota.limit, remaining = remaining, reset = reset,
        retry = retry }, nil
end

function Fixed.refund(state, now, _quota, amount)
    if state == nil or state.ends <= now or state.count <= 0 then
        return nil
    end
    return { count = state.count - math.min(amount, state.count), ends = state.ends }
end

function Fixed.used(state, now, _quota)
    if state.ends > now then
        return state.count
    end
    return 0
end

function Fixed.seeded(used, now, quota)
    return { count = used, ends = window_end(now, quota) }
end

function Fixed.expires_at(state, _quota)
    return state.ends
end

function Fixed.from_plain_count(count, expires_at)
    return { count = count, ends = expires_at }
end

function Fixed.fits_unrecorded(state, quota)
    return quota.calendar == nil and state.ends % quota.window == 0
end

function Fixed.to_plain_count(state)
    if state.count >= 1 then
        return state.count
    end
    return nil
end

function Fixed.encode(state, out)
    RL.put_varint(out, state.count)
    RL.put_i64(out, state.ends)
end

function Fixed.decode(r)
    local count = RL.read_varint(r)
    local ends = count and RL.read_i64(r)
    if ends == nil then
        return nil
    end
    return { count = count, ends = ends }
end

-- The common case at the cost of a few tables: a hit or a look with one tier of fixed
-- length, on no key or on the plain count its own window wrote (its expiry ends a window
-- of this length, at most one window from now). It answers what the general path does
-- (the tests compare both with the module); anything else gets nil and takes that path.
function Fixed.fast(rule, step, stored, expiry, now)
    local quota = rule.tiers[2] == nil and rule.tiers[1]
    if not quota or quota.calendar or (step ~= 'hit' and step ~= 'peek') then
        return nil
    end
    local window, limit, cost = quota.window, quota.limit, rule.cost
    local count, ends = 0, nil
    if stored ~= nil then
        if #stored > 15 or not string.find(stored, '^[1-9]%d*$') then
            return nil
        end
        local at = expiry()
        if at == nil or at % window ~= 0 or at - now > window then
            return nil
        end
        if at > now then
            count, ends = tonumber(stored), at
        end
    end
    ends = ends or now - now % window + window
    local total = count + cost
    local d
    local write
    if total <= limit then
        d = { allowed = true, limit = limit, remaining = limit - total, reset = ends - now, retry = 0 }
        if step == 'hit' then
            write = { value = string.format('%.0f', total), expires = ends }
        end
    else
        local reset, retry = 0, ends - now
        if count ~= 0 then
            reset = ends - now
        end
        if cost > limit then
            retry = RL.NEVER
        end
        d = { allowed = false, limit = limit, remaining = math.max(limit - count, 0), reset = reset,
            retry = retry }
    end
    return { decision = d, tiers = { d }, write = write }
end

RL.add_algorithm(Fixed)
