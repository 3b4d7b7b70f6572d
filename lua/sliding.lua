-- sliding.lua - the sliding log in runs (mirrors lib/core/sliding.c).
--
-- A record keeps its runs as bytes (n runs of u32 offset_ms, u32 count,
-- docs/state-format.md) in two parts: m runs read in place in the blob
-- the key held (r.runs from byte r.a on, never cut out of it), then
-- r.tail, the runs this call wrote (none, the newest changed, or one
-- added). A call reads the runs that expire and the newest, moves r.a
-- past the expired ones and writes the newest into r.tail, so the
-- 128-256 runs a busy key holds are copied once, into the new blob
-- (sliding_pieces, below), and never parsed but to coarsen.

-- The algorithm's entry (ALGORITHMS, lua/state.lua), made at the end of
-- this file: sliding is the default algorithm, so it is made at once, not
-- by a loader.
do
    local function round_up(t, shift)
        local g = 2 ^ shift
        return floor((t + g - 1) / g) * g
    end

    -- Run i (0-based) of the record r: its offset and count.
    local function run_at(r, i)
        local m = r.m
        if i < m then
            return sunpack('<I4I4', r.runs, r.a + 8 * i)
        end
        return sunpack('<I4I4', r.tail, 8 * (i - m) + 1)
    end

    -- The offset of the newest run (n > 0).
    local function last_offset(r)
        return (run_at(r, r.n - 1))
    end

    -- Every run of a sliding record as one array (to coarsen or rebase).
    local function sl_array(r)
        local m, n = r.m, r.n
        local R = m > 0 and { sunpack(run_format(m), r.runs, r.a) } or {}
        if n > m then
            local T = runs_array(r.tail, n - m)
            for i = 1, 2 * (n - m) do
                R[2 * m + i] = T[i]
            end
        end
        R[2 * n + 1] = nil
        return R
    end

    -- The record's runs are now the n of the array R.
    local function sl_set_array(r, R, n)
        r.runs, r.a, r.m, r.tail, r.n = runs_bytes(R, n), 1, n, '', n
    end

    -- Drops the d oldest runs.
    local function sl_drop(r, d)
        local m = r.m
        if d <= m then
            r.a, r.m = r.a + 8 * d, m - d
        else
            r.tail, r.m = sub(r.tail, 8 * (d - m) + 1), 0
        end
        r.n = r.n - d
    end

    -- Drops the newest run (n > 0).
    local function sl_pop(r)
        if r.n > r.m then
            r.tail = sub(r.tail, 1, -9)
        else
            r.m = r.m - 1
        end
        r.n = r.n - 1
    end

    -- Appends a run.
    local function sl_push(r, off, c)
        r.tail = r.tail .. spack('<I4I4', off, c)
        r.n = r.n + 1
    end

    -- scan() of sliding.c: expired runs at the head, and the permits the
    -- others count.
    local function sl_scan(r, now_ms)
        local n, base = r.n, r.base
        local cutoff = now_ms - r.period
        local i, gone = 0, 0
        while i < n do
            local off, c = run_at(r, i)
            if base + off > cutoff then
                break
            end
            gone = gone + c
            i = i + 1
        end
        return i, r.sum - gone
    end

    local function sl_reset_us(r, now_us)
        if r.n == 0 then
            return 0
        end
        local d = (r.base + last_offset(r) + r.period) * 1000 - now_us
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
        if round_up(now_ms, shift) <= r.base + last_offset(r) then
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
        local base = r.base
        local need, acc = total + cost - limit, 0
        for i = drop, r.n - 1 do
            local off, c = run_at(r, i)
            acc = acc + c
            if acc >= need then
                r.retry_us = (base + off + r.period) * 1000 - now_us
                r.retry_ms = cdiv(r.retry_us, 1000)
                return
            end
        end
    end

    -- coarsen(): the smallest granularity above `shift` that leaves at most
    -- CAP/2 runs; runs rounded up to it, equal times merged, offsets rebased
    -- on the first run's time.
    local function sl_coarsen(r, shift)
        local n, base = r.n, r.base
        local R = sl_array(r)
        local first = base + R[1]
        shift = shift + 1
        while shift < 30 do
            local distinct, prev = 1, round_up(first, shift)
            for i = 1, n - 1 do
                local t = round_up(base + R[2 * i + 1], shift)
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
            local t = round_up(base + R[2 * i + 1], shift)
            local c = R[2 * i + 2]
            if out > 0 and first + R[2 * out - 1] == t then
                R[2 * out] = R[2 * out] + c
            else
                R[2 * out + 1] = t - first
                R[2 * out + 2] = c
                out = out + 1
            end
        end
        r.base = first
        sl_set_array(r, R, out)
        return shift
    end

    -- The runs rebased on the first one's time (the window spans < 2^32 ms).
    local function sl_rebase(r)
        local n = r.n
        local R = sl_array(r)
        local first = R[1]
        for i = 1, 2 * n, 2 do
            R[i] = R[i] - first
        end
        r.base = r.base + first
        sl_set_array(r, R, n)
    end

    local function sl_commit(r, now_us, cost)
        local now_ms = floor(now_us / 1000)
        local kind, shift = sl_plan(r, now_ms, r.v_drop)
        if r.v_drop > 0 then
            sl_drop(r, r.v_drop)
        end
        local t
        if kind == 2 then
            shift = sl_coarsen(r, shift)
            t = round_up(now_ms, shift)
            kind = t <= r.base + last_offset(r) and 0 or 1
        end
        t = round_up(now_ms, shift)
        if kind == 0 then
            local off, c = run_at(r, r.n - 1)
            sl_pop(r)
            sl_push(r, off, c + cost)
        else
            if r.n == 0 then
                r.base = t
            elseif t - r.base > TWO32 - 1 then
                sl_rebase(r)
            end
            sl_push(r, t - r.base, cost)
        end
        r.shift = shift
        r.sum = r.v_total + cost
        r.used = r.sum
        r.remaining = r.sum < r.limit and r.limit - r.sum or 0
        r.reset_ms = cdiv(sl_reset_us(r, now_us), 1000)
    end

    -- Gives back the newest permits first: they would have expired last.
    local function sl_refund(r, now_us, cost)
        local drop, sum = sl_scan(r, floor(now_us / 1000))
        sl_drop(r, drop)
        while cost > 0 and r.n > 0 do
            local off, c = run_at(r, r.n - 1)
            sl_pop(r)
            if c <= cost then
                cost, sum = cost - c, sum - c
            else
                sl_push(r, off, c - cost)
                sum, cost = sum - cost, 0
            end
        end
        if r.n == 0 then
            r.shift = 0
        end
        r.sum = sum
    end

    --[[
    A sliding record's bytes as three pieces, put in out[k], out[k + 1]
    and out[k + 2]: its header, the runs kept from the blob read and those
    this call wrote. Redis's Lua hashes every byte of every string it
    makes, so the runs are cut out of the old blob once and copied once
    more, into the new blob (serialize, lua/state.lua), and not joined to
    their header first.
    ]]
    local function sliding_pieces(r, out, k)
        local lo, hi = pack_i64(r.base)
        local a, m = r.a, r.m
        out[k] = spack('<BBI4I4I4I4HI4', 0, r.shift, r.limit, r.period, lo,
            hi, r.n, r.sum)
        out[k + 1] = m > 0 and sub(r.runs, a, a + 8 * m - 1) or ''
        out[k + 2] = r.tail
        return k + 3
    end

    ALGORITHMS[ALGO_SLIDING] = {
        flags_max = 30,
        clear = function(r)
            r.shift, r.base, r.runs, r.n, r.sum = 0, 0, nil, 0, 0
            r.a, r.m, r.tail = 1, 0, ''
        end,
        -- sliding_check() of sliding.c, the flags being the shift: at most
        -- SLIDING_CAP runs in order, none empty, summing to the stored total
        -- (runs of a trusted blob are not checked again).
        parse = function(r, s, pos, avail, trusted, shift)
            if avail < 24 then
                corrupt()
            end
            local lo, hi, n, total = sunpack('<I4I4HI4', s, pos + 10)
            local size = 24 + 8 * n
            if n > SLIDING_CAP or avail < size or hi >= 4096 or
                total > LIMIT_MAX or (n == 0) ~= (total == 0) then
                corrupt()
            end
            local base = hi * TWO32 + lo
            if n > 0 and not trusted then
                local R, prev, sum = { sunpack(run_format(n), s, pos + 24) },
                    -1, 0
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
            r.shift, r.base, r.runs, r.n, r.sum = shift, base, s, n, total
            r.a, r.m, r.tail = pos + 24, n, ''
            return r, pos + size
        end,
        pieces = sliding_pieces,
        status = sl_status, decide = sl_decide, commit = sl_commit,
        refund = sl_refund,
        info = function(r, stored_runs)
            return stored_runs, 2 ^ r.shift
        end,
        bytes = function(r)
            local out = {}
            return table.concat(out, '', 1, sliding_pieces(r, out, 1) - 1)
        end,
    }
end
