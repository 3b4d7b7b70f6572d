-- sliding.lua - the sliding log in runs (mirrors src/core/sliding.c).

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
