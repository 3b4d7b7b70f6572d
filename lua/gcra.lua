-- gcra.lua - token bucket as GCRA (mirrors lib/core/gcra.c).

-- The algorithm's loader (LOADERS, lua/state.lua).
LOADERS[ALGO_GCRA] = function()
    --[[
    The core keeps TAT and now in units of 1/LIMIT us, where the emission
    interval T is exactly PERIOD in us, and computes in 128 bits. A value V
    in those units is here a pair of doubles (q, r) with V = q x LIMIT + r and
    0 <= r < LIMIT: whole microseconds and a remainder, as the record stores
    TAT. Every operation works on x = TAT - now, relative to now (nginx's
    limit_req keeps its "excess" the same way), and adds, subtracts and
    compares pairs; c x T is split as c x (Tq x LIMIT + Tr), where c x Tr
    (up to 2^60) is divided by LIMIT exactly in 18-bit steps (mul_qr).

    Why that is exact: a valid rule has burst x T / LIMIT <= 10 years < 2^49
    us, so tau, and c x T for a cost c <= burst, have q < 2^49; a
    reservation's wait is at most 30 days < 2^42 us. If now < 2^52 us (the
    year 2112) and |TAT - now| < 2^51 us (71 years), then every q computed
    below is an integer under 2^52 + 2^51 + 2^50 < 2^53, including the new
    TAT = now + q, and every remainder sum is below 2^31: all exact in
    doubles, for every valid rule (1e9/30d included).

    Outside those bounds - a clock after 2112, or one that stepped back by
    more than 71 years while a key was held - TAT - now and TAT itself pass
    2^53 us, which doubles cannot hold exactly. For exactly those cases (gc_x
    answers nil) the slow path follows gcra.c with the big integers of
    lua/internal.lua. The conformance traces run both.
    ]]
    local FAST_NOW = 2 ^ 52
    local FAST_AHEAD = 2 ^ 51
    local TWO18, TWO36, TWO53 = 262144, 68719476736, 2 ^ 53

    -- (floor(c x b / L), c x b mod L) for integers 0 <= c < 2^53 and
    -- 0 <= b < L <= 2^30: c in three 18-bit digits, so that every partial
    -- product stays below 2^49.
    local function mul_qr(c, b, L)
        local p = c * b
        if p < TWO53 then -- exact: one division does
            local q = idiv(p, L)
            return q, p - q * L
        end
        local c2 = floor(c / TWO36)
        local c1 = floor((c - c2 * TWO36) / TWO18)
        local c0 = c - c2 * TWO36 - c1 * TWO18
        local p = c2 * b
        local q = idiv(p, L)
        p = (p - q * L) * TWO18 + c1 * b
        local q1 = idiv(p, L)
        p = (p - q1 * L) * TWO18 + c0 * b
        local q0 = idiv(p, L)
        return (q * TWO18 + q1) * TWO18 + q0, p - q0 * L
    end

    -- T and tau as pairs: T = Tq L + Tr, tau = tq L + tr; computed once per
    -- parsed rule (kept between calls with it, lua/rule.lua) and copied into
    -- a record that has none (r.Tq nil).
    local function gc_consts(r)
        local c = r.rule or r
        if not c.Tq then
            local L, T = c.limit, c.period * 1000
            local Tq = idiv(T, L)
            local Tr = T - Tq * L
            local q, rem = mul_qr(c.burst, Tr, L)
            c.Tq, c.Tr, c.tq, c.tr = Tq, Tr, c.burst * Tq + q, rem
        end
        r.Tq, r.Tr, r.tq, r.tr = c.Tq, c.Tr, c.tq, c.tr
    end

    -- c x T as a pair (c x T / LIMIT below 2^53 us).
    local function times_T(r, c)
        if c == 1 then
            return r.Tq, r.Tr
        end
        local q, rem = mul_qr(c, r.Tr, r.limit)
        return c * r.Tq + q, rem
    end

    -- max(TAT - now, 0) as a pair, or nil where the bounds above fail.
    local function gc_x(r, now_us)
        local hi = r.tat_hi
        if hi >= 2097152 or now_us >= FAST_NOW then
            return nil
        end
        local d = hi * TWO32 + r.tat_lo - now_us
        if d >= FAST_AHEAD or d <= -FAST_AHEAD then
            return nil
        end
        if not r.Tq then
            gc_consts(r)
        end
        if d < 0 then
            return 0, 0
        end
        return d, r.rem
    end

    -- The permits owed, ceil(x / T), for x = (xq, xr) >= 0. Where x in
    -- units of 1/LIMIT us, xq x LIMIT + xr, is below 2^53 it is exact in a
    -- double, and so is one division; else the quotient in doubles, made
    -- exact by comparing pairs (it is off by at most one below 2^50; past
    -- 2^53 permits it is the nearest double, as INFO sends).
    local function gc_owed(r, xq, xr)
        if xq == 0 and xr == 0 then
            return 0
        end
        local L, Tq, Tr = r.limit, r.Tq, r.Tr
        local x = xq * L + xr
        if x < TWO53 then
            return cdiv(x, r.period * 1000)
        end
        local o = floor(x / (r.period * 1000))
        if o >= 2 ^ 53 then
            return o
        end
        local pq, pr = times_T(r, o)
        while pq < xq or (pq == xq and pr < xr) do
            o, pq, pr = o + 1, pq + Tq, pr + Tr
            if pr >= L then
                pq, pr = pq + 1, pr - L
            end
        end
        while o > 0 do
            local q, rem = pq - Tq, pr - Tr
            if rem < 0 then
                q, rem = q - 1, rem + L
            end
            if q < xq or (q == xq and rem < xr) then
                break
            end
            o, pq, pr = o - 1, q, rem
        end
        return o
    end

    -- gcra_counts() from the permits owed.
    local function gc_counts(r, owed)
        r.used = owed < USED_MAX and owed or USED_MAX
        r.remaining = owed < r.burst and r.burst - owed or 0
    end

    -- store_tat(): TAT = now + (q, rem); the reset time is the pair in us
    -- rounded up.
    local function gc_store(r, q, rem, now_us)
        r.tat_lo, r.tat_hi = pack_i64(now_us + q)
        r.rem = rem
        r.reset_ms = cdiv(rem > 0 and q + 1 or q, 1000)
    end

    -- Slow path: TAT and now scaled, as big integers.
    local function gb_view(r, now_us)
        local L = r.limit
        local tat = big_add(big_mul(big_halves(r.tat_lo, r.tat_hi), L),
            big(r.rem))
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
        local xq, xr = gc_x(r, now_us)
        if xq then
            gc_counts(r, gc_owed(r, xq, xr))
            r.reset_ms = cdiv(xr > 0 and xq + 1 or xq, 1000)
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

    -- Conforms when max(x, 0) + cost x T <= tau; else the wait is the excess.
    -- Admitted, it keeps that sum for gc_commit (v_q, v_rem).
    local function gc_decide(r, now_us, cost)
        local xq, xr = gc_x(r, now_us)
        if xq then
            local L = r.limit
            local cq, cr = times_T(r, cost)
            local q, rem = xq + cq, xr + cr
            if rem >= L then
                q, rem = q + 1, rem - L
            end
            if q < r.tq or (q == r.tq and rem <= r.tr) then
                r.ok, r.retry_us, r.retry_ms = true, 0, 0
                r.v_q, r.v_rem = q, rem
            else
                r.v_q = nil
                q, rem = q - r.tq, rem - r.tr
                if rem < 0 then
                    q, rem = q - 1, rem + L
                end
                r.ok = false
                r.retry_us = rem > 0 and q + 1 or q
                r.retry_ms = cdiv(r.retry_us, 1000)
            end
        else
            r.v_q = nil
            local tat, now = gb_view(r, now_us)
            local tb = big(r.period * 1000)
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

    -- Charges `cost` from max(TAT, at): at is now, or a reservation's instant
    -- (the other algorithms' commits take no `at`).
    local function gc_commit(r, now_us, cost, at_us)
        -- Admitted now, the new TAT is the one the decision compared: max(x, 0)
        -- + cost x T (v_q, v_rem; nil when it was not admitted so).
        if at_us == now_us and r.v_q then
            local q, rem = r.v_q, r.v_rem
            gc_store(r, q, rem, now_us)
            gc_counts(r, gc_owed(r, q, rem))
            return
        end
        local xq, xr = gc_x(r, now_us)
        if xq then
            local w = at_us - now_us
            if w > xq then
                xq, xr = w, 0
            end
            local cq, cr = times_T(r, cost)
            local q, rem = xq + cq, xr + cr
            if rem >= r.limit then
                q, rem = q + 1, rem - r.limit
            end
            gc_store(r, q, rem, now_us)
            gc_counts(r, gc_owed(r, q, rem))
            return
        end
        local tat, now = gb_view(r, now_us)
        local at = big_mul(big(at_us), r.limit)
        local m = big_add(big_cmp(tat, at) > 0 and tat or at,
            big_mul(big(r.period * 1000), cost))
        local ahead = big_sub(m, now)
        gb_store(r, ahead, now_us)
        gb_counts(r, ahead)
    end

    -- TAT goes back by cost x T, not before now. A cost of at least the
    -- permits owed empties the bucket (REFUND's cost is not bounded by the
    -- burst, so it is compared before it is multiplied).
    local function gc_refund(r, now_us, cost)
        local xq, xr = gc_x(r, now_us)
        if xq then
            if cost >= gc_owed(r, xq, xr) then
                gc_store(r, 0, 0, now_us)
                return
            end
            local cq, cr = times_T(r, cost)
            local q, rem = xq - cq, xr - cr
            if rem < 0 then
                q, rem = q - 1, rem + r.limit
            end
            gc_store(r, q, rem, now_us)
            return
        end
        local tat, now = gb_view(r, now_us)
        local rhs = big_add(now, big_mul(big(r.period * 1000), cost))
        gb_store(r, big_cmp(tat, rhs) > 0 and big_sub(tat, rhs) or { 0 },
            now_us)
    end

    -- gcra_convert(): the permits owed under the old rule (same period),
    -- capped at the new burst, owed again under the new one.
    local function gc_convert(old, rule, now_us)
        local r = empty_record(rule)
        local xq, xr = gc_x(old, now_us)
        local used = 0
        if xq then
            used = gc_owed(old, xq, xr)
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
            if now_us < FAST_NOW then
                gc_consts(r)
                local q, rem = times_T(r, used)
                gc_store(r, q, rem, now_us)
            else
                gb_store(r, big_mul(big(rule.period * 1000), used), now_us)
            end
        end
        return r
    end

    ALGORITHMS[ALGO_GCRA] = {
        status = gc_status, decide = gc_decide, commit = gc_commit,
        refund = gc_refund, convert = gc_convert,
        info = function(r)
            return r.tat_hi * TWO32 + r.tat_lo
        end,
        flags_max = 0, rule_size = 14, state = '<I4I4I4',
        size = 26, parse = fixed_parse, bytes = fixed_bytes,
        clear = function(r)
            r.tat_lo, r.tat_hi, r.rem, r.Tq = 0, 0, 0, nil
        end,
        -- gcra_check() of gcra.c: 0 <= TAT < 2^54 us (the high half of a
        -- negative i64 is >= 2^31) and a remainder below the limit.
        load = function(r, lo, hi, rem)
            if hi >= 4194304 or rem >= r.limit then
                corrupt()
            end
            r.tat_lo, r.tat_hi, r.rem = lo, hi, rem
        end,
        fields = function(r)
            return r.tat_lo, r.tat_hi, r.rem
        end,
    }
end
