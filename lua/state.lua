-- state.lua - records and the state blob (mirrors src/core/state.c;
-- layout: docs/state-format.md).

--[[
A record is a table with the rule (algo, limit, period, burst) and its
state, and `rule`, the parsed rule it was made for or found to match
(where lua/gcra.lua keeps a rule's constants between calls). sliding:
shift, base, runs in R as flat (offset, count) pairs with
the live ones at run indices first .. first+n-1, and sum (the stored
total). fixed: start, count. approx: start, cur, prev. gcra: tat_lo and
tat_hi (the i64 TAT in two halves: it may pass 2^53) and rem, and once
used, the rule's constants as pairs (lua/gcra.lua). Deciding leaves its plan and
verdict in the record (v_* fields, ok, retry_us, retry_ms, allow_at) and a
status in used, remaining and reset_ms.
]]

local function empty_record(rule)
    local r = { algo = rule.algo, limit = rule.limit, period = rule.period,
        burst = rule.burst, rule = rule }
    if rule.algo == ALGO_SLIDING then
        r.shift, r.base, r.R, r.first, r.n, r.sum = 0, 0, {}, 0, 0, 0
    elseif rule.algo == ALGO_GCRA then
        r.tat_lo, r.tat_hi, r.rem = 0, 0, 0
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

-- The blob's header for 1 .. MAX_RULES records.
local HEADERS = {}
for n = 1, MAX_RULES do
    HEADERS[n] = string.char(0x52, 0x54, 1, n)
end

local function serialize(recs)
    local out = { HEADERS[#recs] }
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
