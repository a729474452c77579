-- fast.lua: the common calls at the cost of a hand-written script. A hit or a look with
-- one tier of fixed length (ALGO fixed, sliding, token or gcra, with or without COST and
-- BURST) on no key, or on a key in the form the same rule writes, is answered here with
-- the fewest server calls (GET, TIME, SET PXAT; PEXPIRETIME only when the answer needs
-- the expiry; for a fixed window's live key GET, PEXPIRETIME, PTTL and INCRBY), locals
-- instead of tables where the general path builds them, and numbers turned into text
-- once per window instead of once per call. Anything else (several
-- tiers, calendar windows, another rule's key, a refund, an error, a damaged value) gets
-- nil and takes the general path, which then answers from scratch; both answer the same
-- replies, bytes and expiries (tests/it/functions_fast.rs compares them with the module).

-- The library functions the calls use, as locals: taken at the first call, since the
-- server lets a library reach them only when its functions run, not while it loads.
local byte, char, sub, format, find, floor, call, call_or_error, number

local function take_locals()
    byte, char, sub, format, find = string.byte, string.char, string.sub, string.format,
        string.find
    floor, call, call_or_error, number = math.floor, redis.call, redis.pcall, tonumber
end

-- `run` under pcall: an error (a key of another type, a number too large) gives nil, and
-- the general path then reports it with its texts.
local function protect(run)
    return function(fast, key, value, hit)
        local ok, reply = pcall(run, fast, key, value, hit)
        if ok then
            return reply
        end
        return nil
    end
end

local MAX_EXACT = RL.MAX_EXACT
local NS_PER_MS = 1000000

-- A varint as text; the value is an exact integer >= 0.
local function varint(n)
    if n < 128 then
        return char(n)
    elseif n < 16384 then
        return char(n % 128 + 128, floor(n / 128))
    elseif n < 2097152 then
        return char(n % 128 + 128, floor(n / 128) % 128 + 128, floor(n / 16384))
    end
    local out = {}
    RL.put_varint(out, n)
    return table.concat(out)
end

-- The varint at `pos` of `s` and the position after it; nil when it is not one or is not
-- below 2^53 (the general path then says what it is).
local function varint_at(s, pos)
    local value, scale = 0, 1
    for i = pos, pos + 7 do
        local b = byte(s, i)
        if b == nil then
            return nil
        end
        if b < 128 then
            value = value + b * scale
            if value > MAX_EXACT then
                return nil
            end
            return value, i + 1
        end
        value = value + (b - 128) * scale
        scale = scale * 128
    end
    return nil
end

-- The reply, one table for every call: the server turns it into the client's reply as the
-- function returns, and a new table a call would only be garbage to collect. The allowed
-- hits fill it in place, without the call.
local REPLY = {}

local function decided(allowed, limit, remaining, reset, retry)
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = allowed, limit, remaining, reset, retry
    return REPLY
end

-- The server's clock in ms. TIME's seconds change once a second: their conversion is kept.
local last_seconds, last_seconds_ms = nil, 0

local function now_ms()
    local time = call('TIME')
    local seconds = time[1]
    if seconds ~= last_seconds then
        last_seconds_ms = tonumber(seconds) * 1000
        last_seconds = seconds
    end
    -- The microseconds' digits, read by arithmetic's own conversion.
    return last_seconds_ms + floor(time[2] / 1000)
end

-- The text of a window's end (the same for every call of the window), kept on the rule.
local function end_text(fast, ends)
    if fast.ends ~= ends then
        fast.ends_text = format('%d', ends)
        fast.ends = ends
    end
    return fast.ends_text
end

-- Fixed window: the plain count, its window's end in the key's expiry.
local function fixed_denied(fast, now, ends, count)
    local limit = fast.limit
    local reset, retry = 0, ends - now
    if count ~= 0 then
        reset = retry
    end
    if fast.cost > limit then
        retry = RL.NEVER
    end
    local remaining = limit - count
    if remaining < 0 then
        remaining = 0
    end
    return decided(0, limit, remaining, reset, retry)
end

-- No key: the window starts with this call.
local function fixed_new(fast, key, _value, hit)
    local now = now_ms()
    local window, limit, cost = fast.window, fast.limit, fast.cost
    local ends = now - now % window + window
    if cost > limit then
        return fixed_denied(fast, now, ends, 0)
    end
    if hit then
        call('SET', key, fast.cost_text, 'PXAT', end_text(fast, ends))
    end
    return decided(1, limit, limit - cost, ends - now, 0)
end

-- The fixed window's run for one rule, its numbers in upvalues. A live key holds a count
-- below 10^15 whose expiry ends the window the clock is in. The clock is read as that
-- expiry less the key's PTTL (one integer each, where TIME answers two strings to
-- convert); a key of another window, or without an expiry, fails the test. Nothing here
-- raises (the run is not under pcall): a value that is an error (a key of another type)
-- is not a number, PEXPIRETIME and PTTL answer any key (only an ACL that forbids them
-- fails, and the caller then gets the server's NOPERM), and INCRBY's error is not the
-- count it would answer.
local function fixed_run(fast)
    local window, limit, cost, cost_text = fast.window, fast.limit, fast.cost, fast.cost_text
    local new = protect(fixed_new)
    -- The allowed reply, its constant fields filled once: a call fills in the other two.
    local allowed = { 1, limit, 0, 0, 0 }
    return function(_, key, value, hit)
        if not value then
            return new(fast, key, value, hit)
        end
        local count = number(value)
        if not (count and count >= 1 and count < 1e15) then
            return nil
        end
        local at = call('PEXPIRETIME', key)
        local now = at - call('PTTL', key)
        if at ~= now - now % window + window then
            return nil
        end
        local total = count + cost
        if total <= limit and hit then
            -- INCRBY stores the text SET would and keeps the expiry, which already ends
            -- this window; it refuses a value that is not an integer in canonical form (a
            -- leading zero, a '+', a space, a fraction; the count is at least 1, so no
            -- '-'), which then goes to the general path unwritten.
            if call_or_error('INCRBY', key, cost_text) ~= total then
                return nil
            end
        else
            -- No write vouches for the text: only a canonical count is the module's.
            if #value > 15 or not find(value, '^[1-9]%d*$') then
                return nil
            end
            if total > limit then
                return fixed_denied(fast, now, at, count)
            end
        end
        allowed[3], allowed[4] = limit - total, at - now
        return allowed
    end
end

-- floor(a / b) for exact integers and b >= 1, corrected for the division's rounding
-- (RL.div_floor); and a * b, refused (an error: the general path's then) beyond 2^53.
local function div_floor(a, b)
    local q = floor(a / b)
    if q * b > a then
        return q - 1
    elseif (q + 1) * b <= a then
        return q + 1
    end
    return q
end

local function mul(a, b)
    local x = a * b
    if x > MAX_EXACT then
        error('too large')
    end
    return x
end

-- Sliding window counter: the tiers form of one tier, its quota the rule's (the prefix).
-- The stored (prev, curr, ends): 0, 0, nil for no key; false when not in that form.
local function sliding_read(fast, value)
    if not value then
        return 0, 0, nil
    end
    local prefix = fast.prefix
    if sub(value, 1, #prefix) ~= prefix then
        return false
    end
    local prev, at = varint_at(value, #prefix + 1)
    local curr
    if prev then
        curr, at = varint_at(value, at)
    end
    if curr == nil or at + 7 ~= #value then
        return false
    end
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(value, at, at + 7)
    -- A window end from 1970 to 2^53 ms; anything else is the general path's to judge.
    if b8 ~= 0 or b7 >= 32 then
        return false
    end
    return prev, curr,
        ((((((b7 * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256) + b1
end

-- The reply to a denied hit or look on the state rolled to `now` (sliding.lua's).
local function sliding_denied(fast, now, prev, curr, ends, allowance)
    local w, limit, cost = fast.window, fast.limit, fast.cost
    local retry = RL.NEVER
    if cost <= limit then
        retry = nil
        local spare = limit - curr - cost
        if spare >= 0 and prev > 0 then
            local keep = div_floor(mul(spare, w), prev)
            if keep > 0 then
                if keep > w then
                    keep = w
                end
                retry = ends - keep - now
            end
        end
        if retry == nil then
            local keep = w
            if curr > 0 then
                keep = div_floor(mul(limit - cost, w), curr)
            end
            if keep > w then
                keep = w
            end
            retry = ends + w - keep - now
        end
    end
    local remaining = allowance
    if remaining > limit then
        remaining = limit
    elseif remaining < 0 then
        remaining = 0
    end
    local reset = 0
    if prev ~= 0 or curr ~= 0 then
        reset = ends - now
        if curr > 0 then
            reset = reset + w
        end
    end
    return decided(0, limit, remaining, reset, retry)
end

-- sliding.lua's check, with the state rolled over to the window `now` counts in.
local function sliding(fast, key, value, hit)
    local prev, curr, ends = sliding_read(fast, value)
    if prev == false then
        return nil
    end
    local w, limit, cost = fast.window, fast.limit, fast.cost
    local now = now_ms()
    local elapsed
    if ends then
        local expires = ends
        if curr > 0 then
            expires = ends + w
        end
        if expires - now > w * 2 then
            return nil
        end
        if now < ends then
            elapsed = now - (ends - w)
            if elapsed < 0 then
                elapsed = 0
            end
        elseif now < ends + w then
            prev, curr, ends, elapsed = curr, 0, ends + w, now - ends
        else
            ends = nil
        end
    end
    if ends == nil then
        prev, curr = 0, 0
        ends = now - now % w + w
        elapsed = now - (ends - w)
    end
    -- The most units that fit now, possibly negative.
    local allowance = div_floor(fast.capacity_ms - mul(prev, w - elapsed), w) - curr
    if cost > allowance then
        if hit and value and call('PEXPIRETIME', key) < 0 then
            -- A denied hit on a key that lost its expiry gets it back: the general path's.
            return nil
        end
        return sliding_denied(fast, now, prev, curr, ends, allowance)
    end
    local remaining = allowance - cost
    if remaining > limit then
        remaining = limit
    elseif remaining < 0 then
        remaining = 0
    end
    if hit then
        if fast.ends ~= ends then
            local out = {}
            RL.put_i64(out, ends)
            fast.ends_text = table.concat(out)
            fast.ends = ends
        end
        call('SET', key, fast.prefix .. varint(prev) .. varint(curr + cost) .. fast.ends_text,
            'PXAT', format('%d', ends + w))
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] = 1, limit, remaining, ends + w - now, 0
    return REPLY
end

-- Token bucket and GCRA (bucket.lua's arithmetic, in locals): times in ticks of 1/L ns
-- are pairs (ms, t), 0 <= t < P. `r` is the quota's rate (bucket.lua's rate_of).

-- Whole units that fit on top of a fill (ms, t), within 0..burst. The product stays
-- exact: ms <= burst * W / L, and the rate (bucket.lua's rate_of) bounds burst * W.
local function units_left(f, fill_ms, fill_t)
    local ms, t = f.tol_ms - fill_ms, f.tol_t - fill_t
    if t < 0 then
        ms, t = ms - 1, t + f.p
    end
    if ms < 0 then
        return 0
    end
    local x, w = ms * f.l + floor(t / NS_PER_MS), f.w
    local n = floor(x / w)
    if n * w > x then
        n = n - 1
    elseif (n + 1) * w <= x then
        n = n + 1
    end
    if n > f.b then
        return f.b
    end
    return n
end

-- The short form with the rule's quota (its prefix), the TAT's ms in the key's expiry:
-- `now` and how far the TAT is ahead of it (ms, ticks); nil when not in that form.
local function bucket_fill(fast, key, value)
    if not value then
        return now_ms(), 0, 0
    end
    local short = 0
    if value ~= fast.bare then
        local prefix = fast.prefix
        if sub(value, 1, #prefix) ~= prefix then
            return nil
        end
        local after
        short, after = varint_at(value, #prefix + 1)
        if short == nil or short < 1 or short >= NS_PER_MS or after ~= #value + 1 then
            return nil
        end
    end
    local at = call('PEXPIRETIME', key)
    -- now_ms, written out: a bucket's hit on a live key is the common call.
    local time = call('TIME')
    local seconds = time[1]
    if seconds ~= last_seconds then
        last_seconds_ms = tonumber(seconds) * 1000
        last_seconds = seconds
    end
    local now = last_seconds_ms + floor(time[2] / 1000)
    if at < 0 or at - now > fast.span then
        return nil
    end
    -- The TAT (ms, ns) the short number and the expiry stand for, in ticks: the grid point
    -- within the ns rounded up.
    local ms, t = at, 0
    if short ~= 0 then
        local l = fast.l
        ms, t = at - 1, (NS_PER_MS - short) * l
        local on_grid = t - t % fast.grid
        if t - on_grid < l then
            t = on_grid
        end
    end
    ms = ms - now
    if ms > 0 or (ms == 0 and t > 0) then
        return now, ms, t
    end
    return now, 0, 0
end

-- bucket.lua's check, its pairs of (ms, ticks) in locals; the reply filled in place (as
-- `decided` does, without the call).
local function bucket(fast, key, value, hit)
    local now, fill_ms, fill_t = bucket_fill(fast, key, value)
    if now == nil then
        return nil
    end
    local l, p, b = fast.l, fast.p, fast.b
    local fill_reset = fill_ms
    if fill_t > 0 then
        fill_reset = fill_ms + 1
    end
    if fast.cost > b then
        REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] =
            0, b, units_left(fast, fill_ms, fill_t), fill_reset, RL.NEVER
        return REPLY
    end
    local ms, t = fill_ms + fast.cost_ms, fill_t + fast.cost_t
    if t >= p then
        ms, t = ms + 1, t - p
    end
    local tol_ms, tol_t = fast.tol_ms, fast.tol_t
    if ms > tol_ms or (ms == tol_ms and t > tol_t) then
        local wait_ms, wait_t = ms - tol_ms, t - tol_t
        if wait_t < 0 then
            wait_ms, wait_t = wait_ms - 1, wait_t + p
        end
        if wait_t > 0 then
            wait_ms = wait_ms + 1
        end
        REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] =
            0, b, units_left(fast, fill_ms, fill_t), fill_reset, wait_ms
        return REPLY
    end
    -- The new TAT, stored as whole ms and ns rounded up, and read back from that.
    local tat, ns = now + ms, floor(t / l)
    if ns * l < t then
        ns = ns + 1
    end
    if ns >= NS_PER_MS then
        tat, ns = tat + 1, ns - NS_PER_MS
    end
    local after_t = ns * l
    local on_grid = after_t - after_t % fast.grid
    if after_t - on_grid < l then
        after_t = on_grid
    end
    local after_ms = tat - now
    local reset = after_ms
    if after_t > 0 then
        reset = after_ms + 1
    end
    if hit then
        local stored, expires = fast.bare, tat
        if ns > 0 then
            stored, expires = fast.prefix .. varint(NS_PER_MS - ns), tat + 1
        end
        if expires <= now then
            return nil
        end
        call('SET', key, stored, 'PXAT', format('%d', expires))
    end
    REPLY[1], REPLY[2], REPLY[3], REPLY[4], REPLY[5] =
        1, b, units_left(fast, after_ms, after_t), reset, 0
        return REPLY
end

-- What the fast path needs of a parsed rule, or false when the rule is not one it takes.
local function fast_rule(rule)
    local quota = rule.tiers[1]
    if rule.tiers[2] ~= nil or quota.calendar or quota.period then
        return false
    end
    local algo = rule.algo
    local fast = { algo = algo, quota = quota, cost = rule.cost, limit = quota.limit,
        window = quota.window }
    if algo.name == 'fixed' then
        fast.cost_text = string.format('%d', rule.cost)
        fast.run = fixed_run(fast)
    elseif algo.name == 'sliding' then
        fast.run = protect(sliding)
        fast.capacity_ms = RL.mul(quota.limit, quota.window)
        local out = {}
        RL.put_byte(out, RL.FORMAT_V1)
        RL.put_byte(out, algo.id)
        RL.put_byte(out, 1)
        RL.put_varint(out, quota.limit)
        RL.put_varint(out, quota.window)
        RL.put_varint(out, quota.burst)
        fast.prefix = table.concat(out)
    elseif algo.name == 'token' or algo.name == 'gcra' then
        fast.run = protect(bucket)
        fast.span = algo.span(quota)
        -- The quota's rate, worked out (and kept on the quota) by a look at no key.
        algo.view(nil, 0, quota)
        local r = quota.rate
        fast.l, fast.w, fast.b, fast.p, fast.grid = r.l, r.w, r.b, r.p, r.grid
        fast.tol_ms, fast.tol_t = r.tol_ms, r.tol_t
        local x = RL.mul(rule.cost, quota.window)
        fast.cost_ms, fast.cost_t = RL.div_floor(x, quota.limit), (x % quota.limit) * NS_PER_MS
        -- The value with no short number, and the start of one with it (the tag's bit 1).
        fast.bare = RL.encode_short(algo, quota, 0)
        fast.prefix = char(byte(fast.bare, 1) + 2) .. sub(fast.bare, 2)
    else
        return false
    end
    return fast
end

-- Rules by their arguments, one table level per argument (the arguments are interned
-- strings: each level is one lookup, and no key text is built per call): a rule of two
-- arguments (a limit and a window, the commonest) in `two`, two[limit][window]; a
-- longer one in `rules`, its rule under RULE at the end of its path. Both are emptied
-- when they hold 1000 rules.
local RULE = {}
local two, rules, count = {}, {}, 0

-- Parses a rule not seen yet and keeps what the fast path needs of it.
local function learn(command, args)
    -- Every call of the fast path's locals comes after a rule was learned.
    if floor == nil then
        take_locals()
    end
    local ok, rule = pcall(RL.parse_limits, command, args, 1)
    if not ok then
        -- The general path gives the error.
        return false
    end
    local fast
    -- A rule whose numbers the library cannot hold exactly is the general path's to refuse.
    ok, fast = pcall(fast_rule, rule)
    fast = ok and fast
    local length = 0
    for i = 1, #args do
        length = length + #args[i]
    end
    if length > 256 or #args < 2 then
        -- Long arguments (a rule padded with zeros) are not kept, as args.lua does not;
        -- fewer than two are an error the general path gives.
        return fast
    end
    if count >= 1000 then
        two, rules, count = {}, {}, 0
    end
    count = count + 1
    local node = rules
    local last = #args
    if last == 2 then
        node, last = two, 1
    end
    for i = 1, last do
        local child = node[args[i]]
        if child == nil then
            child = {}
            node[args[i]] = child
        end
        node = child
    end
    if last == 1 then
        node[args[2]] = fast
    else
        node[RULE] = fast
    end
    return fast
end

-- The rule kept for `args`: false for one the fast path does not take, nil for one not
-- seen yet.
local function kept(args)
    if args[3] == nil then
        local node = two[args[1]]
        return node and node[args[2]]
    end
    local node = rules
    for i = 1, #args do
        node = node[args[i]]
        if node == nil then
            return nil
        end
    end
    return node[RULE]
end

-- The function of `command` for `step` on one key: the fast path where it answers, else
-- `general`, which answers everything (a refund always). Nothing is written before the
-- answer is certain, so the general path can start afresh; nothing raises (the runs that
-- can are under pcall), so no pcall is paid for the fixed window's hit.
function RL.fast_single(command, step, general)
    if step ~= 'hit' and step ~= 'peek' then
        return general
    end
    local hit = step == 'hit'
    return function(keys, args)
        if #keys == 1 then
            local key = keys[1]
            local fast
            if args[3] == nil then
                -- kept(args), written out for the commonest rule.
                local node = two[args[1]]
                fast = node and node[args[2]]
            else
                fast = kept(args)
            end
            if fast == nil then
                fast = learn(command, args)
            end
            if fast then
                -- GET's error (a key of another type) is a value no run takes.
                local reply = fast.run(fast, key, call_or_error('GET', key), hit)
                if reply then
                    return reply
                end
            end
        end
        return general(keys, args)
    end
end
