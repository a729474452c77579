-- limiter.lua: what a stored value means, and the tiered check, refund and renewal
-- (core/src/limiter/): every tier counts or none does; a key whose parameters changed
-- starts afresh from its usage; the reply is the binding tier's.

local NOT_OURS = 'ERR key holds a string that is not a ratelimit state'
RL.NOT_OURS = NOT_OURS

local function quota_equal(a, b)
    local ca = a.calendar and a.calendar.code or 0
    local cb = b.calendar and b.calendar.code or 0
    return a.limit == b.limit and a.window == b.window and a.burst == b.burst and ca == cb
end

-- The algorithm stored under `id`, or nil.
local function owner_of(id)
    return RL.ALGO_BY_ID[id]
end

local function capacity(algo, quota)
    return algo.capacity(quota)
end

-- The units a plain count or short form still counts when its key lost its expiry; nil
-- when the form does not need the expiry or the key has one.
local function lost_expiry_usage(form, expiry)
    if form.form == 'tiers' or expiry() ~= nil then
        return nil
    end
    if form.form == 'count' then
        return form.count
    end
    local owner = owner_of(form.algorithm)
    if owner == nil or owner.from_short(form.short, 0) == nil then
        RL.fail(NOT_OURS)
    end
    return owner.capacity(form.quota)
end

-- What the key's value means to `algo`: { kind = 'empty' | 'same' | 'usage', tiers, used },
-- and whether the key lost the expiry its state needs.
local function read_prior(algo, stored, expiry, now)
    if stored == nil then
        return { kind = 'empty' }, false
    end
    local form = RL.classify(stored)
    if form == nil then
        RL.fail(NOT_OURS)
    end
    local lost = lost_expiry_usage(form, expiry)
    if lost ~= nil then
        return { kind = 'usage', used = lost }, true
    end
    if form.form == 'count' then
        local ends = expiry()
        if ends == nil then
            RL.fail(NOT_OURS)
        end
        if algo.from_plain_count then
            return { kind = 'same', tiers = { { state = algo.from_plain_count(form.count, ends) } } }, false
        end
        return { kind = 'usage', used = RL.ALGO_BY_ID[1].used({ count = form.count, ends = ends }, now) }, false
    end
    if form.form == 'short' then
        local expires = expiry()
        local owner = owner_of(form.algorithm)
        local state = expires and owner and owner.from_short(form.short, expires)
        if state == nil then
            RL.fail(NOT_OURS)
        end
        if owner == algo then
            return { kind = 'same', tiers = { { quota = form.quota, state = state } } }, false
        end
        return { kind = 'usage', used = owner.used(state, now, form.quota) }, false
    end
    local owner = owner_of(form.algorithm)
    local tiers = owner and RL.decode_tiers(owner, form)
    if tiers == nil then
        RL.fail(NOT_OURS)
    end
    local lost_expiry = expiry() == nil
    if owner == algo then
        return { kind = 'same', tiers = tiers }, lost_expiry
    end
    local used = 0
    for _, t in ipairs(tiers) do
        used = math.max(used, owner.used(t.state, now, t.quota))
    end
    return { kind = 'usage', used = used }, lost_expiry
end

