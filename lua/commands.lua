-- commands.lua - the calls: arguments as module/args.c parses them, and
-- ACQUIRE, PEEK, REFUND, RELEASE, RESET, INFO, SLICE and UNSLICE as
-- module/ratel.c runs them. Each command takes the key (SLICE also its
-- demand key) and the arguments after the operation, args[first..].

-- quote() of module/args.c: 40 bytes at most, unprintable bytes, quotes
-- and backslashes as \xNN.
local function quote_arg(a)
    local q = a:sub(1, 40):gsub('[%z\1-\31\34\92\127-\255]', function(c)
        return fmt('\\x%02x', byte(c))
    end)
    if #a > 40 then
        q = q .. '...'
    end
    return q
end

-- request_option(), OPTIONS, OPTION_LISTS, OPTION_FIRST and OPTION_NEEDED
-- (the request options: ranges, which operation takes which, the one it
-- takes first, the ones it needs) come before lua/internal.lua:
-- scripts/lua-build.sh makes them from include/ratel.h's RATEL_OPTION_MAP.

local function parse_int(a, min, max)
    if not a or #a == 0 or #a > 18 or a:find('[^0-9]') then
        return nil
    end
    local v = tonumber(a)
    if v < min or v > max then
        return nil
    end
    return v
end

-- ratel_options_read() of lib/core/options.c for an option with a value:
-- parse_int() of it; bad_value()'s message when it is not one of its
-- range, with the value given, quoted.
local function option_value(word, a)
    local _, _, min, max, note = request_option(word)
    local v = parse_int(a, min, max)
    if not v then
        fail(fmt('%s must be an integer from %d to %d%s%s', word, min, max,
            note, a and ', not "' .. quote_arg(a) .. '"' or ''))
    end
    return v
end

-- not_an_option() of lib/core/options.c: the commands' one message for a
-- word that is no option of `op`, or one given before.
local function not_an_option(op, a)
    fail('unknown or repeated option "' .. quote_arg(a) ..
        '"; options are ' .. OPTION_LISTS[op])
end

-- ratel_options_check() of lib/core/options.c: check_request() of an
-- ACQUIRE (lua/policy.lua) with its one message.
local function options_check(policy, cost, max_wait)
    local err, i = check_request(policy, cost, max_wait)
    if not err then
        return
    end
    local r = policy[i]
    if err == 'ECOST' then
        fail(fmt('COST %d is more than rule %d ("%s") can ever admit (%d)',
            cost, i, format_rule(r), rule_capacity(r)))
    end
    fail(fmt('MAXWAIT needs every rule to be %s; rule %d ("%s") is %s',
        (algo_list('reserves', '', ' or ')), i, format_rule(r),
        ALGO_NAMES[r.algo]))
end

-- missing() and unsliceable() of ratel_options_check(): an option the
-- operation needs that was not given (`seen`: the bits of those given),
-- and a slice of a policy with a concurrent rule.
local function options_needed(op, seen)
    local word = OPTION_NEEDED[op]
    if word then
        local bit, _, min, max, note = request_option(word)
        if floor(seen / bit) % 2 == 0 then
            fail(fmt('%s is needed: an integer from %d to %d%s', word, min,
                max, note))
        end
    end
end

local function unsliceable(op, policy)
    if op ~= 'SLICE' and op ~= 'UNSLICE' then
        return
    end
    for i = 1, #policy do
        local r = policy[i]
        if ALGO_FACTS[r.algo].leases then
            fail(fmt('a slice cannot be taken of rule %d ("%s"): a %s ' ..
                "rule's permits are leases a request holds and gives back, " ..
                'not a rate to slice', i, format_rule(r), ALGO_NAMES[r.algo]))
        end
    end
end

-- The rules args[i..argc], checked as ratel_policy_init() checks them.
local function parse_rules(args, i, argc)
    local n = argc - i + 1
    if n <= 0 then
        fail('at least one rule is needed')
    end
    if n > MAX_RULES then
        fail('at most 8 rules')
    end
    local policy = {}
    for j = 1, n do
        policy[j] = rule_of(args[i + j - 1])
    end
    for j = 2, n do
        for k = 1, j - 1 do
            if ALGO_FACTS[policy[j].algo].leases and
                ALGO_FACTS[policy[k].algo].leases then
                fail(fmt('policy: rules %d and %d are both %s; a ' ..
                    'policy holds at most one (a decision carries one lease)',
                    k, j, ALGO_NAMES[policy[j].algo]))
            end
            if rule_equal(policy[j], policy[k]) then
                fail(fmt('policy: rule %d ("%s") repeats rule %d', j,
                    format_rule(policy[j]), k))
            end
        end
    end
    return policy
end

