-- concurrent.lua - at most LIMIT permits held at once, each lease expiring
-- after PERIOD unless released or renewed (mirrors lib/core/concurrent.c).
--
-- A record keeps its entries as the stored bytes (r.ents: n entries of
-- u32 expiry offset_ms from r.base, u32 lease id, in order of expiry,
-- docs/state-format.md) and r.last, the last lease id handed out. A write
-- reads them as one array {offset, id, offset, id, ...} (runs_array and
-- runs_bytes of lua/state.lua: the same pairs of u32) and rebases them
-- on now. Ids are below 2^32 and instants below 2^44 ms, so every value
-- here is an exact double; until_us (lua/window.lua) multiplies an instant
-- by 1000, which stays exact up to 2^54 for these even products.

-- The limit past which a record would not fit (limit_max of
-- ratel__algo_concurrent): rule.lua's checks read it from the facts.
ALGO_FACTS[ALGO_CONCURRENT].limit_max = CONCURRENT_MAX
ALGO_FACTS[ALGO_CONCURRENT].limit_words =
    'leases at once (its state keeps each one)'

-- The algorithm's loader (LOADERS, lua/state.lua).
LOADERS[ALGO_CONCURRENT] = function()
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
            local E, prev, period = { sunpack(run_format(n), ents) }, 0,
                r.period
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

    -- The entry i (0-based): its expiry offset and lease id.
    local function cc_entry(ents, i)
        return sunpack('<I4I4', ents, 8 * i + 1)
    end

    -- clamp_ms(): now in ms, clamped to the record's base (a clock gone back).
    local function cc_clamp_ms(r, now_us)
        local now_ms = idiv(now_us, 1000)
        return now_ms < r.base and r.base or now_ms
    end

    -- expired(): the entries at the head that have expired at now_ms.
    local function cc_expired(r, now_ms)
        local ents, n, base, i = r.ents, r.n, r.base, 0
        while i < n and base + (cc_entry(ents, i)) <= now_ms do
            i = i + 1
        end
        return i
    end

    -- status_at()
    local function cc_status(r, now_us)
        local n, limit = r.n, r.limit
        local held = n - cc_expired(r, cc_clamp_ms(r, now_us))
        r.used = held
        r.remaining = held < limit and limit - held or 0
        r.reset_ms = held > 0 and
            cdiv(until_us(r.base + (cc_entry(r.ents, n - 1)), now_us),
                1000) or 0
    end

    -- held_id(): whether `id` is held by a live entry (from `from` on).
    local function cc_held_id(r, from, id)
        local ents = r.ents
        for i = from, r.n - 1 do
            local _, e = cc_entry(ents, i)
            if e == id then
                return true
            end
        end
        return false
    end

    -- next_id(): after the last id, skipping 0 and live ids.
    local function cc_next_id(r, from)
        local id = r.last
        repeat
            id = id == TWO32 - 1 and 1 or id + 1
        until not cc_held_id(r, from, id)
        return id
    end

    -- concurrent_decide(). Denied, the request fits once the `need` leases
    -- that expire first have gone.
    local function cc_decide(r, now_us, cost)
        local drop = cc_expired(r, cc_clamp_ms(r, now_us))
        local need = r.n - drop + cost - r.limit
        r.v_drop = drop
        r.ok = need <= 0
        if r.ok then
            r.v_lease, r.retry_us, r.retry_ms = cc_next_id(r, drop), 0, 0
            return
        end
        r.v_lease = 0
        r.retry_us = until_us(r.base + (cc_entry(r.ents, drop + need - 1)),
            now_us)
        r.retry_ms = cdiv(r.retry_us, 1000)
    end

    -- rebase(): drops the first `drop` entries and rebases the others on
    -- now_ms. Returns them as an array, and their number.
    local function cc_rebase(r, drop, now_ms)
        local E, base, n = runs_array(r.ents, r.n), r.base, r.n - drop
        local out = {}
        for i = 1, 2 * n, 2 do
            out[i] = base + E[2 * drop + i] - now_ms
            out[i + 1] = E[2 * drop + i + 1]
        end
        r.base = now_ms
        return out, n
    end

    -- set_entries()
    local function cc_set(r, E, n)
        r.ents, r.n = runs_bytes(E, n), n
    end

    -- concurrent_commit(): the lease's `cost` entries expire last.
    local function cc_commit(r, now_us, cost)
        local E, n = cc_rebase(r, r.v_drop, cc_clamp_ms(r, now_us))
        local period, lease = r.period, r.v_lease
        for _ = 1, cost do
            E[2 * n + 1], E[2 * n + 2] = period, lease
            n = n + 1
        end
        r.last = lease
        cc_set(r, E, n)
        cc_status(r, now_us)
    end

    -- concurrent_refund(): gives back the newest permits first.
    local function cc_refund(r, now_us, cost)
        local now_ms = cc_clamp_ms(r, now_us)
        local E, n = cc_rebase(r, cc_expired(r, now_ms), now_ms)
        cc_set(r, E, cost < n and n - cost or 0)
    end

    -- ratel__concurrent_lease(): releases the lease `id` (1 .. 2^32 - 1), or
    -- with `renew` moves its entries to now + PERIOD. Returns whether it was
    -- held.
    local function cc_lease(r, now_us, id, renew)
        local now_ms = cc_clamp_ms(r, now_us)
        local E, n = cc_rebase(r, cc_expired(r, now_ms), now_ms)
        local K, kept, count = {}, 0, 0
        for i = 1, 2 * n, 2 do
            if E[i + 1] == id then
                count = count + 1
            else
                K[2 * kept + 1], K[2 * kept + 2] = E[i], E[i + 1]
                kept = kept + 1
            end
        end
        for _ = 1, renew and count or 0 do
            K[2 * kept + 1], K[2 * kept + 2] = r.period, id
            kept = kept + 1
        end
        cc_set(r, K, kept)
        return count > 0
    end

    ALGORITHMS[ALGO_CONCURRENT] = {
        flags_max = 0, parse = parse_concurrent,
        status = cc_status, decide = cc_decide, commit = cc_commit,
        refund = cc_refund, lease = cc_lease,
        info = function(r)
            return r.last
        end,
        clear = function(r)
            r.base, r.n, r.last, r.ents = 0, 0, 0, ''
        end,
        bytes = function(r)
            local lo, hi = pack_i64(r.base)
            return spack('<BBI4I4I4I4HI4', 4, 0, r.limit, r.period, lo, hi, r.n,
                r.last) .. r.ents
        end,
    }
end
