-- window.lua - fixed and approx windows (mirrors lib/core/window.c).

-- The algorithms' loader (LOADERS, lua/state.lua): one for both.
LOADERS[ALGO_FIXED] = function()
    -- window_at(): the window [ws, we) holding now_ms, clamped to the stored
    -- one (a clock gone back stays in it). Epoch-aligned windows find the
    -- usual answers (the stored window or the next) without a division; a
    -- calendar's windows are lua/calendar.lua's.
    local function window_at(r, now_ms, stored)
        if r.calendar ~= 0 then
            local ws, we = window(r, now_ms)
            if ws < stored then
                local _
                _, we = window(r, stored)
                ws = stored
            end
            return ws, we
        end
        local period = r.period
        local ws = stored -- in the stored window, or before it: clamped
        if now_ms >= stored + 2 * period then
            ws = now_ms - now_ms % period
            if stored > ws then
                ws = stored
            end
        elseif now_ms >= stored + period then
            ws = stored + period
        end
        return ws, ws + period
    end

    -- window_end(): the end of the window that starts at `start`.
    local function window_end(r, start)
        if r.calendar == 0 then
            return start + r.period
        end
        local _, we = window(r, start)
        return we
    end

    -- window_precedes(): whether `stored` starts the window before the one at
    -- ws.
    local function window_precedes(r, stored, ws)
        if r.calendar == 0 then
            return stored + r.period == ws
        end
        return stored < ws and window(r, ws - 1) == stored
    end

    local function fx_count(r, now_ms)
        local start = r.start
        local ws, we = window_at(r, now_ms, start)
        return start == ws and r.count or 0, ws, we
    end

    local function fx_status(r, now_us)
        local count, _, we = fx_count(r, floor(now_us / 1000))
        r.used = count
        r.remaining = count < r.limit and r.limit - count or 0
        r.reset_ms = count > 0 and cdiv(until_us(we, now_us), 1000) or 0
    end

    local function fx_decide(r, now_us, cost)
        local count, ws, we = fx_count(r, floor(now_us / 1000))
        r.v_ws, r.v_we, r.v_cur = ws, we, count
        r.ok = count + cost <= r.limit
        -- The next window starts empty and cost <= limit: it fits there.
        r.retry_us = r.ok and 0 or until_us(we, now_us)
        r.retry_ms = cdiv(r.retry_us, 1000)
    end

    local function fx_commit(r, now_us, cost)
        local count = r.v_cur + cost
        r.start, r.count = r.v_ws, count
        r.used = count
        r.remaining = count < r.limit and r.limit - count or 0
        r.reset_ms = cdiv(until_us(r.v_we, now_us), 1000)
    end

    local function fx_refund(r, now_us, cost)
        local count, ws = fx_count(r, floor(now_us / 1000))
        r.start, r.count = ws, count - (cost < count and cost or count)
    end

    -- approx_view(): the counters moved to the window [ws, we) holding now_ms,
    -- and the previous window's weight in 1/65536.
    local function ap_view(r, now_ms)
        local start = r.start
        local ws, we = window_at(r, now_ms, start)
        local e = now_ms > ws and now_ms - ws or 0
        local cur, prev = 0, 0
        if start == ws then
            cur, prev = r.cur, r.prev
        elseif window_precedes(r, start, ws) then
            prev = r.cur
        end
        local len = we - ws
        return ws, we, cur, prev, idiv((len - e) * SCALE, len)
    end

    local function ap_used(cur, prev, w)
        return cur + cdiv(prev * w, SCALE)
    end

    -- approx_reset_us(), in ms: when the counts of the window [ws, we) have
    -- left the estimate.
    local function ap_reset_ms(r, we, cur, prev, now_us)
        if cur > 0 then
            return cdiv(until_us(window_end(r, we), now_us), 1000)
        elseif prev > 0 then
            return cdiv(until_us(we, now_us), 1000)
        end
        return 0
    end

    local function ap_status(r, now_us)
        local _, we, cur, prev, w = ap_view(r, floor(now_us / 1000))
        local used = ap_used(cur, prev, w)
        r.used = used
        r.remaining = used < r.limit and r.limit - used or 0
        r.reset_ms = ap_reset_ms(r, we, cur, prev, now_us)
    end

    -- approx_first_fit(): the first elapsed time in a window of `len` ms at
    -- which the request fits; len if there is none.
    local function ap_first_fit(prev, need, limit, len)
        if need > limit then
            return len
        end
        if prev == 0 then
            return 0
        end
        local x = idiv((limit - need) * SCALE, prev)
        if x >= SCALE then
            return 0
        end
        local e = len - cdiv((x + 1) * len, SCALE) + 1
        return e < 0 and 0 or e
    end

    -- approx_retry_ms(): when a request denied in the window [ws, we) fits: in
    -- this window, else in the next (whose previous count is this one's), else
    -- when the one after begins.
    local function ap_retry_ms(r, ws, we, cur, prev, cost)
        local limit = r.limit
        local e = ap_first_fit(prev, cur + cost, limit, we - ws)
        if e < we - ws then
            return ws + e
        end
        local next_end = window_end(r, we)
        e = ap_first_fit(cur, cost, limit, next_end - we)
        return e < next_end - we and we + e or next_end
    end

    local function ap_decide(r, now_us, cost)
        local ws, we, cur, prev, w = ap_view(r, floor(now_us / 1000))
        local limit = r.limit
        r.v_ws, r.v_we, r.v_cur, r.v_prev, r.v_w = ws, we, cur, prev, w
        r.ok = prev * w + (cur + cost) * SCALE <= limit * SCALE
        r.retry_us = r.ok and 0 or
            until_us(ap_retry_ms(r, ws, we, cur, prev, cost), now_us)
        r.retry_ms = cdiv(r.retry_us, 1000)
    end

    local function ap_commit(r, now_us, cost)
        local cur = r.v_cur + cost
        r.start, r.cur, r.prev = r.v_ws, cur, r.v_prev
        local used = ap_used(cur, r.v_prev, r.v_w)
        r.used = used
        r.remaining = used < r.limit and r.limit - used or 0
        r.reset_ms = ap_reset_ms(r, r.v_we, cur, r.v_prev, now_us)
    end

    local function ap_refund(r, now_us, cost)
        local ws, _, cur, prev = ap_view(r, floor(now_us / 1000))
        r.start, r.cur, r.prev = ws, cur - (cost < cur and cost or cur), prev
    end

    -- INFO's field of both: where the stored window starts.
    local function window_info(r)
        return r.start
    end

    ALGORITHMS[ALGO_FIXED] = {
        status = fx_status, decide = fx_decide, commit = fx_commit,
        refund = fx_refund, info = window_info,
        flags_max = 0, rule_size = 10, state = '<I4I4I4',
        size = 22, parse = fixed_parse, bytes = fixed_bytes,
        clear = function(r)
            r.start, r.count = 0, 0
        end,
        -- fixed_check() of window.c.
        load = function(r, lo, hi, count)
            if hi >= 4096 or count > LIMIT_MAX then
                corrupt()
            end
            r.start, r.count = hi * TWO32 + lo, count
        end,
        fields = function(r)
            local lo, hi = pack_i64(r.start)
            return lo, hi, r.count
        end,
    }

    ALGORITHMS[ALGO_APPROX] = {
        status = ap_status, decide = ap_decide, commit = ap_commit,
        refund = ap_refund, info = window_info,
        flags_max = 0, rule_size = 10, state = '<I4I4I4I4',
        size = 26, parse = fixed_parse, bytes = fixed_bytes,
        clear = function(r)
            r.start, r.cur, r.prev = 0, 0, 0
        end,
        -- approx_check() of window.c.
        load = function(r, lo, hi, cur, prev)
            if hi >= 4096 or cur > LIMIT_MAX or prev > LIMIT_MAX then
                corrupt()
            end
            r.start, r.cur, r.prev = hi * TWO32 + lo, cur, prev
        end,
        fields = function(r)
            local lo, hi = pack_i64(r.start)
            return lo, hi, r.cur, r.prev
        end,
    }
end
LOADERS[ALGO_APPROX] = LOADERS[ALGO_FIXED]