--[[
Policies, kept between calls by the Functions library (the EVAL script
starts afresh each call) as the rules they hold are (lua/rule.lua): keyed
by the rules' texts joined by "\0", which no valid rule holds, at most
1,024 of them (a cache of lua/internal.lua). A cached policy's rules are
never modified. It carries its plan (lua/state.lua, plan_of), so that a
call of a known policy on a key of it parses neither, whether it holds
leases, and the table of its replies (lua/policy.lua, report). Errors are
not kept.
]]
local policy_cache = cache_new()

-- ratel_policy_parse(): the rules args[i..argc], checked as
-- ratel_policy_init() checks them.
local function parse_policy(args, i, argc)
    local text = i == argc and args[i] or table.concat(args, '\0', i, argc)
    local policy = policy_cache.t[text]
    if policy then
        return policy
    end
    policy = parse_rules(args, i, argc)
    policy.plan, policy.leases = plan_of(policy), has_leases(policy)
    policy.reply = {}
    if #text <= 64 * MAX_RULES then
        cache_put(policy_cache, text, policy)
    end
    return policy
end

-- ratel__cmd_parse() with ratel_options_read() of lib/core/options.c:
-- the first argument (RELEASE's lease, SLICE's want, UNSLICE's unspent),
-- options (any order, case-insensitive, once each, as request_option()
-- says) until the first argument starting with a digit, then the rules.
-- Returns the policy, cost, peek, max wait, AT (nil when not given), the
-- first argument, renew, TTL, HOLDER (nil when not given) and UNTIL.
local function parse_args(op, args, first)
    local argc = #args
    if argc - first + 1 > 2 * MAX_RULES + 16 then
        fail('at most 8 rules')
    end
    local allowed, seen = OPTIONS[op], 0
    local cost, peek, max_wait, at, lead, renew = 1, op == 'PEEK', 0, nil,
        nil, false
    local ttl, holder, until_ms
    if OPTION_FIRST[op] then
        lead = option_value(OPTION_FIRST[op], args[first])
        first = first + 1
    end
    local i = first
    while i <= argc do
        local a = args[i]
        local c = byte(a, 1)
        if not c or (c >= 48 and c <= 57) then
            break
        end
        local opt = upper(a)
        local bit, kind = request_option(opt)
        if not bit or floor(allowed / bit) % 2 == 0 or
            floor(seen / bit) % 2 == 1 then
            not_an_option(op, a)
        end
        seen = seen + bit
        -- A flag is its word alone; a value takes the next argument. Where
        -- each goes: ratel_options_request() and ratel__cmd_parse().
        if kind == 'flag' then
            if opt == 'PEEK' then
                peek = true
            else
                renew = true
            end
        else
            i = i + 1
            local v = option_value(opt, args[i])
            if opt == 'COST' then
                cost = v
            elseif opt == 'MAXWAIT' then
                max_wait = v
            elseif opt == 'TTL' then
                ttl = v
            elseif opt == 'HOLDER' then
                holder = v
            elseif opt == 'UNTIL' then
                until_ms = v
            else
                at = v
            end
        end
        i = i + 1
    end
    if op == 'INFO' then
        if i <= argc then
            not_an_option(op, args[i])
        end
        return nil, cost, peek, max_wait, at
    end
    local policy = parse_policy(args, i, argc)
    if op == 'RELEASE' and not has_leases(policy) then
        fail('RELEASE needs a policy with a concurrent rule (e.g. ' ..
            '10/30s:concurrent)')
    end
    options_needed(op, seen)
    unsliceable(op, policy)
    if op == 'ACQUIRE' or op == 'PEEK' then
        options_check(policy, cost, max_wait)
    end
    return policy, cost, peek, max_wait, at, lead, renew, ttl, holder,
        until_ms
end

-- ------------------------------------------------------------- commands

-- The key's bytes, false for no key; WRONGTYPE for other types, and an
-- empty string is not ratel state.
local function read_key(key)
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
        raise(v)
    end
    if v == '' then
        corrupt()
    end
    return v
end

-- The server's clock as run()'s caller read it for this call (nil: not
-- read yet): ratel_acquire_many reads it once for all its items.
local call_now_us

local function now_of(at)
    if at then
        return at * 1000
    end
    if call_now_us then
        return call_now_us
    end
    local t = redis.call('TIME') -- two decimal strings; arithmetic reads them
    return t[1] * 1000000 + t[2]
end

-- The records for `policy`: the key's own when it holds exactly these
-- rules, else converted from what it holds. Also whether they were
-- converted from another policy's records.
local function records_of(policy, old, now_us)
    local plan = policy.plan
    if plan then
        local recs = planned_records(plan, old)
        if recs then
            return recs, false
        end
    end
    if not old then
        return convert(policy, {}, now_us), false
    end
    local olds, same = parse_blob(old, policy)
    if same then
        return olds, false
    end
    return convert(policy, olds, now_us), true
end

-- Writes the new bytes when they differ from the old, with the absolute
-- expiry at the instant the state is empty again (or deletes the key).
local function write_key(key, old, new, now_us, reset_ms)
    if new == old or (not old and not new) then
        return
    end
    if old then
        untrust(old)
    end
    if not new then
        redis.call('DEL', key)
    else
        redis.call('SET', key, new, 'PXAT',
            fmt('%d', cdiv(now_us, 1000) + reset_ms))
    end
end

-- ACQUIRE, and PEEK (ACQUIRE PEEK, which never writes).
local function acquire(op, key, args, first)
    local policy, cost, peek, max_wait, at = parse_args(op, args, first)
    local old = read_key(key)
    local now_us = now_of(at)
    local recs, converted = records_of(policy, old, now_us)
    local allowed, at_us, wait_us = decide_all(recs, now_us, cost, max_wait)
    local new = old
    if not allowed or peek then
        for i = 1, #recs do
            ALGORITHMS[recs[i].algo].status(recs[i], now_us)
        end
        -- A denied key written under other rules keeps its converted state
        -- so that a retry decides on the same state; new keys stay unstored.
        if converted and not peek then
            new = serialize(recs)
        else
            planned_kept(recs, old)
        end
    else
        for i = 1, #recs do
            local r = recs[i]
            ALGORITHMS[r.algo].commit(r, now_us, cost, at_us)
        end
        new = serialize(recs)
    end
    local d = report(policy, recs, allowed, wait_us)
    write_key(key, old, new, now_us, d[5])
    -- A policy with a concurrent rule answers the lease (0: none taken).
    if policy.leases then
        d[8] = 0
        for i = 1, #recs do
            if ALGO_FACTS[recs[i].algo].leases and allowed and not peek then
                d[8] = recs[i].v_lease
            end
        end
    end
    return d
end

-- The end of change_key() of policy.c, once REFUND or RELEASE changed the
-- records: the key as a peek sees it, written, or deleted when empty.
local function change_key(policy, key, old, recs, now_us)
    local allowed = decide_all(recs, now_us, 1, 0)
    local empty = true
    for i = 1, #recs do
        ALGORITHMS[recs[i].algo].status(recs[i], now_us)
        empty = empty and recs[i].reset_ms == 0
    end
    local d = report(policy, recs, allowed, 0)
    write_key(key, old, not empty and serialize(recs) or nil, now_us, d[5])
    return d
end

local function refund(op, key, args, first)
    local policy, cost, _, _, at = parse_args(op, args, first)
    local old = read_key(key)
    local now_us = now_of(at)
    local recs = records_of(policy, old, now_us)
    for i = 1, #recs do
        ALGORITHMS[recs[i].algo].refund(recs[i], now_us, cost)
    end
    return change_key(policy, key, old, recs, now_us)
end

-- RELEASE: the lease of the (one) concurrent rule released, or renewed;
-- REFUND's reply and whether the lease was held (1 or 0).
local function release(op, key, args, first)
    local policy, _, _, _, at, lease, renew = parse_args(op, args, first)
    local old = read_key(key)
    local now_us = now_of(at)
    local recs, held = records_of(policy, old, now_us), false
    for i = 1, #recs do
        if ALGO_FACTS[recs[i].algo].leases then
            held = ALGORITHMS[recs[i].algo].lease(recs[i], now_us, lease,
                renew)
        end
    end
    local d = change_key(policy, key, old, recs, now_us)
    d[8] = held and 1 or 0
    return d
end

-- The demand key's bytes, false for no key; WRONGTYPE for other types.
local function read_demand(key)
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
        raise(v)
    end
    return v
end

-- SLICE, as slice_command() of module/ratel.c: with HOLDER and a demand
-- key other than the key, the holder's want noted beside the key and the
-- slice its fair share; the key written only when something is granted,
-- the demand record always (expiring at 2 x TTL).
local function slice(op, key, args, first, demand_key)
    local policy, _, _, _, at, want, _, ttl, holder = parse_args(op, args,
        first)
    local old = read_key(key)
    local now_us = now_of(at)
    local now_ms = floor(now_us / 1000)
    local total, demand = want, nil
    if holder and demand_key ~= key then
        demand, total = demand_note(read_demand(demand_key), now_ms, ttl,
            holder, want)
    end
    local recs = records_of(policy, old, now_us)
    local granted, expires_us, d = policy_slice(policy, recs, now_us, want,
        total, ttl * 1000)
    if granted > 0 then
        write_key(key, old, serialize(recs), now_us, d[5])
    end
    if demand then
        redis.call('SET', demand_key, demand, 'PXAT',
            fmt('%d', now_ms + 2 * ttl))
    end
    local expires_ms = floor(expires_us / 1000)
    return { granted, expires_ms, granted > 0 and expires_ms - now_ms or 0,
        d[2], d[3], d[4], d[5], d[6] }
end

-- UNSLICE, as unslice_command() of module/ratel.c: the unspent permits
-- given back (REFUND's change) while the slice lives, nothing from its
-- end on.
local function unslice(op, key, args, first)
    local policy, _, _, _, at, unspent, _, _, _, until_ms = parse_args(op,
        args, first)
    local old = read_key(key)
    local now_us = now_of(at)
    local recs = records_of(policy, old, now_us)
    local returned, d = unspent, nil
    if policy_slice_return(recs, now_us, unspent, until_ms * 1000) then
        d = change_key(policy, key, old, recs, now_us)
    else
        returned, d = 0, peek_report(policy, recs, now_us)
    end
    return { returned, d[2], d[3], d[4], d[5], d[6] }
end

-- Deletes the key's state: 1, or 0 when there was none. A key that holds
-- anything else is refused as ACQUIRE refuses it, and kept.
local function reset(op, key, args, first)
    if #args >= first then
        wrong_arity(op)
    end
    local old = read_key(key)
    if not old then
        return 0
    end
    parse_blob(old)
    return redis.call('DEL', key)
end

-- INFO: the common fields, then each algorithm's own (ALGO_FACTS[algo].fields,
-- from include/ratel.h's map), read from its record after its status.
local function info(op, key, args, first)
    local value = {
        runs = function(_, runs) return runs end,
        granularity_ms = function(r) return 2 ^ r.shift end,
        tat_us = function(r) return r.tat_hi * TWO32 + r.tat_lo end,
        window_start_ms = function(r) return r.start end,
        last_lease = function(r) return r.last end,
    }
    local _, _, _, _, at = parse_args(op, args, first)
    local old = read_key(key)
    local now_us = now_of(at)
    if not old then
        return {}
    end
    local recs, out = parse_blob(old), {}
    for i = 1, #recs do
        local r = recs[i]
        local stored_runs = r.n
        ALGORITHMS[r.algo].status(r, now_us)
        local e = { { ok = 'rule' }, { ok = format_rule(r) }, { ok = 'algo' },
            { ok = ALGO_NAMES[r.algo] }, { ok = 'used' }, r.used,
            { ok = 'remaining' }, r.remaining, { ok = 'reset_after_ms' },
            r.reset_ms }
        -- The names are the map's (include/ratel.h), the values the
        -- algorithm's (its entry's info), in the same order.
        local v, k = { ALGORITHMS[r.algo].info(r, stored_runs) }, 0
        for name in ALGO_FACTS[r.algo].fields:gmatch('[%w_]+') do
            k = k + 1
            e[9 + 2 * k], e[10 + 2 * k] = { ok = name }, v[k]
        end
        out[i] = e
    end
    return out
end

-- Each operation: its function, the fewest arguments after the keys
-- (the module's arity) and its keys.
local COMMANDS = {
    ACQUIRE = { acquire, 1, 1 }, PEEK = { acquire, 1, 1 },
    REFUND = { refund, 1, 1 }, RELEASE = { release, 1, 1 },
    RESET = { reset, 0, 1 }, INFO = { info, 0, 1 },
    SLICE = { slice, 2, 2 }, UNSLICE = { unslice, 2, 1 },
}

-- Runs the operation named `name` (any case) on keys[1] with
-- args[first..]: its reply, or its error reply with nothing written.
-- now_us, if given, is the server's clock already read (ratel_acquire_many
-- reads TIME once for all its items); AT still overrides it.
local function run(name, keys, args, first, now_us)
    call_now_us = now_us
    local op = COMMANDS[name] and name or upper(name)
    local command = COMMANDS[op]
    if not command then
        return { err = 'ERR ratel: unknown operation "' .. quote_arg(name) ..
            '"; use ACQUIRE, PEEK, REFUND, RELEASE, RESET, INFO, SLICE or ' ..
            'UNSLICE' }
    end
    if #keys ~= command[3] or #args - first + 1 < command[2] then
        return { err = "ERR wrong number of arguments for 'ratel." ..
            string.lower(op) .. "' command" }
    end
    take_failure()
    records_reuse()
    local ok, result = pcall(command[1], op, keys[1], args, first, keys[2])
    if ok then
        return result
    end
    local reply = take_failure()
    if reply then
        return reply
    end
    return { err = 'ERR ratel: internal error in ratel.lua: ' .. tostring(result) }
end
