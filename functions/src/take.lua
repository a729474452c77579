-- take.lua: RL.TAKE, the partial grant (core/src/args/take.rs, core/src/limiter/grant.rs):
--   FCALL rl_take 1 key limit window [limit window ...] [ALGO name] [BURST b] [TZ UTC]
--         [ANCHOR day] UPTO n
-- counts the largest g <= n that `rl_hit ... COST g` would allow, in every tier or none,
-- and answers RL.HIT's five integers and g. It stores what `rl_hit ... COST g` stores; a
-- grant of 0 answers and writes what a denied `COST 1` does.

local ERR_UPTO = 'ERR UPTO must be a positive integer: the most units to take'
local ERR_MISSING_UPTO = 'ERR RL.TAKE needs UPTO n: the most units to take, an integer >= 1'
local ERR_COST = 'ERR RL.TAKE takes UPTO n, not COST: it counts up to n units and answers how '
    .. 'many (RL.HIT COST n counts all n or none)'
-- RL.HIT's list of options in its error for an unknown one, and RL.TAKE's instead.
local HIT_OPTIONS = "' (expected ALGO, BURST, COST, TZ or ANCHOR)"
local TAKE_OPTIONS = "' (expected UPTO, and with limits ALGO, BURST, TZ or ANCHOR)"

-- The options whose next argument is their value, never UPTO or COST itself (as the
-- module reads them: `ALGO COST` is a bad algorithm, not a COST).
local VALUED = { ALGO = true, BURST = true, TZ = true, ANCHOR = true, POLICY = true, COST = true }

-- UPTO's value: the module takes any integer from 1 to i64's largest. No grant exceeds a
-- tier's capacity, which is below 2^53 here, so a larger n is held as 2^53 - 1 and
-- grants the same, where RL.parse_positive would refuse it as too large.
local function parse_upto(text)
    if text == nil or not string.find(text, '^%d+$') then
        return nil
    end
    local digits = string.gsub(text, '^0+', '')
    if digits == '' then
        return nil
    end
    local longest = #RL.I64_MAX_TEXT
    if #digits > longest or (#digits == longest and digits > RL.I64_MAX_TEXT) then
        return nil
    end
    return math.min(tonumber(digits), RL.MAX_EXACT)
end

-- Splits the arguments after the key into UPTO's value and the rest, the rule; raises
-- the module's errors in its order (the first bad UPTO or COST as met, then arity, then
-- a missing UPTO).
local function split_upto(args)
    local rest, upto = {}, nil
    local i = 1
    while args[i] ~= nil do
        local word = args[i]
        local upper = string.upper(word)
        if upper == 'UPTO' then
            local value = parse_upto(args[i + 1])
            if value == nil then
                RL.fail(ERR_UPTO)
            end
            if upto ~= nil then
                RL.fail('ERR UPTO is given more than once')
            end
            upto = value
            i = i + 2
        elseif upper == 'COST' then
            RL.fail(ERR_COST)
        else
            rest[#rest + 1] = word
            i = i + 1
            if VALUED[upper] and args[i] ~= nil then
                rest[#rest + 1] = args[i]
                i = i + 1
            end
        end
    end
    if #rest == 0 then
        RL.arity('RL.TAKE')
    end
    if upto == nil then
        RL.fail(ERR_MISSING_UPTO)
    end
    return rest, upto
end

-- The rule in `rest`, with RL.HIT's errors, but for an unknown option, which RL.TAKE's
-- error answers with its own list of options.
local function parse_rule(rest)
    local ok, rule = pcall(RL.parse_limits, 'RL.TAKE', rest, 1)
    if ok then
        return rule
    end
    local text = RL.error_text(rule)
    if string.find(text, "^ERR unknown option '") and #text > #HIT_OPTIONS
        and string.sub(text, -#HIT_OPTIONS) == HIT_OPTIONS then
        RL.fail(string.sub(text, 1, -#HIT_OPTIONS - 1) .. TAKE_OPTIONS)
    end
    error(rule, 0)
end

-- Whether every tier allows `cost` units at once from `start`. A cost the arithmetic
-- cannot take (an error of ours for a hit) is not allowed either; a Lua runtime error is
-- a bug and is raised.
local function fits(rule, start, now, cost)
    for i, quota in ipairs(rule.tiers) do
        local ok, decision = pcall(rule.algo.check, start.states[i], now, quota, cost)
        if not ok then
            if string.find(RL.error_text(decision), '^[A-Z]+ ') then
                return false
            end
            error(decision, 0)
        end
        if not decision.allowed then
            return false
        end
    end
    return true
end

-- The largest g in 0..upto that every tier allows: a binary search, for allowing is
-- monotone in the cost, bounded by the smallest capacity (no tier takes more at once),
-- so it runs about log2 of that many checks, never one per unit. Its first probe is the
-- smallest `remaining` the tiers show, the answer wherever `remaining` is exact: then two
-- checks settle it. The module searches the same way (core/src/limiter/grant.rs).
local function largest_grant(rule, start, now, upto)
    local algo = rule.algo
    local capacity, hint = nil, nil
    for i, quota in ipairs(rule.tiers) do
        local c = algo.capacity(quota)
        local left = algo.view(start.states[i], now, quota)
        capacity = math.min(capacity or c, c)
        hint = math.min(hint or left, left)
    end
    local hi = math.max(math.min(upto, capacity), 0)
    hint = math.min(hint, hi)
    local lo = 0
    if hint >= 1 then
        if fits(rule, start, now, hint) then
            lo = hint
            if lo < hi and not fits(rule, start, now, lo + 1) then
                hi = lo
            end
        else
            hi = hint - 1
        end
    end
    -- Invariant: `lo` fits (0 always does); `hi + 1` does not, or is above the bound.
    while lo < hi do
        local mid = lo + math.floor((hi - lo + 1) / 2)
        if fits(rule, start, now, mid) then
            lo = mid
        else
            hi = mid - 1
        end
    end
    return lo
end

local function take(keys, args)
    if #keys ~= 1 then
        RL.arity('RL.TAKE')
    end
    local rest, upto = split_upto(args)
    if RL.is_word(rest[1], 'POLICY') then
        RL.fail(RL.ERR.policy)
    end
    local rule = parse_rule(rest)
    local value, expiry = RL.open_key(keys[1])
    local now = RL.now_ms()
    if value ~= nil and RL.is_lease(value) then
        RL.fail(RL.LEASES_NOT_STATE)
    end
    local start = RL.start(rule, value, expiry, now)
    local granted = largest_grant(rule, start, now, upto)
    local outcome = RL.count(rule, start, now, math.max(granted, 1))
    RL.apply(keys[1], outcome.write)
    local reply = RL.values(outcome.decision)
    reply[6] = granted
    return reply
end

-- No flags: deny-oom, as the module's RL.TAKE (a grant adds to what a key holds).
RL.register('rl_take', RL.guarded(take))
