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
(lua/commands.lua) calls records_reuse() before it starts. No record of
the pool outlives the call that took it (a plan's record is the plan's:
plan_of). A call takes at most 2 x MAX_RULES records
(the key's own, and those converted from them), so the pool stays that
small. A table may serve records of several algorithms in turn: each
reads only its own fields.
]]
local record_pool, record_pool_n = {}, 0

--[[
The algorithms: one entry each, keyed by its number (ALGO_*; its fields
are listed below). The state parser, lua/policy.lua and INFO go through
this table only. Each algorithm's file makes its entry: sliding's, the
default, at once (lua/sliding.lua); every other one in a loader
(LOADERS[algo]) that makes the algorithm's functions and entry at the
first call that needs them: the EVAL script runs the whole core on every
call (lua/eval.lua), so it makes only the algorithms a call uses. A new
algorithm is its file, its loader and its map line (include/ratel.h).

Each algorithm's entry holds clear: the empty state. parse(r, s, pos,
avail, trusted, flags, extra): the state at pos, checked, and the
position after the record. bytes(r): the record's bytes; pieces(r, out,
k), if given, puts them in out[k..] as several strings and returns the
next k (sliding: its runs are copied once, serialize). flags_max: the
largest flags byte besides a calendar's. Whether a calendar may end the
record and whether the rule's bytes hold a burst are facts of the map
(ALGO_FACTS, generated from include/ratel.h). A record of a fixed size
gives rule_size, state, size, load and fields instead of its own parse
and bytes (fixed_parse, fixed_bytes). Then the decisions: status,
decide, commit(r, now_us, cost, at_us), refund, info(r, stored_runs)
(the values of the fields INFO shows beyond those of every rule, in the
order of ALGO_FACTS[algo].fields), and convert(old, rule, now_us) where
a record of another limit is not kept as it is (gcra).
]]
local LOADERS = {}
local ALGORITHMS = setmetatable({}, {
    __index = function(t, algo)
        local load = LOADERS[algo]
        if load then
            load()
            return rawget(t, algo)
        end
    end,
})

local function records_reuse()
    record_pool_n = 0
end

-- Fills r as a record of the rule with an empty state: every field its
-- algorithm reads before it writes it is set here (decisions and statuses
-- are written whole before they are read).
local function init_record(r, algo, limit, period, burst, calendar, months,
                           tz_offset, rule)
    r.algo, r.limit, r.period, r.burst, r.rule = algo, limit, period, burst,
        rule
    r.calendar, r.months, r.tz_offset = calendar, months, tz_offset
    ALGORITHMS[algo].clear(r)
    return r
end

-- A record from the pool, made empty for the rule.
local function new_record(algo, limit, period, burst, calendar, months,
                          tz_offset, rule)
    local k = record_pool_n + 1
    local r = record_pool[k]
    if not r then
        r = {}
        record_pool[k] = r
    end
    record_pool_n = k
    return init_record(r, algo, limit, period, burst, calendar, months,
        tz_offset, rule)
end

local function empty_record(rule)
    return new_record(rule.algo, rule.limit, rule.period, rule.burst,
        rule.calendar, rule.months, rule.tz_offset, rule)
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

-- Every pair of the bytes `runs` (n pairs) as one array {offset, count,
-- offset, count, ...}: sliding's runs and concurrent's entries alike
-- (docs/state-format.md).
local function runs_array(runs, n)
    local R = { sunpack(run_format(n), runs) }
    R[2 * n + 1] = nil
    return R
end

local function runs_bytes(R, n)
    if n == 0 then
        return ''
    end
    return spack(run_format(n), unpack_(R, 1, 2 * n))
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

-- The state of a record of a fixed size at pos (fixed_check(),
-- approx_check() and gcra_check() of the core: load checks the fields),
-- whose calendar (if any) takes `extra` bytes after it. Returns r and the
-- position after the record.
local function fixed_parse(r, s, pos, avail, _, _, extra)
    local A = ALGORITHMS[r.algo]
    if avail < A.size then
        corrupt()
    end
    A.load(r, sunpack(A.state, s, pos + A.rule_size))
    return r, pos + A.size + extra
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
    local A = ALGORITHMS[algo]
    if not A then
        corrupt()
    end
    local burst = 0
    if ALGO_FACTS[algo].burst then
        if avail < 14 then
            corrupt()
        end
        burst = sunpack('<I4', s, pos + 10)
    end
    local calendar, months, tz_offset, extra = 0, 0, 0, 0
    if flags == 128 and ALGO_FACTS[algo].calendar then
        calendar, months, tz_offset = calendar_read(s, pos, avail, A.size)
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
    if flags > A.flags_max then
        corrupt()
    end
    local r = new_record(algo, limit, period, burst, calendar, months,
        tz_offset, want)
    return A.parse(r, s, pos, avail, trusted, flags, extra)
