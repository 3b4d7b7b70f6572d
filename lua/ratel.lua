--[[
ratel.lua - ratel's rate limiter as one Redis script, for servers where
MODULE LOAD is not allowed. It behaves exactly as the ratel.so module
(docs/commands.md): same arguments, same replies, same stored bytes
(docs/state-format.md), same expiry. Loading and calling it: docs/lua.md.

    EVALSHA sha 1 KEY ACQUIRE [COST n] [PEEK] [MAXWAIT ms] [AT unix_ms] rule...
    EVALSHA sha 1 KEY REFUND [COST n] [AT unix_ms] rule...
    EVALSHA sha 1 KEY RESET
    EVALSHA sha 1 KEY INFO [AT unix_ms]

This file is a transcription of the C core (src/core/*.c) into Lua 5.1,
function for function, so that the two can be read side by side; the
conformance driver (tests/integration/conform.c) runs both on random
traces and compares replies, bytes and expiry after every operation.
Ahead of it, a fast path decides the common ACQUIRE inline and hands
everything else to the transcription (see "fast path" below: it is there
because Redis runs the whole chunk on every call).

Numbers: Lua 5.1 has only doubles, exact for integers below 2^53. Every
value of sliding, fixed and approx stays below that by design. gcra works
in units of 1/LIMIT microsecond, where values reach 2^85 in extreme but
valid cases (1e9/30d, clock steps); it computes in plain doubles when a
bound check proves every intermediate fits, and otherwise with the small
exact big-integer helpers below.

Every reply is computed before anything is written, and the script never
raises: a Lua error would be a bug, and is reported as one with nothing
written (the transcription's pcall catches it; the fast path only does
arithmetic on values it has checked, and struct calls on lengths it has
checked).
]]

local floor, ceil = math.floor, math.ceil
local byte, sub, upper, match, find, rep = string.byte, string.sub,
    string.upper, string.match, string.find, string.rep
local spack, sunpack = struct.pack, struct.unpack

local LIMIT_MAX = 1000000000
local PERIOD_MAX_MS = 2592000000
local MAX_RULES = 8
local SLIDING_CAP = 256
local STATE_MAX = 4 + MAX_RULES * (24 + 8 * SLIDING_CAP)
local DEPTH_MAX_MS = 3650 * 86400000
local MAX_WAIT_MS = PERIOD_MAX_MS
local AT_MAX = 9007199254740
local SCALE = 65536
local TWO32 = 4294967296
local STORED_MS_MAX = 2 ^ 44
local ALGO_SLIDING, ALGO_FIXED, ALGO_APPROX, ALGO_GCRA = 0, 1, 2, 3
-- INFO's "used" is an int64 in the core; a Lua number is sent as a C
-- long long, so the largest double below 2^63 stands for INT64_MAX.
local USED_MAX = 2 ^ 63 - 1024
-- The fast path's gcra values stay below this (see there).
local EXACT = 2 ^ 53 - 2

--[[
--------------------------------------------------------------- fast path

Redis runs this whole chunk on every call, and every `local function`
below it is a closure created anew each time (about 110 of them, and the
garbage they leave). So the common call is decided here first, inline,
with no closure and one table: ACQUIRE (and RESET) on a key that is new
or holds exactly the call's rules, in the value ranges where plain
doubles are exact. Anything else - another operation, an error of any
kind, a key written under other rules (conversion), a corrupt or foreign
blob, a sliding rule that must coarsen or rebase, gcra values of 2^53 and
more - leaves this block with `break` before anything is written, and
the transcription below decides the call from scratch (it reads the key
and the clock again). The fast path computes what that code computes,
step for step (the comments name the functions it inlines); the
conformance driver runs both on the same traces, and its traces take
both paths. Costs: docs/lua.md.
]]
repeat
    local op = ARGV[1]
    if op ~= 'ACQUIRE' then
        if not op then
            break
        end
        op = upper(op)
        if op == 'RESET' and #KEYS == 1 and #ARGV == 1 then
            return redis.call('DEL', KEYS[1])
        end
        if op ~= 'ACQUIRE' then
            break
        end
    end
    local argc = #ARGV
    if #KEYS ~= 1 or argc < 2 or argc > 2 * MAX_RULES + 17 then
        break
    end

    -- parse_args(): options until the first word starting with a digit.
    local cost, peek, max_wait, at, has_cost, has_wait = 1, false, 0, nil,
        false, false
    local i, bad = 2, false
    while i <= argc do
        local a = ARGV[i]
        local c = byte(a, 1)
        if c and c >= 48 and c <= 57 then
            break
        end
        local o = c and upper(a)
        if o == 'PEEK' and not peek then
            peek = true
        else
            local v = ARGV[i + 1]
            if not c or not v or #v == 0 or #v > 18 or find(v, '[^0-9]') then
                bad = true
                break
            end
            v = tonumber(v)
            if o == 'AT' and not at and v <= AT_MAX then
                at = v
            elseif o == 'COST' and not has_cost and v >= 1 and v <= LIMIT_MAX then
                cost, has_cost = v, true
            elseif o == 'MAXWAIT' and not has_wait and v <= MAX_WAIT_MS then
                max_wait, has_wait = v, true
            else
                bad = true
                break
            end
            i = i + 1
        end
        i = i + 1
    end
    local n = argc - i + 1
    if bad or n < 1 or n > MAX_RULES then
        break
    end

    local key = KEYS[1]
    local old = redis.pcall('GET', key)
    local len = 0
    if old then
        if type(old) ~= 'string' then
            break -- WRONGTYPE
        end
        -- parse_blob(): "RT", version 1, as many records as rules.
        len = #old
        local r1, r2, r3, r4 = byte(old, 1, 4)
        if len < 4 or len > STATE_MAX or r1 ~= 0x52 or r2 ~= 0x54 or
            r3 ~= 1 or r4 ~= n then
            break
        end
    end
    local now_us
    if at then
        now_us = at * 1000
    else
        local t = redis.call('TIME')
        now_us = t[1] * 1000000 + t[2] -- strings, converted as tonumber()
    end
    local now_ms = floor(now_us / 1000)

    --[[
    Each rule: parse_rule(), its record (parse_record(), which must hold the
    same rule), and its verdict (the *_decide() functions, and decide_all()
    and report() as far as verdicts go). What the commit needs is kept in
    V, the one table a call makes (tables cost the collector more than
    anything else here): slots 1-7 are the reply, then each rule has
    SLOTS slots from 7 + (j - 1) x SLOTS on, named below: the rule, then
    A..F, whose meaning depends on the algorithm, and the sliding runs.
    Slot 8 is cleared before V is returned: Redis reads an array reply up
    to the first nil. All quotients have numerators under 2^52, where
    floor(a / b) and ceil(a / b) of doubles are exact.
    ]]
    local ALGO, LIMIT, PERIOD, BURST, A, B, C, D, E, F, RUNS, SLOTS =
        1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 11
    local V = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
    local pos = 5
    local all_ok, at_us, retry_us, deny_rule = true, now_us, 0, 0
    for j = 1, n do
        local text = ARGV[i + j - 1]
        local ls, cs, unit, rest = match(text, '^(%d+)/(%d*)(%l+)(.*)$')
        if not ls then
            bad = true
            break
        end
        local limit = tonumber(ls)
        local count = (cs == '' or cs == '1') and 1 or tonumber(cs)
        local unit_ms = unit == 's' and 1000 or unit == 'm' and 60000 or
            unit == 'ms' and 1 or unit == 'h' and 3600000 or
            unit == 'd' and 86400000 or 0
        local period = count * unit_ms
        if limit < 1 or limit > LIMIT_MAX or period < 1 or
            period > PERIOD_MAX_MS then
            bad = true
            break
        end
        local algo, burst = -1, 0
        if rest == '' or rest == ':sliding' then
            algo = ALGO_SLIDING
        elseif rest == ':fixed' then
            algo = ALGO_FIXED
        elseif rest == ':approx' then
            algo = ALGO_APPROX
        elseif rest == ':gcra' then
            algo, burst = ALGO_GCRA, limit
        else
            local b = match(rest, '^:gcra,burst=(%d+)$')
            burst = b and tonumber(b) or 0
            -- too_deep() is decided here only when clearly not.
            if burst >= 1 and burst <= LIMIT_MAX and
                burst * period < DEPTH_MAX_MS * limit * (1 - 1e-9) then
                algo = ALGO_GCRA
            end
        end
        if algo < 0 or cost > (algo == ALGO_GCRA and burst or limit) or
            (max_wait > 0 and algo ~= ALGO_GCRA) then
            bad = true
            break
        end
        for k = 7, 7 + (j - 2) * SLOTS, SLOTS do
            if V[k + ALGO] == algo and V[k + LIMIT] == limit and
                V[k + PERIOD] == period and V[k + BURST] == burst then
                bad = true
            end
        end
        if bad then
            break
        end
        local b = 7 + (j - 1) * SLOTS
        V[b + ALGO], V[b + LIMIT], V[b + PERIOD], V[b + BURST] =
            algo, limit, period, burst
        local avail = len - pos + 1
        local ok, retry = true, 0
        if algo == ALGO_SLIDING then
            -- A = shift, B = base, C = stored runs, D = live total, E =
            -- position of the first live run's bytes, F = live runs; RUNS
            -- = the stored runs as flat (offset, count) pairs. sl_scan()
            -- and sl_decide().
            local shift, base, nr, total, R = 0, 0, 0, 0, nil
            if old then
                if avail < 24 then
                    bad = true
                    break
                end
                local ra, lo, hi, rl, rp
                ra, shift, rl, rp, lo, hi, nr, total =
                    sunpack('<BBI4I4I4I4HI4', old, pos)
                if ra ~= 0 or rl ~= limit or rp ~= period or shift > 30 or
                    nr > SLIDING_CAP or avail < 24 + 8 * nr or hi >= 4096 or
                    total > LIMIT_MAX or (nr == 0) ~= (total == 0) then
                    bad = true
                    break
                end
                base = hi * TWO32 + lo
                if nr > 0 then
                    R = { sunpack('<' .. rep('I4', 2 * nr), old, pos + 24) }
                    local prev, sum = -1, 0
                    for k = 1, 2 * nr, 2 do
                        local off, cnt = R[k], R[k + 1]
                        if off <= prev or cnt == 0 then
                            bad = true
                            break
                        end
                        sum = sum + cnt
                        prev = off
                    end
                    if bad or sum ~= total or base + prev >= STORED_MS_MAX then
                        bad = true
                        break
                    end
                end
                pos = pos + 24
            end
            local cutoff, drop = now_ms - period, 0
            while drop < nr and base + R[2 * drop + 1] <= cutoff do
                total = total - R[2 * drop + 2]
                drop = drop + 1
            end
            if total + cost > limit then
                ok = false
                local need, acc = total + cost - limit, 0
                for k = drop, nr - 1 do
                    acc = acc + R[2 * k + 2]
                    if acc >= need then
                        retry = (base + R[2 * k + 1] + period) * 1000 - now_us
                        break
                    end
                end
            end
            V[b + A], V[b + B], V[b + C], V[b + D], V[b + E], V[b + F], V[b + RUNS] =
                shift, base, nr, total, pos + 8 * drop, nr - drop, R
            pos = pos + 8 * nr
        elseif algo == ALGO_FIXED or algo == ALGO_APPROX then
            -- The stored window start, count (approx: cur) and prev; then
            -- A = the window holding now, B = its count, C = prev (approx:
            -- window_of(), approx_view()), D = prev's weight.
            local stored, x, y = 0, 0, 0
            if old then
                local size = algo == ALGO_FIXED and 22 or 26
                if avail < size then
                    bad = true
                    break
                end
                local ra, flags, rl, rp, lo, hi
                if algo == ALGO_FIXED then
                    ra, flags, rl, rp, lo, hi, x = sunpack('<BBI4I4I4I4I4', old,
                        pos)
                else
                    ra, flags, rl, rp, lo, hi, x, y =
                        sunpack('<BBI4I4I4I4I4I4', old, pos)
                end
                if ra ~= algo or flags ~= 0 or rl ~= limit or rp ~= period or
                    hi >= 4096 or x > LIMIT_MAX or y > LIMIT_MAX then
                    bad = true
                    break
                end
                stored = hi * TWO32 + lo
                pos = pos + size
            end
            local ws
            if now_ms < stored + period then
                ws = stored
            elseif now_ms < stored + 2 * period then
                ws = stored + period
            else
                ws = now_ms - now_ms % period
                if stored > ws then
                    ws = stored
                end
            end
            local cur, prev = 0, 0
            if stored == ws then
                cur, prev = x, y
            elseif stored + period == ws then
                prev = x
            end
            V[b + A], V[b + B], V[b + C] = ws, cur, prev
            if algo == ALGO_FIXED then
                if cur + cost > limit then
                    ok, retry = false, (ws + period) * 1000 - now_us
                end
            else
                local el = now_ms > ws and now_ms - ws or 0
                local w = floor((period - el) * SCALE / period)
                V[b + D] = w
                if prev * w + (cur + cost) * SCALE > limit * SCALE then
                    -- approx_first_fit(), only on a denial: a closure here.
                    local function first_fit(p, need)
                        if need > limit then
                            return period
                        elseif p == 0 then
                            return 0
                        end
                        local q = floor((limit - need) * SCALE / p)
                        if q >= SCALE then
                            return 0
                        end
                        local e = period - ceil((q + 1) * period / SCALE) + 1
                        return e < 0 and 0 or e
                    end
                    local e = first_fit(prev, cur + cost)
                    local when = ws + e
                    if e >= period then
                        e = first_fit(cur, cost)
                        when = e < period and ws + period + e or ws + 2 * period
                    end
                    local d = when * 1000 - now_us
                    ok, retry = false, d > 0 and d or 0
                end
            end
        else
            -- A = x, TAT - now in 1/LIMIT us, or -1 for a TAT in the past
            -- (only max(x, 0) and max(x, w >= 0) are ever used); B = T.
            -- gc_x() and gc_decide(). The core's values are 128-bit; here
            -- each sum or product of exact integers is checked against
            -- EXACT = 2^53 - 2 as computed: rounding is monotonic and
            -- EXACT is a double, so a result below it is exact, and one
            -- that is not (its true value is >= EXACT) sends the call to
            -- the big-integer path below. Quotients of values below EXACT
            -- by floor() or ceil() are exact too.
            local T = period * 1000
            local tau = T * burst
            if tau >= EXACT then
                bad = true
                break
            end
            local x = -1
            if old then
                if avail < 26 then
                    bad = true
                    break
                end
                local ra, flags, rl, rp, rb, lo, hi, rem =
                    sunpack('<BBI4I4I4I4I4I4', old, pos)
                if ra ~= ALGO_GCRA or flags ~= 0 or rl ~= limit or
                    rp ~= period or rb ~= burst or hi >= 2097152 or
                    rem >= limit then
                    bad = true
                    break
                end
                local d = hi * TWO32 + lo - now_us
                if d >= 0 then
                    x = d * limit + rem
                    if x >= EXACT then
                        bad = true
                        break
                    end
                end
                pos = pos + 26
            end
            V[b + A], V[b + B] = x, T
            local a = (x > 0 and x or 0) + cost * T
            if a >= EXACT then
                bad = true
                break
            end
            a = a - tau
            if a > 0 then
                ok, retry = false, ceil(a / limit)
            end
            -- decide_all(): a reservation waits for the latest rule.
            if now_us + retry > at_us then
                at_us = now_us + retry
            end
        end
        if not ok then
            all_ok = false
            if retry > retry_us then
                retry_us, deny_rule = retry, j - 1
            end
        end
    end
    if bad or (old and pos ~= len + 1) then
        break
    end

    -- decide_all(): with MAXWAIT, a request every gcra rule admits within
    -- it is admitted at that instant.
    local allowed, wait_us = all_ok, 0
    if all_ok then
        at_us = now_us
    elseif max_wait > 0 and at_us - now_us <= max_wait * 1000 then
        allowed, wait_us = true, at_us - now_us
    else
        at_us = now_us
    end

    -- Commit (new bytes and status) or status only: the *_commit() and
    -- *_status() functions, serialize() and report().
    local commit = allowed and not peek
    -- The first record is packed after the blob's header (c0: a whole
    -- string; struct copies it byte by byte, so long strings are joined
    -- with .., which copies with memcpy).
    local new = n == 1 and 'RT\1\1' or 'RT\1' .. string.char(n)
    local rule, remaining, reset_ms = deny_rule, LIMIT_MAX + 1, 0
    for j = 1, n do
        local b = 7 + (j - 1) * SLOTS
        local algo, limit, period = V[b + ALGO], V[b + LIMIT], V[b + PERIOD]
        local used, reset_us, rec
        local head = j == 1 and new or ''
        if algo == ALGO_SLIDING then
            local shift, base, nr, total, e, keep, R =
                V[b + A], V[b + B], V[b + C], V[b + D], V[b + E], V[b + F], V[b + RUNS]
            if commit then
                -- sl_plan() and sl_commit(): join the last run, or a new
                -- run after the ones still live.
                local t, last_off, last_n = now_ms, 0, cost
                if keep > 0 then
                    if keep <= SLIDING_CAP / 8 and shift > 0 then
                        shift = shift - 1
                    end
                    local g = 2 ^ shift
                    t = floor((now_ms + g - 1) / g) * g
                    if t <= base + R[2 * nr - 1] then
                        last_off, last_n, keep = R[2 * nr - 1], R[2 * nr] + cost,
                            keep - 1
                    elseif keep == SLIDING_CAP or t - base > TWO32 - 1 then
                        bad = true -- coarsen or rebase
                        break
                    else
                        last_off = t - base
                    end
                else
                    shift, base = 0, t
                end
                total = total + cost
                local hi = floor(base / TWO32)
                rec = spack('<c0BBI4I4I4I4HI4', head, 0, shift, limit, period,
                    base - hi * TWO32, hi, keep + 1, total) ..
                    sub(old or '', e, e + 8 * keep - 1) ..
                    spack('<I4I4', last_off, last_n)
                reset_us = (base + last_off + period) * 1000 - now_us
            elseif nr > 0 then
                reset_us = (base + R[2 * nr - 1] + period) * 1000 - now_us
            else
                reset_us = 0
            end
            used = total
        elseif algo == ALGO_FIXED or algo == ALGO_APPROX then
            local ws, cur, prev = V[b + A], V[b + B], V[b + C]
            if commit then
                cur = cur + cost
                local hi = floor(ws / TWO32)
                if algo == ALGO_FIXED then
                    rec = spack('<c0BBI4I4I4I4I4', head, 1, 0, limit, period,
                        ws - hi * TWO32, hi, cur)
                else
                    rec = spack('<c0BBI4I4I4I4I4I4', head, 2, 0, limit, period,
                        ws - hi * TWO32, hi, cur, prev)
                end
            end
            if algo == ALGO_FIXED then
                used = cur
                reset_us = cur > 0 and (ws + period) * 1000 - now_us or 0
            else
                used = cur + ceil(prev * V[b + D] / SCALE)
                -- ap_reset_ms()
                reset_us = cur > 0 and (ws + 2 * period) * 1000 - now_us or
                    prev > 0 and (ws + period) * 1000 - now_us or 0
            end
        else
            local x, T, burst = V[b + A], V[b + B], V[b + BURST]
            if commit then
                -- gc_commit() and gc_store(): charged from max(TAT, at).
                local w = (at_us - now_us) * limit
                x = (x > w and x or w) + cost * T
                local q = floor(x / limit)
                local rem = x - q * limit
                local tat = now_us + q
                if x >= EXACT or tat >= EXACT then
                    bad = true
                    break
                end
                local hi = floor(tat / TWO32)
                rec = spack('<c0BBI4I4I4I4I4I4', head, 3, 0, limit, period,
                    burst, tat - hi * TWO32, hi, rem)
                reset_us = rem > 0 and q + 1 or q
            elseif x > 0 then
                reset_us = ceil(x / limit)
            else
                reset_us = 0
            end
            -- gc_counts(): permits owed, out of the burst.
            used = x > 0 and ceil(x / T) or 0
            limit = burst
        end
        if rec then
            new = j == 1 and rec or new .. rec
        end
        -- report(): the fewest permits left binds an admitted request.
        local left = used < limit and limit - used or 0
        if left < remaining then
            remaining = left
            if allowed then
                rule = j - 1
            end
        end
        if reset_us > 0 then
            reset_us = ceil(reset_us / 1000)
            if reset_us > reset_ms then
                reset_ms = reset_us
            end
        end
    end
    if bad then
        break
    end
    -- write_key(): a number argument reaches Redis as an integer (%.17g).
    if commit and new ~= old then
        redis.call('SET', key, new, 'PXAT', ceil(now_us / 1000) + reset_ms)
    end
    V[1], V[2], V[3], V[4], V[5], V[6], V[7], V[8] = allowed and 1 or 0,
        V[7 + rule * SLOTS + LIMIT], remaining,
        allowed and 0 or ceil(retry_us / 1000), reset_ms, rule,
        ceil(wait_us / 1000), nil
    return V
until true

local fmt, unpack_ = string.format, unpack
local ALGO_NAMES = { [0] = 'sliding', 'fixed', 'approx', 'gcra' }

-- ------------------------------------------------------------- errors

-- An error reply is kept here and main() is left with error(): the pcall
-- around it returns the reply, and nothing is written once one is raised.
-- (Redis's pcall turns a raised table into a string, hence the upvalue.)
local failure

local function raise(reply)
    failure = reply
    error('ratel', 0)
end

local function fail(text)
    raise({ err = 'ERR ratel: ' .. text })
end

local function corrupt()
    fail('key holds a value that is not ratel state')
end

local function wrong_arity(op)
    raise({ err = "ERR wrong number of arguments for 'ratel." ..
        string.lower(op) .. "' command" })
end

-- ----------------------------------------------------- integer helpers

-- floor(a / b) for integers 0 <= a < 2^53, b >= 1. The double quotient is
-- already right there; the correction makes that independent of rounding.
local function idiv(a, b)
    local q = floor(a / b)
    local r = a - q * b
    if r < 0 then
        q = q - 1
    elseif r >= b then
        q = q + 1
    end
    return q
end

local function cdiv(a, b)
    local q = idiv(a, b)
    if q * b ~= a then
        return q + 1
    end
    return q
end

--[[
Big integers for gcra's slow path: non-negative, little-endian arrays of
limbs in base 2^21. A limb times any factor below 2^32 plus a carry stays
below 2^53, and so does a remainder below 2^32 shifted by one limb: both
multiplication and division by such "small" numbers are exact. Divisions
by the emission interval T = period_ms x 1000 (up to 2^42) are done as a
division by 1000 and then by period_ms: floor(floor(x/a)/b) = floor(x/ab),
and the same holds for ceilings.
]]
local BASE = 2097152

local function trim(a)
    local n = #a
    while n > 1 and a[n] == 0 do
        a[n] = nil
        n = n - 1
    end
    return a
end

local function big(v)
    local a, i = {}, 0
    repeat
        i = i + 1
        local q = floor(v / BASE)
        a[i] = v - q * BASE
        v = q
    until v == 0
    return a
end

local function big_cmp(a, b)
    local na, nb = #a, #b
    if na ~= nb then
        return na < nb and -1 or 1
    end
    for i = na, 1, -1 do
        if a[i] ~= b[i] then
            return a[i] < b[i] and -1 or 1
        end
    end
    return 0
end

local function big_add(a, b)
    local r, c = {}, 0
    local n = #a > #b and #a or #b
    for i = 1, n do
        local s = (a[i] or 0) + (b[i] or 0) + c
        if s >= BASE then
            r[i], c = s - BASE, 1
        else
            r[i], c = s, 0
        end
    end
    if c > 0 then
        r[n + 1] = c
    end
    return trim(r)
end

-- a - b for a >= b.
local function big_sub(a, b)
    local r, c = {}, 0
    for i = 1, #a do
        local s = a[i] - (b[i] or 0) - c
        if s < 0 then
            r[i], c = s + BASE, 1
        else
            r[i], c = s, 0
        end
    end
    return trim(r)
end

-- a x m for an integer 0 <= m < 2^32.
local function big_mul(a, m)
    local r, c, n = {}, 0, #a
    for i = 1, n do
        local p = a[i] * m + c
        c = floor(p / BASE)
        r[i] = p - c * BASE
    end
    while c > 0 do
        n = n + 1
        local q = floor(c / BASE)
        r[n] = c - q * BASE
        c = q
    end
    return trim(r)
end

-- floor(a / d) and a mod d for an integer 1 <= d < 2^32.
local function big_divmod(a, d)
    local q, r = {}, 0
    for i = #a, 1, -1 do
        local cur = r * BASE + a[i]
        local qi = idiv(cur, d)
        r = cur - qi * d
        q[i] = qi
    end
    return trim(q), r
end

local function big_cdiv(a, d)
    local q, r = big_divmod(a, d)
    if r > 0 then
        return big_add(q, { 1 })
    end
    return q
end

-- The nearest double (exact below 2^53).
local function big_num(a)
    local v = 0
    for i = #a, 1, -1 do
        v = v * BASE + a[i]
    end
    return v
end

-- An i64 stored as two u32 halves, and back.
local function big_halves(lo, hi)
    return big_add(big_mul(big_mul(big(hi), 65536), 65536), big(lo))
end

local function halves_of(a)
    local q1, r1 = big_divmod(a, 65536)
    local q2, r2 = big_divmod(q1, 65536)
    return r2 * 65536 + r1, big_num(q2)
end

-- ---------------------------------------------------------------- rules

local GRAMMAR_HINT = 'expected LIMIT/PERIOD[:ALGO][,burst=N], e.g. 10/1m, ' ..
    '1000/1d:fixed or 100/1s:gcra,burst=200'

local UNITS = {
    { 'ms', 1 }, { 's', 1000 }, { 'm', 60000 }, { 'h', 3600000 },
    { 'd', 86400000 },
}

-- The core prints some of the user's text with %.*s, which stops at a NUL.
local function cstr(s)
    local z = s:find('\0', 1, true)
    return z and sub(s, 1, z - 1) or s
end

-- rule_error() of rule.c: the rule quoted (64 bytes at most, quotes and
-- backslashes escaped, other unprintable bytes as \xNN), the reason, the
-- grammar; cut as the core's 400-byte buffer cuts it.
local function rule_fail(text, reason)
    local q, n = {}, #text
    for i = 1, (n < 64 and n or 64) do
        local c = byte(text, i)
        if c == 34 or c == 92 then
            q[i] = '\\' .. string.char(c)
        elseif c < 32 or c >= 127 then
            q[i] = fmt('\\x%02x', c)
        else
            q[i] = string.char(c)
        end
    end
    if n > 64 then
        q[#q + 1] = '...'
    end
    reason = sub(reason, 1, 159)
    fail(sub('rule "' .. table.concat(q) .. '": ' .. reason .. '; ' ..
        GRAMMAR_HINT, 1, 399))
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

-- check_rule() of rule.c for a rule read from a blob: true when valid.
local function rule_ok(algo, limit, period, burst)
    if limit < 1 or limit > LIMIT_MAX or period < 1 or period > PERIOD_MAX_MS then
        return false
    end
    if algo == ALGO_GCRA then
        return burst >= 1 and burst <= LIMIT_MAX and
            not too_deep(burst, period, limit)
    end
    return burst == 0
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

-- ratel_rule_parse(): LIMIT/PERIOD[:ALGO][,burst=N] with its messages.
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
    local unit_ms, ustart = 0, pos
    for u = 1, #UNITS do
        local name = UNITS[u][1]
        if sub(text, pos, pos + #name - 1) == name then
            unit_ms = UNITS[u][2]
            pos = pos + #name
            break
        end
    end
    if unit_ms == 0 then
        rule_fail(text, 'PERIOD needs a unit: ms, s, m, h or d')
    end
    if find(sub(text, pos, pos), '^%a') then
        local word = match(text, '^%a+', ustart)
        rule_fail(text, 'unknown unit "' .. cstr(sub(word, 1, 16)) ..
            '"; the units are ms, s, m, h and d (e.g. 20/1m, 20/60s)')
    end
    if count == 0 then
        rule_fail(text, 'PERIOD must be at least 1ms')
    end
    if count * unit_ms > PERIOD_MAX_MS then
        rule_fail(text, 'PERIOD must be at most 30d')
    end
    local algo = ALGO_SLIDING
    if byte(text, pos) == 58 then
        local start = pos + 1
        pos = start
        while pos <= len and byte(text, pos) ~= 44 do
            pos = pos + 1
        end
        local name, found = sub(text, start, pos - 1), false
        for a = 0, 3 do
            if ALGO_NAMES[a] == name then
                algo, found = a, true
            end
        end
        if not found then
            rule_fail(text, 'unknown algorithm "' .. cstr(sub(name, 1, 32)) ..
                '" (use sliding, fixed, approx or gcra)')
        end
    end
    local burst, have_burst = 0, false
    while byte(text, pos) == 44 do
        pos = pos + 1
        if sub(text, pos, pos + 5) ~= 'burst=' then
            rule_fail(text, 'unknown option at byte ' .. pos ..
                ' (the only option is burst=N, for gcra)')
        end
        if have_burst then
            rule_fail(text, 'burst is given twice')
        end
        burst, digits, over, pos = read_number(text, pos + 6, LIMIT_MAX)
        if digits == 0 or over or burst == 0 then
            rule_fail(text, 'burst must be a whole number from 1 to 1000000000')
        end
        have_burst = true
    end
    if pos <= len then
        rule_fail(text, 'unexpected "' .. cstr(sub(text, pos, pos + 15)) ..
            '" at byte ' .. pos)
    end
    if have_burst and algo ~= ALGO_GCRA then
        rule_fail(text, 'burst applies to gcra rules only (add :gcra)')
    end
    local period = count * unit_ms
    if algo == ALGO_GCRA then
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
    return { algo = algo, limit = limit, period = period, burst = burst }
end

-- ratel_rule_format(): the canonical text, in the largest exact unit.
local function format_rule(r)
    local best = UNITS[1]
    for u = 1, #UNITS do
        if r.period % UNITS[u][2] == 0 then
            best = UNITS[u]
        end
    end
    local s = fmt('%d/%d%s', r.limit, r.period / best[2], best[1])
    if r.algo ~= ALGO_SLIDING then
        s = s .. ':' .. ALGO_NAMES[r.algo]
    end
    if r.algo == ALGO_GCRA and r.burst ~= r.limit then
        s = s .. ',burst=' .. fmt('%d', r.burst)
    end
    return s
end

local function rule_equal(a, b)
    return a.algo == b.algo and a.limit == b.limit and a.period == b.period and
        a.burst == b.burst
end

-- --------------------------------------------------------------- records

--[[
A record is a table with the rule (algo, limit, period, burst) and its
state. sliding: shift, base, runs in R as flat (offset, count) pairs with
the live ones at run indices first .. first+n-1, and sum (the stored
total). fixed: start, count. approx: start, cur, prev. gcra: tat_lo and
tat_hi (the i64 TAT in two halves: it may pass 2^53), rem, and tau = burst
x T, a double used only to bound magnitudes. Deciding leaves its plan and
verdict in the record (v_* fields, ok, retry_us, retry_ms, allow_at) and a
status in used, remaining and reset_ms.
]]

local function empty_record(rule)
    local r = { algo = rule.algo, limit = rule.limit, period = rule.period,
        burst = rule.burst }
    if rule.algo == ALGO_SLIDING then
        r.shift, r.base, r.R, r.first, r.n, r.sum = 0, 0, {}, 0, 0, 0
    elseif rule.algo == ALGO_GCRA then
        r.tat_lo, r.tat_hi, r.rem = 0, 0, 0
        r.tau = rule.period * 1000 * rule.burst
    else
        r.start, r.count, r.cur, r.prev = 0, 0, 0, 0
    end
    return r
end

local RUN_FORMATS = {}
local function run_format(n)
    local f = RUN_FORMATS[n]
    if not f then
        f = '<' .. rep('I4', 2 * n)
        RUN_FORMATS[n] = f
    end
    return f
end

-- Reads and validates one record at pos (ratel__state_parse's rules:
-- anything the core would not have written is corrupt). Returns the
-- record and the position after it.
local function parse_record(s, pos, len)
    local avail = len - pos + 1
    if avail < 10 then
        corrupt()
    end
    local algo, flags, limit, period = sunpack('<BBI4I4', s, pos)
    if algo > 3 then
        corrupt()
    end
    local burst = 0
    if algo == ALGO_GCRA then
        if avail < 14 then
            corrupt()
        end
        burst = sunpack('<I4', s, pos + 10)
    end
    if not rule_ok(algo, limit, period, burst) then
        corrupt()
    end
    if algo == ALGO_SLIDING then
        if flags > 30 then
            corrupt()
        end
    elseif flags ~= 0 then
        corrupt()
    end
    local r = { algo = algo, limit = limit, period = period, burst = burst }
    if algo == ALGO_SLIDING then
        if avail < 24 then
            corrupt()
        end
        local lo, hi, n, total = sunpack('<I4I4HI4', s, pos + 10)
        local size = 24 + 8 * n
        if n > SLIDING_CAP or avail < size or hi >= 4096 or total > LIMIT_MAX or
            (n == 0) ~= (total == 0) then
            corrupt()
        end
        local base = hi * TWO32 + lo
        local R = {}
        if n > 0 then
            R = { sunpack(run_format(n), s, pos + 24) }
            R[2 * n + 1] = nil
            local prev, sum = -1, 0
            for i = 1, 2 * n, 2 do
                local off, c = R[i], R[i + 1]
                if off <= prev or c == 0 then
                    corrupt()
                end
                sum = sum + c
                prev = off
            end
            if sum ~= total or base + prev >= STORED_MS_MAX then
                corrupt()
            end
        end
        r.shift, r.base, r.R, r.first, r.n, r.sum = flags, base, R, 0, n, total
        return r, pos + size
    elseif algo == ALGO_FIXED then
        if avail < 22 then
            corrupt()
        end
        local lo, hi, count = sunpack('<I4I4I4', s, pos + 10)
        if hi >= 4096 or count > LIMIT_MAX then
            corrupt()
        end
        r.start, r.count = hi * TWO32 + lo, count
        return r, pos + 22
    elseif algo == ALGO_APPROX then
        if avail < 26 then
            corrupt()
        end
        local lo, hi, cur, prev = sunpack('<I4I4I4I4', s, pos + 10)
        if hi >= 4096 or cur > LIMIT_MAX or prev > LIMIT_MAX then
            corrupt()
        end
        r.start, r.cur, r.prev = hi * TWO32 + lo, cur, prev
        return r, pos + 26
    end
    if avail < 26 then
        corrupt()
    end
    local lo, hi, rem = sunpack('<I4I4I4', s, pos + 14)
    -- 0 <= TAT < 2^54 us: the high half of a negative i64 is >= 2^31.
    if hi >= 4194304 or rem >= limit then
        corrupt()
    end
    r.tat_lo, r.tat_hi, r.rem = lo, hi, rem
    r.tau = period * 1000 * burst
    return r, pos + 26
end

-- The records of a non-empty blob, or an error reply.
local function parse_blob(s)
    local len = #s
    if len > STATE_MAX or len < 4 or byte(s, 1) ~= 0x52 or byte(s, 2) ~= 0x54 then
        corrupt()
    end
    if byte(s, 3) ~= 1 then
        fail('key holds ratel state of an unknown version')
    end
    local nrules = byte(s, 4)
    if nrules < 1 or nrules > MAX_RULES then
        corrupt()
    end
    local recs, pos = {}, 5
    for i = 1, nrules do
        local r
        r, pos = parse_record(s, pos, len)
        for j = 1, i - 1 do
            if rule_equal(r, recs[j]) then
                corrupt()
            end
        end
        recs[i] = r
    end
    if pos ~= len + 1 then
        corrupt()
    end
    return recs
end

local function pack_i64(v)
    local hi = floor(v / TWO32)
    return v - hi * TWO32, hi
end

local function serialize(recs)
    local out = { string.char(0x52, 0x54, 1, #recs) }
    for i = 1, #recs do
        local r = recs[i]
        local algo = r.algo
        if algo == ALGO_SLIDING then
            local lo, hi = pack_i64(r.base)
            out[#out + 1] = spack('<BBI4I4I4I4HI4', 0, r.shift, r.limit,
                r.period, lo, hi, r.n, r.sum)
            if r.n > 0 then
                out[#out + 1] = spack(run_format(r.n),
                    unpack_(r.R, 2 * r.first + 1, 2 * (r.first + r.n)))
            end
        elseif algo == ALGO_FIXED then
            local lo, hi = pack_i64(r.start)
            out[#out + 1] = spack('<BBI4I4I4I4I4', 1, 0, r.limit, r.period,
                lo, hi, r.count)
        elseif algo == ALGO_APPROX then
            local lo, hi = pack_i64(r.start)
            out[#out + 1] = spack('<BBI4I4I4I4I4I4', 2, 0, r.limit, r.period,
                lo, hi, r.cur, r.prev)
        else
            out[#out + 1] = spack('<BBI4I4I4I4I4I4', 3, 0, r.limit, r.period,
                r.burst, r.tat_lo, r.tat_hi, r.rem)
        end
    end
    return table.concat(out)
end

-- --------------------------------------------------------------- sliding

local function round_up(t, shift)
    local g = 2 ^ shift
    return floor((t + g - 1) / g) * g
end

-- scan() of sliding.c: expired runs at the head, and the permits the
-- others count.
local function sl_scan(r, now_ms)
    local R, f, n, base = r.R, r.first, r.n, r.base
    local cutoff = now_ms - r.period
    local i, gone = 0, 0
    while i < n and base + R[2 * (f + i) + 1] <= cutoff do
        gone = gone + R[2 * (f + i) + 2]
        i = i + 1
    end
    return i, r.sum - gone
end

local function sl_reset_us(r, now_us)
    if r.n == 0 then
        return 0
    end
    local d = (r.base + r.R[2 * (r.first + r.n) - 1] + r.period) * 1000 - now_us
    return d > 0 and d or 0
end

local function sl_status(r, now_us)
    local _, total = sl_scan(r, floor(now_us / 1000))
    local limit = r.limit
    r.used = total
    r.remaining = total < limit and limit - total or 0
    r.reset_ms = cdiv(sl_reset_us(r, now_us), 1000)
end

-- plan_event(): the granularity of a new event once `drop` runs expire,
-- and whether it joins the last run (0), needs its own (1) or forces a
-- coarsening (2).
local function sl_plan(r, now_ms, drop)
    local n, shift = r.n - drop, r.shift
    if n == 0 then
        return 1, 0
    elseif n <= SLIDING_CAP / 8 and shift > 0 then
        shift = shift - 1
    end
    if round_up(now_ms, shift) <= r.base + r.R[2 * (r.first + r.n) - 1] then
        return 0, shift
    end
    return n == SLIDING_CAP and 2 or 1, shift
end

local function sl_decide(r, now_us, cost)
    local drop, total = sl_scan(r, floor(now_us / 1000))
    local limit = r.limit
    r.v_drop, r.v_total = drop, total
    if total + cost <= limit then
        r.ok, r.retry_us, r.retry_ms = true, 0, 0
        return
    end
    r.ok, r.retry_us, r.retry_ms = false, 0, 0
    local R, f, base = r.R, r.first, r.base
    local need, acc = total + cost - limit, 0
    for i = drop, r.n - 1 do
        acc = acc + R[2 * (f + i) + 2]
        if acc >= need then
            r.retry_us = (base + R[2 * (f + i) + 1] + r.period) * 1000 - now_us
            r.retry_ms = cdiv(r.retry_us, 1000)
            return
        end
    end
end

-- coarsen(): the smallest granularity above `shift` that leaves at most
-- CAP/2 runs; runs rounded up to it, equal times merged, offsets rebased
-- on the first run's time.
local function sl_coarsen(r, shift)
    local R, f, n, base = r.R, r.first, r.n, r.base
    local first = base + R[2 * f + 1]
    shift = shift + 1
    while shift < 30 do
        local distinct, prev = 1, round_up(first, shift)
        for i = 1, n - 1 do
            local t = round_up(base + R[2 * (f + i) + 1], shift)
            if t ~= prev then
                distinct = distinct + 1
            end
            prev = t
        end
        if distinct <= SLIDING_CAP / 2 then
            break
        end
        shift = shift + 1
    end
    local out = 0
    for i = 0, n - 1 do
        local t = round_up(base + R[2 * (f + i) + 1], shift)
        local c = R[2 * (f + i) + 2]
        if out > 0 and first + R[2 * (f + out) - 1] == t then
            R[2 * (f + out)] = R[2 * (f + out)] + c
        else
            R[2 * (f + out) + 1] = t - first
            R[2 * (f + out) + 2] = c
            out = out + 1
        end
    end
    r.base, r.n = first, out
    return shift
end

local function sl_commit(r, now_us, cost)
    local now_ms = floor(now_us / 1000)
    local kind, shift = sl_plan(r, now_ms, r.v_drop)
    local R = r.R
    r.first, r.n = r.first + r.v_drop, r.n - r.v_drop
    if r.n == 0 then
        r.first = 0
    end
    local t
    if kind == 2 then
        shift = sl_coarsen(r, shift)
        t = round_up(now_ms, shift)
        kind = t <= r.base + R[2 * (r.first + r.n) - 1] and 0 or 1
    end
    t = round_up(now_ms, shift)
    local f, n = r.first, r.n
    if kind == 0 then
        R[2 * (f + n)] = R[2 * (f + n)] + cost
    else
        local base = r.base
        if n == 0 then
            base = t
        elseif t - base > TWO32 - 1 then
            -- Rebase on the first run; the window spans < 2^32 ms.
            local first = R[2 * f + 1]
            for i = 0, n - 1 do
                R[2 * (f + i) + 1] = R[2 * (f + i) + 1] - first
            end
            base = base + first
        end
        r.base = base
        R[2 * (f + n) + 1] = t - base
        R[2 * (f + n) + 2] = cost
        r.n = n + 1
    end
    r.shift = shift
    r.sum = r.v_total + cost
    r.used = r.sum
    r.remaining = r.sum < r.limit and r.limit - r.sum or 0
    r.reset_ms = cdiv(sl_reset_us(r, now_us), 1000)
end

-- Gives back the newest permits first: they would have expired last.
local function sl_refund(r, now_us, cost)
    local drop, total = sl_scan(r, floor(now_us / 1000))
    local R = r.R
    r.first, r.n = r.first + drop, r.n - drop
    local sum, n = total, r.n
    while cost > 0 and n > 0 do
        local i = 2 * (r.first + n)
        local c = R[i]
        if c <= cost then
            cost = cost - c
            sum = sum - c
            n = n - 1
        else
            sum = sum - cost
            R[i] = c - cost
            cost = 0
        end
    end
    if n == 0 then
        r.shift, r.first = 0, 0
    end
    r.n, r.sum = n, sum
end

-- ------------------------------------------------------- fixed and approx

-- window_of(): the window holding now_ms, clamped to the stored one.
local function window_of(now_ms, period, stored)
    if now_ms < stored + period then
        return stored
    end
    if now_ms < stored + 2 * period then
        return stored + period
    end
    local ws = now_ms - now_ms % period
    return stored > ws and stored or ws
end

local function until_us(at_ms, now_us)
    local d = at_ms * 1000 - now_us
    return d > 0 and d or 0
end

local function fx_count(r, now_ms)
    local ws = window_of(now_ms, r.period, r.start)
    return r.start == ws and r.count or 0, ws
end

local function fx_status(r, now_us)
    local count, ws = fx_count(r, floor(now_us / 1000))
    r.used = count
    r.remaining = count < r.limit and r.limit - count or 0
    r.reset_ms = count > 0 and cdiv(until_us(ws + r.period, now_us), 1000) or 0
end

local function fx_decide(r, now_us, cost)
    local count, ws = fx_count(r, floor(now_us / 1000))
    r.v_ws, r.v_cur = ws, count
    r.ok = count + cost <= r.limit
    r.retry_us = r.ok and 0 or until_us(ws + r.period, now_us)
    r.retry_ms = cdiv(r.retry_us, 1000)
end

local function fx_commit(r, now_us, cost)
    local count = r.v_cur + cost
    r.start, r.count = r.v_ws, count
    r.used = count
    r.remaining = count < r.limit and r.limit - count or 0
    r.reset_ms = cdiv(until_us(r.v_ws + r.period, now_us), 1000)
end

local function fx_refund(r, now_us, cost)
    local count, ws = fx_count(r, floor(now_us / 1000))
    r.start, r.count = ws, count - (cost < count and cost or count)
end

-- approx_view(): the counters moved to the window holding now_ms, and the
-- previous window's weight in 1/65536.
local function ap_view(r, now_ms)
    local start, period = r.start, r.period
    local ws = window_of(now_ms, period, start)
    local e = now_ms > ws and now_ms - ws or 0
    local cur, prev = 0, 0
    if start == ws then
        cur, prev = r.cur, r.prev
    elseif start + period == ws then
        prev = r.cur
    end
    return ws, cur, prev, idiv((period - e) * SCALE, period)
end

local function ap_used(cur, prev, w)
    return cur + cdiv(prev * w, SCALE)
end

local function ap_reset_ms(ws, cur, prev, period, now_us)
    if cur > 0 then
        return cdiv(until_us(ws + 2 * period, now_us), 1000)
    elseif prev > 0 then
        return cdiv(until_us(ws + period, now_us), 1000)
    end
    return 0
end

local function ap_status(r, now_us)
    local ws, cur, prev, w = ap_view(r, floor(now_us / 1000))
    local used = ap_used(cur, prev, w)
    r.used = used
    r.remaining = used < r.limit and r.limit - used or 0
    r.reset_ms = ap_reset_ms(ws, cur, prev, r.period, now_us)
end

-- approx_first_fit(): the first elapsed time at which the request fits.
local function ap_first_fit(prev, need, limit, period)
    if need > limit then
        return period
    end
    if prev == 0 then
        return 0
    end
    local x = idiv((limit - need) * SCALE, prev)
    if x >= SCALE then
        return 0
    end
    local e = period - cdiv((x + 1) * period, SCALE) + 1
    return e < 0 and 0 or e
end

local function ap_decide(r, now_us, cost)
    local ws, cur, prev, w = ap_view(r, floor(now_us / 1000))
    local limit, period = r.limit, r.period
    r.v_ws, r.v_cur, r.v_prev, r.v_w = ws, cur, prev, w
    r.ok = prev * w + (cur + cost) * SCALE <= limit * SCALE
    r.retry_us = 0
    if not r.ok then
        local e = ap_first_fit(prev, cur + cost, limit, period)
        local at = ws + e
        if e >= period then
            e = ap_first_fit(cur, cost, limit, period)
            at = e < period and ws + period + e or ws + 2 * period
        end
        r.retry_us = until_us(at, now_us)
    end
    r.retry_ms = cdiv(r.retry_us, 1000)
end

local function ap_commit(r, now_us, cost)
    local cur = r.v_cur + cost
    r.start, r.cur, r.prev = r.v_ws, cur, r.v_prev
    local used = ap_used(cur, r.v_prev, r.v_w)
    r.used = used
    r.remaining = used < r.limit and r.limit - used or 0
    r.reset_ms = ap_reset_ms(r.v_ws, cur, r.v_prev, r.period, now_us)
end

local function ap_refund(r, now_us, cost)
    local ws, cur, prev = ap_view(r, floor(now_us / 1000))
    r.start, r.cur, r.prev = ws, cur - (cost < cur and cost or cur), prev
end

-- ------------------------------------------------------------------ gcra

--[[
The core keeps TAT and now in units of 1/LIMIT us (T = period in us is
then exact) in 128 bits. Here the fast path works on x = TAT - now in
those units, as a double, when |x| + tau stays below 2^51 (and now below
2^53 - 2^51, so that now + x/LIMIT us still fits): every sum, product and
quotient below is then an exact integer. Anything else goes to the slow
path, which follows gcra.c with the big integers above.
]]
local FAST_MAX = 2 ^ 51
local FAST_NOW = 2 ^ 53 - 2 ^ 51

local function gc_x(r, now_us)
    local hi = r.tat_hi
    if hi >= 2097152 or now_us >= FAST_NOW then
        return nil
    end
    local d = hi * TWO32 + r.tat_lo - now_us
    if ((d < 0 and -d or d) + 2) * r.limit + r.tau >= FAST_MAX then
        return nil
    end
    return d * r.limit + r.rem
end

-- Status from the TAT ahead of now, x >= 0 (gcra_counts()).
local function gc_counts(r, x)
    local owed = x > 0 and cdiv(x, r.period * 1000) or 0
    r.used = owed
    r.remaining = owed < r.burst and r.burst - owed or 0
end

-- store_tat(): TAT = now + ahead (ahead >= 0, 1/LIMIT us) as whole us and
-- a remainder; the reset time is ahead in us rounded up.
local function gc_store(r, ahead, now_us)
    local L = r.limit
    local q = idiv(ahead, L)
    local rem = ahead - q * L
    r.tat_lo, r.tat_hi = pack_i64(now_us + q)
    r.rem = rem
    r.reset_ms = cdiv(rem > 0 and q + 1 or q, 1000)
end

-- Slow path: TAT and now scaled, as big integers.
local function gb_view(r, now_us)
    local L = r.limit
    local tat = big_add(big_mul(big_halves(r.tat_lo, r.tat_hi), L), big(r.rem))
    return tat, big_mul(big(now_us), L)
end

-- ceil(x / T), T = period_ms x 1000.
local function gb_owed(x, period)
    return big_cdiv(big_cdiv(x, 1000), period)
end

local function gb_counts(r, x)
    local owed = gb_owed(x, r.period)
    local n = big_num(owed)
    r.used = n < USED_MAX and n or USED_MAX
    r.remaining = big_cmp(owed, big(r.burst)) < 0 and r.burst - n or 0
end

local function gb_store(r, ahead, now_us)
    local q, rem = big_divmod(ahead, r.limit)
    r.tat_lo, r.tat_hi = halves_of(big_add(big(now_us), q))
    r.rem = rem
    if rem > 0 then
        q = big_add(q, { 1 })
    end
    r.reset_ms = big_num(big_cdiv(q, 1000))
end

local function gc_status(r, now_us)
    local x = gc_x(r, now_us)
    if x then
        if x > 0 then
            gc_counts(r, x)
            r.reset_ms = cdiv(cdiv(x, r.limit), 1000)
        else
            r.used, r.remaining, r.reset_ms = 0, r.burst, 0
        end
        return
    end
    local tat, now = gb_view(r, now_us)
    if big_cmp(tat, now) > 0 then
        local x2 = big_sub(tat, now)
        gb_counts(r, x2)
        r.reset_ms = big_num(big_cdiv(big_cdiv(x2, r.limit), 1000))
    else
        r.used, r.remaining, r.reset_ms = 0, r.burst, 0
    end
end

local function gc_decide(r, now_us, cost)
    local x = gc_x(r, now_us)
    local T = r.period * 1000
    if x then
        local a = (x > 0 and x or 0) + cost * T - r.tau
        if a <= 0 then
            r.ok, r.retry_us, r.retry_ms = true, 0, 0
        else
            r.ok = false
            r.retry_us = cdiv(a, r.limit)
            r.retry_ms = cdiv(r.retry_us, 1000)
        end
    else
        local tat, now = gb_view(r, now_us)
        local tb = big(T)
        local lhs = big_add(big_cmp(tat, now) > 0 and tat or now,
            big_mul(tb, cost))
        local rhs = big_add(now, big_mul(tb, r.burst))
        if big_cmp(lhs, rhs) <= 0 then
            r.ok, r.retry_us, r.retry_ms = true, 0, 0
        else
            local us = big_cdiv(big_sub(lhs, rhs), r.limit)
            r.ok = false
            r.retry_us = big_num(us)
            r.retry_ms = big_num(big_cdiv(us, 1000))
        end
    end
    r.allow_at = now_us + r.retry_us
end

-- Charges `cost` from max(TAT, at): at is now, or a reservation's instant.
local function gc_commit(r, now_us, at_us, cost)
    local x = gc_x(r, now_us)
    local T, L = r.period * 1000, r.limit
    local w = (at_us - now_us) * L
    if x and w + (x > 0 and x or 0) + r.tau < FAST_MAX then
        local ahead = (x > w and x or w) + cost * T
        gc_store(r, ahead, now_us)
        gc_counts(r, ahead)
        return
    end
    local tat, now = gb_view(r, now_us)
    local at = big_mul(big(at_us), L)
    local m = big_add(big_cmp(tat, at) > 0 and tat or at, big_mul(big(T), cost))
    local ahead = big_sub(m, now)
    gb_store(r, ahead, now_us)
    gb_counts(r, ahead)
end

local function gc_refund(r, now_us, cost)
    local x = gc_x(r, now_us)
    local T = r.period * 1000
    if x then
        local back = cost * T
        gc_store(r, back < x and x - back or 0, now_us)
        return
    end
    local tat, now = gb_view(r, now_us)
    local rhs = big_add(now, big_mul(big(T), cost))
    gb_store(r, big_cmp(tat, rhs) > 0 and big_sub(tat, rhs) or { 0 }, now_us)
end

-- gcra_convert(): the permits owed under the old rule (same period),
-- capped at the new burst, owed again under the new one.
local function gc_convert(old, rule, now_us)
    local r = empty_record(rule)
    local x, used = gc_x(old, now_us), 0
    local T = rule.period * 1000
    if x then
        used = x > 0 and cdiv(x, T) or 0
    else
        local tat, now = gb_view(old, now_us)
        if big_cmp(tat, now) > 0 then
            local owed = gb_owed(big_sub(tat, now), rule.period)
            used = big_cmp(owed, big(rule.burst)) > 0 and rule.burst or
                big_num(owed)
        end
    end
    if used > rule.burst then
        used = rule.burst
    end
    if used > 0 then
        if r.tau < FAST_MAX and now_us < FAST_NOW then
            gc_store(r, used * T, now_us)
        else
            gb_store(r, big_mul(big(T), used), now_us)
        end
    end
    return r
end

-- ------------------------------------------------------------- policies

local STATUS = { [0] = sl_status, fx_status, ap_status, gc_status }
local DECIDE = { [0] = sl_decide, fx_decide, ap_decide, gc_decide }
local REFUND = { [0] = sl_refund, fx_refund, ap_refund, gc_refund }

local function commit(r, now_us, at_us, cost)
    local algo = r.algo
    if algo == ALGO_SLIDING then
        sl_commit(r, now_us, cost)
    elseif algo == ALGO_FIXED then
        fx_commit(r, now_us, cost)
    elseif algo == ALGO_APPROX then
        ap_commit(r, now_us, cost)
    else
        gc_commit(r, now_us, at_us, cost)
    end
end

local function rules_match(policy, recs)
    if #recs ~= #policy then
        return false
    end
    for i = 1, #policy do
        if not rule_equal(recs[i], policy[i]) then
            return false
        end
    end
    return true
end

-- convert() of policy.c: for each rule of the policy, the same rule's
-- record, else one of the same algorithm and period (counts kept, the new
-- limit applies; gcra converts), else an empty one.
local function convert(policy, old, now_us)
    local taken, recs = {}, {}
    for i = 1, #policy do
        local rule, from = policy[i], nil
        for j = 1, #old do
            if not taken[j] and rule_equal(old[j], rule) then
                from = j
                break
            end
        end
        if not from then
            for j = 1, #old do
                if not taken[j] and old[j].algo == rule.algo and
                    old[j].period == rule.period then
                    from = j
                    break
                end
            end
        end
        if not from then
            recs[i] = empty_record(rule)
        else
            taken[from] = true
            if rule.algo == ALGO_GCRA then
                recs[i] = gc_convert(old[from], rule, now_us)
            else
                old[from].limit = rule.limit
                recs[i] = old[from]
            end
        end
    end
    return recs
end

-- decide_all(): every rule's verdict; with MAXWAIT, a denied request whose
-- latest conforming instant lies within it is admitted at that instant.
local function decide_all(recs, now_us, cost, max_wait_ms)
    local all, at = true, now_us
    for i = 1, #recs do
        local r = recs[i]
        DECIDE[r.algo](r, now_us, cost)
        all = all and r.ok
        if r.algo == ALGO_GCRA and r.allow_at > at then
            at = r.allow_at
        end
    end
    if not all and max_wait_ms > 0 and at - now_us <= max_wait_ms * 1000 then
        return true, at, at - now_us
    end
    return all, now_us, 0
end

-- report(): the seven integers. The binding rule denies longest, or when
-- admitted has the fewest permits left.
local function report(policy, recs, allowed, wait_us)
    local rule, retry_us, retry_ms, remaining, reset_ms = 0, 0, 0, math.huge, 0
    for i = 1, #recs do
        local r = recs[i]
        if not allowed and r.retry_us > retry_us then
            retry_us, retry_ms, rule = r.retry_us, r.retry_ms, i - 1
        end
        if r.remaining < remaining then
            remaining = r.remaining
            if allowed then
                rule = i - 1
            end
        end
        if r.reset_ms > reset_ms then
            reset_ms = r.reset_ms
        end
    end
    return { allowed and 1 or 0, policy[rule + 1].limit, remaining,
        allowed and 0 or retry_ms, reset_ms, rule, cdiv(wait_us, 1000) }
end

-- ------------------------------------------------------------ arguments

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

local OPTION_LISTS = {
    ACQUIRE = 'COST n, PEEK, MAXWAIT ms, AT unix_ms, then the rules',
    REFUND = 'COST n, AT unix_ms, then the rules',
    INFO = 'AT unix_ms',
}
local OPTIONS = {
    ACQUIRE = { COST = true, PEEK = true, MAXWAIT = true, AT = true },
    REFUND = { COST = true, AT = true },
    INFO = { AT = true },
}

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

-- ratel__cmd_parse(): options (any order, case-insensitive, once each)
-- until the first argument starting with a digit, then the rules. Returns
-- the policy, cost, peek, max wait and AT (nil when not given).
local function parse_args(op)
    local argc = #ARGV
    if argc - 1 > 2 * MAX_RULES + 16 then
        fail('at most 8 rules')
    end
    local allowed, seen = OPTIONS[op], {}
    local cost, peek, max_wait, at = 1, false, 0, nil
    local i = 2
    while i <= argc do
        local a = ARGV[i]
        local c = byte(a, 1)
        if not c or (c >= 48 and c <= 57) then
            break
        end
        local opt = upper(a)
        if not allowed[opt] or seen[opt] then
            fail('unknown or repeated option "' .. quote_arg(a) ..
                '"; options are ' .. OPTION_LISTS[op])
        end
        seen[opt] = true
        if opt == 'PEEK' then
            peek = true
        else
            i = i + 1
            local v = ARGV[i]
            if opt == 'COST' then
                cost = parse_int(v, 1, LIMIT_MAX)
                if not cost then
                    fail('COST must be an integer from 1 to 1000000000')
                end
            elseif opt == 'MAXWAIT' then
                max_wait = parse_int(v, 0, MAX_WAIT_MS)
                if not max_wait then
                    fail('MAXWAIT must be an integer from 0 to 2592000000')
                end
            else
                at = parse_int(v, 0, AT_MAX)
                if not at then
                    fail('AT must be an integer from 0 to 9007199254740')
                end
            end
        end
        i = i + 1
    end
    if op == 'INFO' then
        if i <= argc then
            fail('unknown or repeated option "' .. quote_arg(ARGV[i]) ..
                '"; options are ' .. OPTION_LISTS[op])
        end
        return nil, cost, peek, max_wait, at
    end
    local n = argc - i + 1
    if n <= 0 then
        fail('at least one rule is needed')
    end
    if n > MAX_RULES then
        fail('at most 8 rules')
    end
    local policy = {}
    for j = 1, n do
        policy[j] = parse_rule(ARGV[i + j - 1])
    end
    for j = 2, n do
        for k = 1, j - 1 do
            if rule_equal(policy[j], policy[k]) then
                fail(fmt('policy: rule %d ("%s") repeats rule %d', j,
                    format_rule(policy[j]), k))
            end
        end
    end
    if op == 'ACQUIRE' then
        for j = 1, n do
            local r = policy[j]
            local cap = r.algo == ALGO_GCRA and r.burst or r.limit
            if cost > cap then
                fail(fmt('COST %d is more than rule %d ("%s") can ever admit (%d)',
                    cost, j, format_rule(r), cap))
            end
            if max_wait > 0 and r.algo ~= ALGO_GCRA then
                fail('MAXWAIT needs every rule to be gcra')
            end
        end
    end
    return policy, cost, peek, max_wait, at
end

-- ------------------------------------------------------------- commands

-- The key's bytes ('' for none); WRONGTYPE for other types.
local function read_key(key)
    local v = redis.pcall('GET', key)
    if type(v) == 'table' then
        raise(v)
    end
    return v or ''
end

local function now_of(at)
    if at then
        return at * 1000
    end
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Writes the new bytes when they differ from the old, with the absolute
-- expiry at the instant the state is empty again (or deletes the key).
local function write_key(key, old, new, now_us, reset_ms)
    if new == old then
        return
    end
    if new == '' then
        redis.call('DEL', key)
    else
        redis.call('SET', key, new, 'PXAT',
            fmt('%d', cdiv(now_us, 1000) + reset_ms))
    end
end

local function acquire(key)
    local policy, cost, peek, max_wait, at = parse_args('ACQUIRE')
    local old = read_key(key)
    local now_us = now_of(at)
    local recs, fresh, nold = nil, true, 0
    if old ~= '' then
        local olds = parse_blob(old)
        if rules_match(policy, olds) then
            recs, fresh = olds, false
        else
            nold = #olds
            recs = convert(policy, olds, now_us)
        end
    else
        recs = convert(policy, {}, now_us)
    end
    local allowed, at_us, wait_us = decide_all(recs, now_us, cost, max_wait)
    local new = old
    if not allowed or peek then
        for i = 1, #recs do
            STATUS[recs[i].algo](recs[i], now_us)
        end
        -- A denied key written under other rules keeps its converted state
        -- so that a retry decides on the same state; new keys stay unstored.
        if fresh and nold > 0 and not peek then
            new = serialize(recs)
        end
    else
        for i = 1, #recs do
            commit(recs[i], now_us, at_us, cost)
        end
        new = serialize(recs)
    end
    local d = report(policy, recs, allowed, wait_us)
    write_key(key, old, new, now_us, d[5])
    return d
end

local function refund(key)
    local policy, cost, _, _, at = parse_args('REFUND')
    local old = read_key(key)
    local now_us = now_of(at)
    local recs
    if old ~= '' then
        local olds = parse_blob(old)
        recs = rules_match(policy, olds) and olds or
            convert(policy, olds, now_us)
    else
        recs = convert(policy, {}, now_us)
    end
    for i = 1, #recs do
        REFUND[recs[i].algo](recs[i], now_us, cost)
    end
    local allowed = decide_all(recs, now_us, 1, 0)
    local empty = true
    for i = 1, #recs do
        STATUS[recs[i].algo](recs[i], now_us)
        empty = empty and recs[i].reset_ms == 0
    end
    local d = report(policy, recs, allowed, 0)
    write_key(key, old, empty and '' or serialize(recs), now_us, d[5])
    return d
end

local function info(key)
    local _, _, _, _, at = parse_args('INFO')
    local old = read_key(key)
    local now_us = now_of(at)
    if old == '' then
        return {}
    end
    local recs, out = parse_blob(old), {}
    for i = 1, #recs do
        local r = recs[i]
        local stored_runs = r.n
        STATUS[r.algo](r, now_us)
        local e = { { ok = 'rule' }, { ok = format_rule(r) }, { ok = 'algo' },
            { ok = ALGO_NAMES[r.algo] }, { ok = 'used' }, r.used,
            { ok = 'remaining' }, r.remaining, { ok = 'reset_after_ms' },
            r.reset_ms }
        if r.algo == ALGO_SLIDING then
            e[11], e[12] = { ok = 'runs' }, stored_runs
            e[13], e[14] = { ok = 'granularity_ms' }, 2 ^ r.shift
        elseif r.algo == ALGO_GCRA then
            e[11], e[12] = { ok = 'tat_us' }, r.tat_hi * TWO32 + r.tat_lo
        else
            e[11], e[12] = { ok = 'window_start_ms' }, r.start
        end
        out[i] = e
    end
    return out
end

local COMMANDS = { ACQUIRE = acquire, REFUND = refund, INFO = info }

local function main()
    local op = upper(ARGV[1] or '')
    if op == 'RESET' then
        if #KEYS ~= 1 or #ARGV ~= 1 then
            wrong_arity(op)
        end
        return redis.call('DEL', KEYS[1])
    end
    local command = COMMANDS[op]
    if not command then
        fail('unknown operation "' .. quote_arg(ARGV[1] or '') ..
            '"; use ACQUIRE, REFUND, RESET or INFO')
    end
    if #KEYS ~= 1 or (op ~= 'INFO' and #ARGV < 2) then
        wrong_arity(op)
    end
    return command(KEYS[1])
end

local ok, result = pcall(main)
if ok then
    return result
end
if failure then
    return failure
end
return { err = 'ERR ratel: internal error in ratel.lua: ' .. tostring(result) }
