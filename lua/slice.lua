-- slice.lua - slices of a policy's permits for hosts that spend them
-- locally (mirrors lib/core/slice.c): policy_slice() charges the most
-- every rule admits now, up to the holder's fair share of what its
-- holders want, and says until when the slice may be spent;
-- policy_slice_return() gives back what was not spent while it lives;
-- demand_note() keeps the holders' recent wants in the record beside the
-- key (docs/state-format.md). lua/commands.lua reads and writes the keys.

-- fits(): whether `cost` permits are admitted by every rule now (a peek:
-- decide_all() charges nothing).
local function fits(recs, now_us, cost)
    return (decide_all(recs, now_us, cost, 0))
end

-- most_that_fits(): the most permits up to `want` that every rule admits
-- now, by a search over peeks (admission is monotone in the cost); 0 when
-- not even one does.
local function most_that_fits(recs, now_us, want)
    if fits(recs, now_us, want) then
        return want
    end
    if want == 1 then
        return 0
    end
    -- lo fits (0 trivially), hi does not.
    local lo, hi = 0, want
    while hi - lo > 1 do
        local mid = lo + idiv(hi - lo, 2)
        if fits(recs, now_us, mid) then
            lo = mid
        else
            hi = mid
        end
    end
    return lo
end

-- slice_end(): until when a slice charged at now_us may be spent: ttl,
-- and never past the current window of a fixed or approx rule (its
-- permits count in that window only).
local function slice_end(policy, now_us, ttl_us)
    local stop, now_ms = now_us + ttl_us, floor(now_us / 1000)
    for i = 1, #policy do
        local r = policy[i]
        if r.algo == ALGO_FIXED or r.algo == ALGO_APPROX then
            local we
            if r.calendar ~= 0 then
                local _
                _, we = window(r, now_ms)
            else
                we = now_ms - now_ms % r.period + r.period
            end
            if we * 1000 < stop then
                stop = we * 1000
            end
        end
    end
    return stop
end

-- The key as a peek of one permit sees it: the reply of a slice of 0,
-- and of a return after the slice's end.
local function peek_report(policy, recs, now_us)
    local allowed = decide_all(recs, now_us, 1, 0)
    for i = 1, #recs do
        ALGORITHMS[recs[i].algo].status(recs[i], now_us)
    end
    return report(policy, recs, allowed, 0)
end

-- ratel_slice_share(): `want` when avail >= total, else
-- max(1, floor(avail x want / total)), never above avail. The product
-- reaches 10^18, past the doubles' exact 2^53, so it is taken in two
-- halves of want (want = wh x 2^16 + wl), each below 2^50:
-- floor(avail x want / total) = qh x 2^16 + floor((rh x 2^16 + avail x
-- wl) / total), where avail x wh = qh x total + rh.
local function slice_share(want, total, avail)
    if avail >= total then
        return want
    end
    local wh = floor(want / 65536)
    local wl = want - wh * 65536
    local x = avail * wh
    local qh = idiv(x, total)
    local share = qh * 65536 + idiv((x - qh * total) * 65536 + avail * wl,
        total)
    if share < 1 then
        share = 1
    end
    return share < avail and share or avail
end

-- ratel_policy_slice_shared() on the key's records: the permits granted
-- (the records charged with them), the slice's end in us (0 when none)
-- and the reply's decision. `total` >= want is the holders' wants' sum.
local function policy_slice(policy, recs, now_us, want, total, ttl_us)
    local cap = LIMIT_MAX
    for i = 1, #policy do
        local c = rule_capacity(policy[i])
        cap = c < cap and c or cap
    end
    local avail = most_that_fits(recs, now_us, total < cap and total or cap)
    if avail == 0 then
        return 0, 0, peek_report(policy, recs, now_us)
    end
    -- Admission is monotone in the cost: the share, at most avail, fits.
    local granted = slice_share(want, total, avail)
    decide_all(recs, now_us, granted, 0)
    for i = 1, #recs do
        ALGORITHMS[recs[i].algo].commit(recs[i], now_us, granted, now_us)
    end
    return granted, slice_end(policy, now_us, ttl_us),
        report(policy, recs, true, 0)
end

-- ratel_policy_slice_return() on the key's records: whether the unspent
-- permits go back - the records refunded (the policy's refund, never past
-- a rule's capacity) - as they do while the slice lives; from its end on
-- they are spent or stranded, never counted twice.
local function policy_slice_return(recs, now_us, unspent, expires_us)
    if now_us >= expires_us then
        return false
    end
    for i = 1, #recs do
        ALGORITHMS[recs[i].algo].refund(recs[i], now_us, unspent)
    end
    return true
end

-- ------------------------------------------------------ demand records

-- demand_parse() of slice.c: the entries of a record's bytes (none for
-- no key), checked, as { holder, at_ms, want } each.
local function demand_parse(s)
    local out = {}
    if not s then
        return out
    end
    local len = #s
    if len < 4 or byte(s, 1) ~= 0x52 or byte(s, 2) ~= 0x44 then
        fail('demand key holds a value that is not a ratel demand record')
    end
    if byte(s, 3) ~= 1 then
        fail(byte(s, 3) > 1 and
            'demand key holds a demand record of an unknown version' or
            'demand key holds a value that is not a ratel demand record')
    end
    local n = byte(s, 4)
    if n < 1 or n > DEMAND_HOLDERS or len ~= 4 + n * 20 then
        fail('demand key holds a value that is not a ratel demand record')
    end
    for i = 1, n do
        local hlo, hhi, alo, ahi, want = sunpack('<I4I4I4I4I4', s,
            5 + (i - 1) * 20)
        local e = { hhi * TWO32 + hlo, ahi * TWO32 + alo, want }
        if e[1] < 1 or e[1] > HOLDER_MAX or e[2] > AT_MAX_MS or want < 1 or
            want > LIMIT_MAX then
            fail('demand key holds a value that is not a ratel demand record')
        end
        out[i] = e
    end
    return out
end

-- ratel_slice_demand_note(): the record `s` (false: none) with holder's
-- want noted at now_ms - the live entries of the others in their order,
-- then this one, the first dropped past DEMAND_HOLDERS - and the sum of
-- the wants it holds.
local function demand_note(s, now_ms, ttl_ms, holder, want)
    local e, kept = demand_parse(s), {}
    for i = 1, #e do
        if e[i][1] ~= holder and now_ms < e[i][2] + 2 * ttl_ms then
            kept[#kept + 1] = e[i]
        end
    end
    kept[#kept + 1] = { holder, now_ms, want }
    local first = #kept > DEMAND_HOLDERS and #kept - DEMAND_HOLDERS or 0
    local parts, total = { string.char(0x52, 0x44, 1, #kept - first) }, 0
    for i = first + 1, #kept do
        local hlo, hhi = pack_i64(kept[i][1])
        local alo, ahi = pack_i64(kept[i][2])
        parts[#parts + 1] = spack('<I4I4I4I4I4', hlo, hhi, alo, ahi,
            kept[i][3])
        total = total + kept[i][3]
    end
    return table.concat(parts), total
end
