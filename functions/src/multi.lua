-- multi.lua: several keys in one call, all or nothing (RL.MHIT, RL.MPEEK, RL.MREFUND; see
-- core/src/args/multi.rs and core/src/limiter/multi.rs):
--   FCALL rl_mhit numkeys key [key ...] SPEC rule [SPEC rule ...]
-- numkeys and the keys are FCALL's own, so the server checks that they are there.

local MAX_KEYS = 16
local MAX_RULE_WORDS = 2 * RL.MAX_TIERS + 6

local function is_spec(word)
    return RL.is_word(word, 'SPEC')
end

-- The error for key `index` (from 0): the module's `ERR SPEC i (key 'k'): reason`.
local function spec_error(index, key, message)
    local reason = string.gsub(message, '^ERR ', '', 1)
    RL.fail('ERR SPEC ' .. index .. " (key '" .. RL.excerpt(key) .. "'): " .. reason)
end

-- One key's rule: the words up to the next SPEC, parsed as RL.HIT's arguments.
local function parse_rule(words, index, key)
    local ok, rule = pcall(RL.parse_limits, 'SPEC', words, 1)
    if ok then
        if #words > MAX_RULE_WORDS then
            spec_error(index, key, "ERR unknown option '" .. RL.excerpt(words[MAX_RULE_WORDS + 1])
                .. "' (expected ALGO, BURST, COST, TZ or ANCHOR)")
        end
        return rule
    end
    local message = RL.error_text(rule)
    if string.find(message, "^ERR wrong number of arguments") then
        message = 'a SPEC needs limit window [limit window ...] or POLICY name'
    end
    spec_error(index, key, message)
end

-- The keys' rules, one per key, from ARGV (SPEC rule [SPEC rule ...]).
local function parse_multi(keys, args)
    local numkeys = #keys
    if numkeys < 1 or numkeys > MAX_KEYS then
        RL.fail('ERR numkeys must be an integer from 1 to ' .. MAX_KEYS)
    end
    local spec_among_keys
    for i = numkeys, 1, -1 do
        if is_spec(keys[i]) then
            spec_among_keys = i - 1
        end
    end
    local function for_want_of_specs(message)
        if spec_among_keys ~= nil then
            RL.fail('ERR numkeys is ' .. numkeys .. ' but SPEC comes after ' .. spec_among_keys
                .. ' keys: is numkeys too large? (a key named SPEC needs a SPEC of its own)')
        end
        RL.fail(message)
    end
    for second = 1, numkeys do
        for first = 1, second - 1 do
            if keys[first] == keys[second] then
                RL.fail("ERR key '" .. RL.excerpt(keys[second]) .. "' is given twice (indexes "
                    .. (first - 1) .. ' and ' .. (second - 1)
                    .. '): name each key once, with the sum of its costs')
            end
        end
    end
    local spec_count = 'ERR give one SPEC per key, in key order (' .. numkeys .. ' keys)'
    if not is_spec(args[1]) then
        for_want_of_specs('ERR each key needs a rule: numkeys key [key ...] SPEC rule [SPEC rule ...]')
    end
    local rules = {}
    local i = 2
    while true do
        local index = #rules
        if index == numkeys then
            for_want_of_specs(spec_count)
        end
        local words = {}
        local ended = true
        while args[i] ~= nil do
            local word = args[i]
            i = i + 1
            local policy_name = #words == 1 and RL.is_word(words[1], 'POLICY')
            if is_spec(word) and not policy_name then
                ended = false
                break
            end
            words[#words + 1] = word
            if #words > MAX_RULE_WORDS then
                break
            end
        end
        rules[#rules + 1] = parse_rule(words, index, keys[index + 1])
        if ended and args[i] == nil then
            break
        end
    end
    if #rules ~= numkeys then
        for_want_of_specs(spec_count)
    end
    return rules
end

-- The first key with the least remaining.
local function least_remaining(outcomes)
    local best = 1
    for i, o in ipairs(outcomes) do
        if o.decision.remaining < outcomes[best].decision.remaining then
            best = i
        end
    end
    return best
end

-- The first denying key with the longest wait (never waits longest).
local function longest_wait(outcomes)
    local function wait(o)
        if o.decision.retry == RL.NEVER then
            return math.huge
        end
        return o.decision.retry
    end
    local best
    for i, o in ipairs(outcomes) do
        if not o.decision.allowed and (best == nil or wait(o) > wait(outcomes[best])) then
            best = i
        end
    end
    return best or 1
end

-- RL.run for key `i`, an error naming the key's SPEC.
local function run_key(keys, i, rule, step, value, expiry, now)
    local ok, outcome = pcall(RL.run, rule, step, value, expiry, now)
    if not ok then
        spec_error(i - 1, keys[i], RL.error_text(outcome))
    end
    return outcome
end

-- step: 'hit' | 'peek' | 'refund'.
local function several(step)
    return function(keys, args)
        local rules = parse_multi(keys, args)
        -- Every key's type is checked (GET fails on another type) before anything else.
        local values, expiries = {}, {}
        for i, key in ipairs(keys) do
            values[i], expiries[i] = RL.open_key(key)
        end
        local now = RL.now_ms()
        local outcomes = {}
        local allowed = true
        for i, rule in ipairs(rules) do
            outcomes[i] = run_key(keys, i, rule, step, values[i], expiries[i], now)
            allowed = allowed and outcomes[i].decision.allowed
        end
        local refund = step == 'refund'
        if not allowed and not refund then
            -- Nothing is counted anywhere: a key that would allow (or renew) answers as held.
            for i, rule in ipairs(rules) do
                if outcomes[i].decision.allowed or outcomes[i].write ~= nil then
                    outcomes[i] = run_key(keys, i, rule, 'held', values[i], expiries[i], now)
                end
                outcomes[i].write = nil
            end
        end
        local binding
        if allowed or refund then
            binding = least_remaining(outcomes)
        else
            binding = longest_wait(outcomes)
        end
        local replies = {}
        for i, key in ipairs(keys) do
            RL.apply(key, outcomes[i].write)
            replies[i] = RL.values(outcomes[i].decision)
        end
        local all = 0
        if allowed then
            all = 1
        end
        return { all, binding - 1, replies }
    end
end

RL.several = several
