--[[
ratel's rate limiter in Lua, for Redis servers where MODULE LOAD is not
allowed. It behaves exactly as the ratel.so module (docs/commands.md):
same arguments, same replies, same stored bytes (docs/state-format.md),
same expiry.

The files of lua/ mirror the C core one for one (internal, error,
calendar, rule, state, sliding, window, gcra, concurrent, policy, slice;
commands mirrors
module/args.c and module/ratel.c), and scripts/lua-build.sh joins them,
in that order, into one chunk with two entry points:

    build/lua/ratel.lib.lua   a Redis Functions library (FUNCTION LOAD):
                              FCALL ratel_acquire 1 KEY ...   (lua/library.lua)
    build/lua/ratel.eval.lua  a script for EVAL / EVALSHA:
                              EVALSHA sha 1 KEY ACQUIRE ...   (lua/eval.lua)

All files share one scope: each defines top-level locals that the later
ones use. Loading and calling: docs/lua.md. The conformance driver
(tests/integration/conform.c) runs both artefacts, the module and the core
on random traces and compares replies, bytes and expiry after every
operation.

Numbers: Lua 5.1 has only doubles, exact for integers below 2^53. Every
value of sliding, fixed and approx stays below that by design. gcra
computes relative to now in plain doubles where that is exact, and with
the small big integers below otherwise (lua/gcra.lua says when).

Every reply is computed before anything is written, and a call never
raises: a Lua error would be a bug, and is reported as one with nothing
written.
]]

local floor = math.floor
local byte, sub, upper, match, find, rep = string.byte, string.sub,
    string.upper, string.match, string.find, string.rep
local fmt, unpack_ = string.format, unpack
local spack, sunpack = struct.pack, struct.unpack

local LIMIT_MAX = 1000000000
local PERIOD_MAX_MS = 2592000000
local MAX_RULES = 8
local SLIDING_CAP = 256
local CONCURRENT_MAX = 256
local STATE_MAX = 4 + MAX_RULES * (24 + 8 * SLIDING_CAP)
local DEPTH_MAX_MS = 3650 * 86400000
local SCALE = 65536
local TWO32 = 4294967296
local STORED_MS_MAX = 2 ^ 44
-- RATEL_AT_MAX_MS, RATEL_HOLDER_MAX and RATEL_DEMAND_HOLDERS.
local AT_MAX_MS = 9007199254740
local HOLDER_MAX = 9007199254740991
local DEMAND_HOLDERS = 16
-- ALGO_SLIDING .. ALGO_CONCURRENT, ALGO_NAMES and ALGO_FACTS come before
-- this file: scripts/lua-build.sh makes them from include/ratel.h.
-- INFO's "used" is an int64 in the core; a Lua number is sent as a C
-- long long, so the largest double below 2^63 stands for INT64_MAX.
local USED_MAX = 2 ^ 63 - 1024

-- ---------------------------------------------------------------- caches
--[[
What the Functions library keeps between calls (the EVAL script starts
afresh each call) by a text: at most CACHE_MAX entries, all dropped at
once when it is full, so that it stays bounded without bookkeeping per
entry. Read with c.t[key].
]]
local CACHE_MAX = 1024

local function cache_new()
    return { t = {}, n = 0 }
end

local function cache_put(c, key, value)
    if c.n == CACHE_MAX then
        c.t, c.n = {}, 0
    end
    c.t[key], c.n = value, c.n + 1
end

-- ----------------------------------------------------- integer helpers
-- floor(a / b) for integers 0 <= a < 2^53, b >= 1. Lua's a % b is
-- a - floor(a / b) x b with the double quotient, already right there; the
-- correction makes the remainder, and so the exact quotient (a - r) / b,
-- independent of rounding. The operator, not math.floor: a call of a C
-- function costs as much as the rest.
local function idiv(a, b)
    local r = a % b
    if r < 0 then
        r = r + b
    elseif r >= b then
        r = r - b
    end
    return (a - r) / b
end

-- ceil(a / b), the same way (it runs in every decision: no call of idiv).
local function cdiv(a, b)
    local r = a % b
    if r < 0 then
        r = r + b
    elseif r >= b then
        r = r - b
    end
    if r > 0 then
        return (a - r) / b + 1
    end
    return a / b
end

-- Microseconds from now_us until the instant at_ms, 0 once passed.
local function until_us(at_ms, now_us)
    local d = at_ms * 1000 - now_us
    return d > 0 and d or 0
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
