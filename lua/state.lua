-- state.lua - records and the state blob (mirrors lib/core/state.c;
-- layout: docs/state-format.md).

--[[
A record is a table with the rule (algo, limit, period, burst, calendar,
months, tz_offset) and its state, and `rule`, the parsed rule it was made for or found to match
(where lua/gcra.lua keeps a rule's constants between calls). sliding:
shift, base, n runs (m of them in the bytes runs from a on, then tail:
lua/sliding.lua) and sum (the stored total). fixed: start, count.
approx: start, cur, prev.
gcra: tat_lo and tat_hi (the i64 TAT in two halves: it may pass 2^53)
and rem, and once used, the rule's constants as pairs. concurrent: base,
n entries as their stored bytes (ents, lua/concurrent.lua) and last. Deciding leaves
its plan and verdict in the record (v_* fields, ok, retry_us, retry_ms,
allow_at) and a status in used, remaining and reset_ms.
]]

--[[
Records are reused. A record is a table of some twenty fields, and making
one costs more than a whole decision, so the tables of earlier calls are
kept (the Functions library keeps them between calls; the EVAL script
starts afresh) and each call takes them again from the first: run()
(lua/commands.lua) calls records_reuse() before it starts. No record
outlives the call that took it. A call takes at most 2 x MAX_RULES records
(the key's own, and those converted from them), so the pool stays that
small. A table may serve records of several algorithms in turn: each
reads only its own fields.
]]
local record_pool, record_pool_n = {}, 0

local function records_reuse()
    record_pool_n = 0
end

-- A record of the rule with an empty state: every field its algorithm
-- reads before it writes it is set here (decisions and statuses are
-- written whole before they are read).
local function new_record(algo, limit, period, burst, calendar, months,
                          tz_offset, rule)
    local k = record_pool_n + 1
    local r = record_pool[k]
    if not r then
        r = {}
        record_pool[k] = r
    end
    record_pool_n = k
    r.algo, r.limit, r.period, r.burst, r.rule = algo, limit, period, burst,
        rule
    r.calendar, r.months, r.tz_offset = calendar, months, tz_offset
    if algo == ALGO_SLIDING then
        r.shift, r.base, r.runs, r.n, r.sum = 0, 0, nil, 0, 0
        r.a, r.m, r.tail = 1, 0, ''
    elseif algo == ALGO_GCRA then
        r.tat_lo, r.tat_hi, r.rem, r.Tq = 0, 0, 0, nil
    elseif algo == ALGO_CONCURRENT then
        r.base, r.n, r.last, r.ents = 0, 0, 0, ''
    else
        r.start, r.count, r.cur, r.prev = 0, 0, 0, 0
    end
    return r
end

local function empty_record(rule)
    local r = new_record(rule.algo, rule.limit, rule.period, rule.burst,
        rule.calendar, rule.months, rule.tz_offset, rule)
    if rule.algo == ALGO_SLIDING then
        r.runs = ''
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

-- calendar_read() of state.c: the calendar (6 bytes) that ends a record
-- of `size` bytes at pos (flag 0x80): its bits, months and offset in
-- seconds. A zone (bit 7) is corrupt here, as in the module: no process of
-- ours that reads Redis has loaded one.
local function calendar_read(s, pos, avail, size)
    if avail < size + 6 then
        corrupt()
    end
    local calendar, months, tz_offset = sunpack('<BBi4', s, pos + size)
    -- a zone, or the flag without a calendar (check_fields of state.c)
    if calendar >= CAL_ZONE or calendar == 0 then
        corrupt()
    end
    return calendar, months, tz_offset
end

-- fixed_check() and approx_check() of window.c: the window's start and
-- counts of the record r at pos, whose calendar (if any) takes `extra`
-- bytes after them. Returns r and the position after the record.
local function parse_window(r, s, pos, avail, extra)
    if r.algo == ALGO_FIXED then
        if avail < 22 then
            corrupt()
        end
        local lo, hi, count = sunpack('<I4I4I4', s, pos + 10)
        if hi >= 4096 or count > LIMIT_MAX then
            corrupt()
        end
        r.start, r.count = hi * TWO32 + lo, count
        return r, pos + 22 + extra
    end
    if avail < 26 then
        corrupt()
    end
    local lo, hi, cur, prev = sunpack('<I4I4I4I4', s, pos + 10)
    if hi >= 4096 or cur > LIMIT_MAX or prev > LIMIT_MAX then
        corrupt()
    end
    r.start, r.cur, r.prev = hi * TWO32 + lo, cur, prev
    return r, pos + 26 + extra
end

-- concurrent_check() of concurrent.c for the record at pos: at most
-- CONCURRENT_MAX entries in order of expiry, none past PERIOD from the
-- base, no id 0 (entries of a trusted blob are not checked again).
-- Returns the record and the position after it.
local function parse_concurrent(r, s, pos, avail, trusted)
    if avail < 24 then
        corrupt()
    end
    local lo, hi, n, last = sunpack('<I4I4HI4', s, pos + 10)
    local size = 24 + 8 * n
    if n > CONCURRENT_MAX or avail < size or hi >= 4096 then
        corrupt()
    end
    local ents = sub(s, pos + 24, pos + size - 1)
    if n > 0 and not trusted then
        local E, prev, period = { sunpack(run_format(n), ents) }, 0, r.period
        for i = 1, 2 * n, 2 do
            local off = E[i]
            if off < prev or off > period or E[i + 1] == 0 then
                corrupt()
            end
            prev = off
        end
    end
    r.base, r.n, r.last, r.ents = hi * TWO32 + lo, n, last, ents
    return r, pos + size
end

-- Reads and validates one record at pos (ratel__state_parse's rules:
-- anything the core would not have written is corrupt). Returns the
-- record and the position after it. A record of the rule `want` (a parsed,
-- hence valid, rule, or nil) is made for it, and its rule is not checked
-- again.
local function parse_record(s, pos, len, trusted, want)
    local avail = len - pos + 1
    if avail < 10 then
        corrupt()
    end
    local algo, flags, limit, period = sunpack('<BBI4I4', s, pos)
    if algo > ALGO_CONCURRENT then
        corrupt()
    end
    local burst = 0
    if algo == ALGO_GCRA then
        if avail < 14 then
            corrupt()
        end
        burst = sunpack('<I4', s, pos + 10)
    end
    local calendar, months, tz_offset, extra = 0, 0, 0, 0
    if flags == 128 and (algo == ALGO_FIXED or algo == ALGO_APPROX) then
        calendar, months, tz_offset = calendar_read(s, pos, avail,
            algo == ALGO_FIXED and 22 or 26)
        flags, extra = 0, 6
    end
    if not (want and want.algo == algo and want.limit == limit and
            want.period == period and want.burst == burst and
            want.calendar == calendar and want.months == months and
            want.tz_offset == tz_offset) then
        want = nil
        if not rule_ok(algo, limit, period, burst, calendar, months,
                tz_offset) then
            corrupt()
        end
    end
    if algo == ALGO_SLIDING then
        if flags > 30 then
            corrupt()
        end
    elseif flags ~= 0 then
        corrupt()
    end
    local r = new_record(algo, limit, period, burst, calendar, months,
        tz_offset, want)
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
        if n > 0 and not trusted then
            local R, prev, sum = { sunpack(run_format(n), s, pos + 24) }, -1, 0
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
        -- The runs are read in place (lua/sliding.lua), not cut out.
        r.shift, r.base, r.runs, r.n, r.sum = flags, base, s, n, total
        r.a, r.m, r.tail = pos + 24, n, ''
        return r, pos + size
    elseif algo == ALGO_FIXED or algo == ALGO_APPROX then
        return parse_window(r, s, pos, avail, extra)
    elseif algo == ALGO_CONCURRENT then
        return parse_concurrent(r, s, pos, avail, trusted)
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

--[[
Blobs known to be valid, kept between calls by the Functions library:
those it wrote (serialize) and those it checked. A call that reads back
the bytes the last one wrote skips checking every run of its sliding
records again (a busy key holds 128-256 of them); the other checks
still run. A key's old bytes are forgotten when new ones replace them
(lua/commands.lua), so the set holds about one blob per busy key; it is
bounded at TRUSTED_BYTES in all and emptied at once when that is passed.
]]
local TRUSTED_BYTES = 1048576
local trusted_blobs, trusted_bytes = {}, 0

local function trust(s)
    -- Below 64 bytes a blob has no run to speak of: checking it is cheap.
    if #s >= 64 and not trusted_blobs[s] then
        if trusted_bytes + #s > TRUSTED_BYTES then
            trusted_blobs, trusted_bytes = {}, 0
        end
        trusted_blobs[s], trusted_bytes = true, trusted_bytes + #s
    end
    return s
end

local function untrust(s)
    if trusted_blobs[s] then
        trusted_blobs[s], trusted_bytes = nil, trusted_bytes - #s
    end
end

-- The records of a non-empty blob, or an error reply; and whether they
-- are those of `policy` (optional), rule for rule: each then carries its
-- policy rule as `rule`.
local function parse_blob(s, policy)
    local len = #s
    local trusted = trusted_blobs[s]
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
    local recs, pos, same = {}, 5, policy and #policy == nrules
    for i = 1, nrules do
        local r
        r, pos = parse_record(s, pos, len, trusted, policy and policy[i])
        for j = 1, i - 1 do
            if rule_equal(r, recs[j]) then
                corrupt()
            end
        end
        same = same and r.rule ~= nil
        recs[i] = r
    end
    if pos ~= len + 1 then
        corrupt()
    end
    trust(s)
    return recs, same
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

-- The flags byte of a fixed or approx record, and the calendar that ends
-- it (calendar_write() of state.c: never a zone here); none without one.
local function calendar_write(r)
    if r.calendar == 0 then
        return 0, ''
    end
    return 128, spack('<BBi4', r.calendar, r.months, r.tz_offset)
end

--[[
A sliding record's bytes as three pieces, put in out[k], out[k + 1] and
out[k + 2]: its header, the runs kept from the blob read and those this
call wrote (lua/sliding.lua). Redis's Lua hashes every byte of every
string it makes, so the runs are cut out of the old blob once and copied
once more, into the new blob, and not joined to their header first.
]]
local function sliding_pieces(r, out, k)
    local lo, hi = pack_i64(r.base)
    local a, m = r.a, r.m
    out[k] = spack('<BBI4I4I4I4HI4', 0, r.shift, r.limit, r.period, lo, hi,
        r.n, r.sum)
    out[k + 1] = m > 0 and sub(r.runs, a, a + 8 * m - 1) or ''
    out[k + 2] = r.tail
    return k + 3
end

-- One record's bytes (not sliding: sliding_pieces).
local function record_bytes(r)
    local algo = r.algo
    if algo == ALGO_FIXED then
        local lo, hi = pack_i64(r.start)
        local flags, calendar = calendar_write(r)
        return spack('<BBI4I4I4I4I4', 1, flags, r.limit, r.period, lo, hi,
            r.count) .. calendar
    elseif algo == ALGO_APPROX then
        local lo, hi = pack_i64(r.start)
        local flags, calendar = calendar_write(r)
        return spack('<BBI4I4I4I4I4I4', 2, flags, r.limit, r.period, lo, hi,
            r.cur, r.prev) .. calendar
    elseif algo == ALGO_CONCURRENT then
        local lo, hi = pack_i64(r.base)
        return spack('<BBI4I4I4I4HI4', 4, 0, r.limit, r.period, lo, hi, r.n,
            r.last) .. r.ents
    end
    return spack('<BBI4I4I4I4I4I4', 3, 0, r.limit, r.period, r.burst,
        r.tat_lo, r.tat_hi, r.rem)
end

local serialize_out = {}

local function serialize(recs)
    local n = #recs
    if n == 1 and recs[1].algo ~= ALGO_SLIDING then
        return trust(HEADERS[1] .. record_bytes(recs[1]))
    end
    local out, k = serialize_out, 2
    out[1] = HEADERS[n]
    for i = 1, n do
        local r = recs[i]
        if r.algo == ALGO_SLIDING then
            k = sliding_pieces(r, out, k)
        else
            out[k], k = record_bytes(r), k + 1
        end
    end
    return trust(table.concat(out, '', 1, k - 1))
end