-- The stored states when written with the request's parameters and lasting no longer than
-- their span from now; else states seeded with the units the old ones still count.
local function starting_states(algo, prior, tiers, now)
    local used = 0
    if prior.kind == 'empty' then
        return {}, false
    elseif prior.kind == 'same' then
        local stored = prior.tiers
        local reusable = #stored == #tiers
        for i = 1, #stored do
            if not reusable then
                break
            end
            local quota, state = tiers[i], stored[i].state
            local fits
            if stored[i].quota then
                fits = quota_equal(stored[i].quota, quota)
            else
                fits = algo.fits_unrecorded == nil or algo.fits_unrecorded(state, quota)
            end
            reusable = fits and algo.expires_at(state, quota) - now <= algo.span(quota)
        end
        if reusable then
            local states = {}
            for i = 1, #stored do
                states[i] = stored[i].state
            end
            return states, false
        end
        for i = 1, #stored do
            local quota = stored[i].quota or tiers[(i - 1) % #tiers + 1]
            used = math.max(used, algo.used(stored[i].state, now, quota))
        end
    else
        used = prior.used
    end
    if used <= 0 then
        return {}, false
    end
    local states = {}
    for i, quota in ipairs(tiers) do
        states[i] = algo.seeded(math.min(used, capacity(algo, quota)), now, quota)
    end
    return states, true
end

-- The write that stores `states`: { value, expires } or 'delete'.
local function store(algo, tiers, states, now)
    local expires = now
    local any = false
    for i, quota in ipairs(tiers) do
        local e = algo.expires_at(states[i], quota)
        if not any or e > expires then
            expires = e
        end
        any = true
    end
    if expires <= now then
        return 'delete'
    end
    local value
    if #tiers == 1 and tiers[1].calendar == nil then
        local count = algo.to_plain_count and algo.to_plain_count(states[1])
        local short = algo.to_short and algo.to_short(states[1], expires)
        if count ~= nil then
            value = string.format('%.0f', count)
        elseif short ~= nil then
            value = RL.encode_short(algo, tiers[1], short)
        end
    end
    value = value or RL.encode_tiers(algo, tiers, states)
    return { value = value, expires = expires }
end

-- The binding answer over all tiers (see core/src/limiter/tiered_check.rs, combine).
local function combine(decisions, allowed)
    local binding
    for _, d in ipairs(decisions) do
        if allowed then
            if binding == nil or d.remaining < binding.remaining then
                binding = d
            end
        elseif not d.allowed then
            local wait = d.retry
            if wait == RL.NEVER then
                wait = math.huge
            end
            -- The last of equal waits, as the module picks it.
            if binding == nil or wait >= binding.wait then
                binding = { d = d, wait = wait }
            end
        end
    end
    if binding and not allowed then
        binding = binding.d
    end
    binding = binding or decisions[1]
    local remaining, reset = decisions[1].remaining, decisions[1].reset
    for _, d in ipairs(decisions) do
        remaining = math.min(remaining, d.remaining)
        reset = math.max(reset, d.reset)
    end
    local retry = 0
    if not allowed then
        retry = binding.retry
    end
    return { allowed = allowed, limit = binding.limit, remaining = remaining, reset = reset,
        retry = retry }
end

-- counting: 'writes' (hit), 'looks' (peek), 'held' (another key denies).
local function check(algo, start, tiers, now, cost, counting)
    local checks, charged = {}, {}
    local allowed = true
    for i, quota in ipairs(tiers) do
        checks[i], charged[i] = algo.check(start.states[i], now, quota, cost)
        allowed = allowed and checks[i].allowed
    end
    local counted = allowed and counting ~= 'held'
    local decisions = {}
    for i, quota in ipairs(tiers) do
        local d = checks[i]
        if counted or not d.allowed then
            decisions[i] = d
        else
            local remaining, reset = algo.view(start.states[i], now, quota)
            decisions[i] = { allowed = d.allowed, limit = d.limit, remaining = remaining,
                reset = reset, retry = d.retry }
        end
    end
    local write
    if counting == 'writes' then
        if allowed then
            write = store(algo, tiers, charged, now)
        elseif start.renewed or start.lost_expiry then
            if #start.states == #tiers then
                write = store(algo, tiers, start.states, now)
            elseif start.lost_expiry then
                write = 'delete'
            end
        end
    end
    return { decision = combine(decisions, allowed), tiers = decisions, write = write }
end

local function refund(algo, start, tiers, now, amount)
    local states, changed = {}, false
    for i, quota in ipairs(tiers) do
        local new
        if not start.renewed then
            new = algo.refund(start.states[i], now, quota, amount)
        end
        changed = changed or new ~= nil
        states[i] = new or start.states[i]
    end
    local decisions = {}
    for i, quota in ipairs(tiers) do
        local remaining, reset = algo.view(states[i], now, quota)
        decisions[i] = { allowed = changed, limit = capacity(algo, quota), remaining = remaining,
            reset = reset, retry = 0 }
    end
    local write
    if changed then
        write = 'delete'
        local complete = true
        local any_used = false
        for i, quota in ipairs(tiers) do
            if states[i] == nil then
                complete = false
            elseif algo.used(states[i], now, quota) > 0 then
                any_used = true
            end
        end
        if complete and any_used then
            write = store(algo, tiers, states, now)
        end
    end
    local decision = combine(decisions, true)
    decision.allowed = changed
    return { decision = decision, tiers = decisions, write = write }
end

-- Answers `step` ('hit' | 'peek' | 'held' | 'refund') for the rule on a key holding
-- `stored` (nil: no key) at `now`; `expiry()` gives the key's absolute expiry or nil.
function RL.run(rule, step, stored, expiry, now)
    local algo, tiers = rule.algo, rule.tiers
    if algo.fast then
        local outcome = algo.fast(rule, step, stored, expiry, now)
        if outcome then
            return outcome
        end
    end
    local prior, lost_expiry = read_prior(algo, stored, expiry, now)
    local states, renewed = starting_states(algo, prior, tiers, now)
    local start = { states = states, renewed = renewed, lost_expiry = lost_expiry }
    if step == 'hit' then
        return check(algo, start, tiers, now, rule.cost, 'writes')
    elseif step == 'refund' then
        return refund(algo, start, tiers, now, rule.cost)
    end
    local counting = 'looks'
    if step == 'held' then
        counting = 'held'
    end
    local outcome = check(algo, start, tiers, now, rule.cost, counting)
    local d = outcome.decision
    if renewed and not d.allowed and d.retry ~= RL.NEVER then
        local ends = expiry()
        local left = 0
        if ends ~= nil then
            left = math.max(ends - now, 0)
        end
        d.retry = math.max(d.retry, left)
    end
    return outcome
end

-- Whether `stored` is a whole state the module or this library wrote (RL.RESET deletes
-- only such values).
function RL.is_state(stored, expiry)
    local form = RL.classify(stored)
    if form == nil then
        return false
    end
    if form.form == 'count' then
        return true
    end
    local owner = owner_of(form.algorithm)
    if owner == nil then
        return false
    end
    if form.form == 'short' then
        return owner.from_short(form.short, expiry or 0) ~= nil
    end
    return RL.decode_tiers(owner, form) ~= nil
end
