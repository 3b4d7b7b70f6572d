-- rule.lua - rules: LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE] (mirrors
-- lib/core/rule.c as the module builds it: offsets, weeks and months are
-- calendars (lua/calendar.lua), zone names are refused with the module's
-- words).

local GRAMMAR_HINT = 'expected LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE], ' ..
    'e.g. 10/1m, 1000/1d:fixed,tz=+08:00 or 100/1s:gcra,burst=200'

-- { name, ms }: longest first where one is a prefix of another; months
-- (ms 0) have no fixed length.
local UNITS = {
    { 'ms', 1 }, { 'mo', 0 }, { 's', 1000 }, { 'm', 60000 },
    { 'h', 3600000 }, { 'd', 86400000 }, { 'w', 604800000 },
}
local MONTHS_MAX = 12
local TZ_OFFSET_MAX_S = 50400

-- quote_into() of rule.c: at most max bytes of text, quotes and
-- backslashes escaped, other unprintable bytes as \xNN, "..." marking a cut.
local function quote_into(text, max)
    local q, n = {}, #text
    for i = 1, (n < max and n or max) do
        local c = byte(text, i)
        if c == 34 or c == 92 then
            q[i] = '\\' .. string.char(c)
        elseif c < 32 or c >= 127 then
            q[i] = fmt('\\x%02x', c)
        else
            q[i] = string.char(c)
        end
    end
    if n > max then
        q[#q + 1] = '...'
    end
    return table.concat(q)
end

-- rule_error() of rule.c: the rule quoted (64 bytes at most), the
-- reason (cut as the core's 200-byte buffer cuts it), the grammar; cut as
-- the module's 400-byte buffer cuts it.
local function rule_fail(text, reason)
    fail(sub('rule "' .. quote_into(text, 64) .. '": ' .. sub(reason, 1, 199) ..
        '; ' .. GRAMMAR_HINT, 1, 399))
end

-- Whether burst x period / limit exceeds ten years, exactly: the products
-- reach 2^62, so doubles decide only when they are clearly apart.
local function too_deep(burst, period, limit)
    local a, b = burst * period, DEPTH_MAX_MS * limit
    if a < b * (1 - 1e-9) then
        return false
    elseif a > b * (1 + 1e-9) then
        return true
    end
    return big_cmp(big_mul(big(period), burst), big_mul(big(DEPTH_MAX_MS),
        limit)) > 0
end

-- calendar_fault() of rule.c for a rule read from a blob: true when its
-- calendar (zones aside: lua/state.lua refuses them) is one the parser
-- could have made.
local function calendar_ok(algo, period, calendar, months, tz_offset)
    if calendar >= 8 or (calendar ~= 0 and not ALGO_FACTS[algo].calendar) then
        return false
    end
    local weeks = floor(calendar / CAL_WEEKS) % 2 == 1
    if calendar >= CAL_MONTHS then
        if months < 1 or months > MONTHS_MAX or period ~= 0 or weeks then
            return false
        end
    elseif months ~= 0 or period < 1 or period > PERIOD_MAX_MS then
        return false
    end
    if (weeks and period % 604800000 ~= 0) or -- whole weeks
        (calendar % 2 == 0 and tz_offset ~= 0) then
        return false
    end
    return tz_offset % 60 == 0 and tz_offset >= -TZ_OFFSET_MAX_S and
        tz_offset <= TZ_OFFSET_MAX_S
end

-- check_rule() of rule.c for a rule read from a blob: true when valid.
local function rule_ok(algo, limit, period, burst, calendar, months,
                       tz_offset)
    if limit < 1 or limit > LIMIT_MAX or
        not calendar_ok(algo, period, calendar, months, tz_offset) then
        return false
    end
    local facts = ALGO_FACTS[algo]
    if facts.burst then
        return burst >= 1 and burst <= LIMIT_MAX and
            not too_deep(burst, period, limit)
    end
    return burst == 0 and limit <= (facts.limit_max or LIMIT_MAX)
end

-- Decimal digits at text[pos]: value (stops growing past max), the number
-- of digits, whether it passed max, and the position after them.
local function read_number(text, pos, max)
    local v, start, over = 0, pos, false
    local c = byte(text, pos)
    while c and c >= 48 and c <= 57 do
        if not over then
            v = v * 10 + c - 48
            if v > max then
                over = true
            end
        end
        pos = pos + 1
        c = byte(text, pos)
    end
    return v, pos - start, over, pos
end

-- read_tz() of rule.c for the value v of tz=: UTC or an offset, in
-- seconds east of UTC; a zone name is refused as the module refuses it
-- (no tz database here).
local function tz_offset_of(text, v)
    if v == 'UTC' then
        return 0
    end
    local c = byte(v, 1)
    if c == 43 or c == 45 then
        local h, m = match(v, '^[+-](%d%d)$'), '00'
        if not h then
            h, m = match(v, '^[+-](%d%d):(%d%d)$')
        end
        if not h or tonumber(m) > 59 or
            tonumber(h) * 3600 + tonumber(m) * 60 > TZ_OFFSET_MAX_S then
            rule_fail(text, 'tz offsets are +HH:MM or -HH:MM, from -14:00 ' ..
                'to +14:00 (e.g. tz=+08:00)')
        end
        local s = tonumber(h) * 3600 + tonumber(m) * 60
        return c == 45 and -s or s
    end
    if #v > 64 or not find(v, '^%a[%w/_+%-%.]*$') or find(v, '..', 1, true) then
        rule_fail(text, 'tz must be UTC, an offset (tz=+08:00) or a zone ' ..
            'name (tz=Asia/Shanghai)')
    end
    rule_fail(text, "zone names need the system's time-zone database, " ..
        'which the Redis module and the Lua script do not read: give the ' ..
        'offset (e.g. tz=+08:00)')
end

-- algo_list() of rule.c: the names of the algorithms with `fact` (nil:
-- all), each after `prefix`, the last after `last`; and the first of them
-- (algo_with() of rule.c).
local function algo_list(fact, prefix, last)
    local names, first = {}, nil
    for a = 0, #ALGO_NAMES do
        if not fact or ALGO_FACTS[a][fact] then
            names[#names + 1] = prefix .. ALGO_NAMES[a]
            first = first or ALGO_NAMES[a]
        end
    end
    local n = #names
    return table.concat(names, ', ', 1, n - 1) .. (n > 1 and last or '') ..
        names[n], first
end

-- read_algo() of rule.c: ":ALGO" at text[pos], if there; the algorithm
-- and the position after it.
local function read_algo(text, pos)
    if byte(text, pos) ~= 58 then
        for a = 0, #ALGO_NAMES do
            if ALGO_FACTS[a].default then
                return a, pos
            end
        end
    end
    local start = pos + 1
    pos = start
    while pos <= #text and byte(text, pos) ~= 44 do
        pos = pos + 1
    end
    local name = sub(text, start, pos - 1)
    for a = 0, #ALGO_NAMES do
        if ALGO_NAMES[a] == name then
            return a, pos
        end
    end
    rule_fail(text, 'unknown algorithm "' .. quote_into(name, 32) ..
        '" (use ' .. (algo_list(nil, '', ' or ')) .. ')')
end

-- read_options() of rule.c: { "," option } at text[pos]. Returns burst
-- (0 if not given) and whether it was, whether tz= was and its offset in
-- seconds, and the position after them.
local function read_options(text, pos)
    local burst, have_burst, have_tz, tz_offset = 0, false, false, 0
    local digits, over
    while byte(text, pos) == 44 do
        pos = pos + 1
        if sub(text, pos, pos + 5) == 'burst=' then
            if have_burst then
                rule_fail(text, 'burst is given twice')
            end
            burst, digits, over, pos = read_number(text, pos + 6, LIMIT_MAX)
            if digits == 0 or over or burst == 0 then
                rule_fail(text,
                    'burst must be a whole number from 1 to 1000000000')
            end
            have_burst = true
        elseif sub(text, pos, pos + 2) == 'tz=' then
            local v = match(text, '^[^,]*', pos + 3)
            pos = pos + 3 + #v
            if have_tz then
                rule_fail(text, 'tz is given twice')
            end
            have_tz = true
            tz_offset = tz_offset_of(text, v)
        else
            rule_fail(text, 'unknown option at byte ' .. pos ..
                ' (the options are burst=N, for gcra, and tz=ZONE, for ' ..
                'fixed and approx)')
        end
    end
    return burst, have_burst, have_tz, tz_offset, pos
end

-- ratel_rule_parse(): LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE] with its
-- messages.
local function parse_rule(text)
    local len = #text
    if len == 0 then
        rule_fail(text, 'empty rule')
    end
    local limit, digits, over, pos = read_number(text, 1, LIMIT_MAX)
    if digits == 0 then
        rule_fail(text, 'LIMIT must be a whole number from 1 to 1000000000')
    end
    if over or limit == 0 then
        rule_fail(text, 'LIMIT must be from 1 to 1000000000')
    end
    if byte(text, pos) ~= 47 then
        rule_fail(text, "expected '/' after the limit")
    end
    local count
    count, digits, over, pos = read_number(text, pos + 1, PERIOD_MAX_MS)
    if digits == 0 then
        count = 1
    end
    if over then
        rule_fail(text, 'PERIOD must be from 1ms to 30d')
    end
    local unit_ms, ustart, unit = 0, pos, nil
    for u = 1, #UNITS do
        local name = UNITS[u][1]
        if sub(text, pos, pos + #name - 1) == name then
            unit, unit_ms = name, UNITS[u][2]
            pos = pos + #name
            break
        end
    end
    if not unit then
        rule_fail(text, 'PERIOD needs a unit: ms, s, m, h, d, w or mo')
    end
    if find(sub(text, pos, pos), '^%a') then
        local word = match(text, '^%a+', ustart)
        rule_fail(text, 'unknown unit "' .. quote_into(word, 16) ..
            '"; the units are ms, s, m, h, d, w and mo (e.g. 20/1m, 20/60s)')
    end
    if count == 0 then
        rule_fail(text, 'PERIOD must be at least 1ms')
    end
    if unit == 'mo' then
        if count > MONTHS_MAX then
            rule_fail(text, 'a period of months must be from 1mo to 12mo')
        end
    elseif count * unit_ms > PERIOD_MAX_MS then
        rule_fail(text, 'PERIOD must be at most 30d')
    end
    local algo, burst, have_burst, have_tz, tz_offset
    algo, pos = read_algo(text, pos)
    burst, have_burst, have_tz, tz_offset, pos = read_options(text, pos)
    if pos <= len then
        rule_fail(text, 'unexpected "' .. quote_into(sub(text, pos), 16) ..
            '" at byte ' .. pos)
    end
    local facts = ALGO_FACTS[algo]
    if have_burst and not facts.burst then
        local names, first = algo_list('burst', '', ' or ')
        rule_fail(text, 'burst applies to ' .. names .. ' rules only (add :' ..
            first .. ')')
    end
    local windows = facts.calendar
    if (have_tz or unit == 'mo') and not windows then
        local names, first = algo_list('calendar', ':', unit == 'mo' and
            ' or ' or ' and ')
        rule_fail(text, unit == 'mo' and 'months are calendar periods: use ' ..
            names .. ' (e.g. 1000/1mo:' .. first .. ')' or
            'tz applies to the window algorithms, ' .. names)
    end
    if facts.limit_max and limit > facts.limit_max then
        rule_fail(text, fmt('a %s rule holds at most %d %s', ALGO_NAMES[algo],
            facts.limit_max, facts.limit_words))
    end
    local period = count * unit_ms
    if facts.burst then
        if not have_burst then
            burst = limit
        end
        if too_deep(burst, period, limit) then
            rule_fail(text, 'burst x period / limit must be at most 10 years ' ..
                '(the bucket would never drain)')
        end
    else
        burst = 0
    end
    local calendar, months = 0, 0
    if unit == 'mo' then
        calendar, months = CAL_MONTHS, count
    elseif unit == 'w' and windows then
        calendar = CAL_WEEKS
    end
    if have_tz then
        calendar = calendar + CAL_TZ
    end
    return { algo = algo, limit = limit, period = period, burst = burst,
        calendar = calendar, months = months, tz_offset = tz_offset }
end

-- ratel_rule_format(): the canonical text, in the largest exact unit
-- (months for a period of months), then the algorithm, burst and tz.
local function format_rule(r)
    local s
    if r.months > 0 then
        s = fmt('%d/%dmo', r.limit, r.months)
    else
        -- weeks name only calendar weeks (7d:fixed is aligned to the epoch)
        local weeks, best = floor(r.calendar / CAL_WEEKS) % 2 == 1, UNITS[1]
        for u = 1, #UNITS do
            local name, ms = UNITS[u][1], UNITS[u][2]
            if ms > 0 and (name ~= 'w' or weeks) and r.period % ms == 0 then
                best = UNITS[u]
            end
        end
        s = fmt('%d/%d%s', r.limit, r.period / best[2], best[1])
    end
    local facts = ALGO_FACTS[r.algo]
    if not facts.default then
        s = s .. ':' .. ALGO_NAMES[r.algo]
    end
    if facts.burst and r.burst ~= r.limit then
        s = s .. ',burst=' .. fmt('%d', r.burst)
    end
    if r.calendar % 2 == 1 then
        local o = r.tz_offset
        local a = o < 0 and -o or o
        s = s .. fmt(',tz=%s%02d:%02d', o < 0 and '-' or '+', floor(a / 3600),
            floor(a / 60) % 60)
    end
    return s
end

-- ratel__rule_same_period(): the same windows - algorithm, period and
-- calendar.
local function rule_same_period(a, b)
    return a.algo == b.algo and a.period == b.period and
        a.calendar == b.calendar and a.months == b.months and
        a.tz_offset == b.tz_offset
end

-- ratel__rule_equal(): the same rule - period, limit and burst.
-- ratel_rule_capacity(): the most one request may cost under the rule.
local function rule_capacity(r)
    return ALGO_FACTS[r.algo].burst and r.burst or r.limit
end

local function rule_equal(a, b)
    return rule_same_period(a, b) and a.limit == b.limit and
        a.burst == b.burst
end

--[[
Parsed rules, kept between calls by the Functions library (the EVAL script
starts afresh each call): keyed by the rule's text, at most 1,024
texts of at most 64 bytes (a longer text is valid only with leading
zeros, and is parsed every time), a cache of lua/internal.lua. A parsed rule is
never modified. Errors are not kept: a malformed rule is parsed, and
refused, every time.
]]
local rule_cache = cache_new()

local function rule_of(text)
    local r = rule_cache.t[text]
    if r then
        return r
    end
    r = parse_rule(text)
    if #text <= 64 then
        cache_put(rule_cache, text, r)
    end
    return r
end
