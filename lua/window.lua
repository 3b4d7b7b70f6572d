-- window.lua - fixed and approx windows (mirrors src/core/window.c).

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