end

--[[
Blobs known to be valid, kept between calls by the Functions library:
those it wrote (serialize) and those it checked. A call that reads back
the bytes the last one wrote skips checking every run of its sliding
records again (a busy key holds 128-256 of them); the other checks
still run. A key's old bytes are forgotten when new ones replace them
(lua/commands.lua), so the set holds about one blob per busy key; it is
bounded at TRUSTED_BYTES in all and emptied at once when that is passed.
That bound is small on purpose: everything the library keeps is live heap
that Lua's collector goes over again and again, so every call of every
key pays for it (held at 1 MB, it made a gcra call some 10 % slower).
64 KB holds the blobs of the few keys that are hot enough to gain.
]]
local TRUSTED_BYTES = 65536
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

-- An integer as its low and high u32 halves (exact: 2^32 divides evenly).
local function pack_i64(v)
    local lo = v % TWO32
    return lo, (v - lo) / TWO32
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


-- The bytes of a fixed-size record's rule (algo, flags, limit, period and
-- gcra's burst).
local function rule_bytes(r, flags)
    if ALGO_FACTS[r.algo].burst then
        return spack('<BBI4I4I4', r.algo, flags, r.limit, r.period, r.burst)
    end
    return spack('<BBI4I4', r.algo, flags, r.limit, r.period)
end

-- A fixed-size record's bytes: the rule, the state fields, the calendar.
local function fixed_bytes(r)
    local A = ALGORITHMS[r.algo]
    local flags, calendar = calendar_write(r)
    return rule_bytes(r, flags) .. spack(A.state, A.fields(r)) .. calendar
end

--[[
Plans: a policy of one rule whose record has a fixed size and no calendar
(fixed, approx or gcra) reads and writes its key without parsing it. Its
plan, made once when the policy is parsed and kept with it
(lua/commands.lua), holds the bytes every key of that rule starts with
(the blob's header and the rule's bytes), the blob's size and a record of
its own for the rule. A key of that size that starts with those bytes
holds exactly that rule, valid and alone: only the state fields after it
are read, with one struct.unpack, and checked (load) as parse_record
checks them. What a decision writes is the same start and the new fields.
]]
local function plan_of(policy)
    local rule = policy[1]
    local A = ALGORITHMS[rule.algo]
    if #policy ~= 1 or not A.state or rule.calendar ~= 0 then
        return nil
    end
    local r = init_record({}, rule.algo, rule.limit, rule.period, rule.burst,
        0, 0, 0, rule)
    local head = HEADERS[1] .. rule_bytes(r, 0)
    -- The blob in one struct.pack: the start as a string of its size
    -- (format cN), then the fields.
    local plan = { A = A, rec = r, head = head, size = 4 + A.size,
        at = 5 + A.rule_size, recs = { r },
        blob = '<c' .. #head .. sub(A.state, 2) }
    plan.recs.plan = plan
    return plan
end

-- The records of the key's bytes s (false: no key) under the plan, or nil
-- when s is not a key of its rule. The plan's record holds the state of
-- plan.last, the bytes it last made (serialize), until a call takes it
-- again: a key that still holds them is not read at all.
local function planned_records(plan, s)
    local r, last = plan.rec, plan.last
    plan.last = nil
    if s == last then
        return plan.recs
    end
    if not s then
        plan.A.clear(r)
        return plan.recs
    end
    if #s ~= plan.size or sub(s, 1, plan.at - 1) ~= plan.head then
        return nil
    end
    plan.A.load(r, sunpack(plan.A.state, s, plan.at))
    return plan.recs
end

-- The call only read the plan's record (a denial, a peek): it still holds
-- the state of the key's bytes s.
local function planned_kept(recs, s)
    local plan = recs.plan
    if plan and s then
        plan.last = s
    end
end

-- One record's bytes.
local function record_bytes(r)
    return ALGORITHMS[r.algo].bytes(r)
end

-- The blob of the records; a plan's records are its start and their
-- fields (below 64 bytes, so never trusted: trust() keeps no such blob).
local serialize_out = {}

local function serialize(recs)
    local plan = recs.plan
    if plan then
        plan.last = spack(plan.blob, plan.head, plan.A.fields(recs[1]))
        return plan.last
    end
    local n = #recs
    if n == 1 and not ALGORITHMS[recs[1].algo].pieces then
        return trust(HEADERS[1] .. record_bytes(recs[1]))
    end
    -- A record whose entry gives pieces (sliding) adds them as they are.
    local out, k = serialize_out, 2
    out[1] = HEADERS[n]
    for i = 1, n do
        local r = recs[i]
        local pieces = ALGORITHMS[r.algo].pieces
        if pieces then
            k = pieces(r, out, k)
        else
            out[k], k = record_bytes(r), k + 1
        end
    end
    return trust(table.concat(out, '', 1, k - 1))
end
