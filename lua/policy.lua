-- policy.lua - several rules decided together (mirrors lib/core/policy.c).

-- ratel_policy_has_leases(): whether a rule of an algorithm that holds
-- leases (ALGO_FACTS) is among the rules.
local function has_leases(policy)
    for i = 1, #policy do
        if ALGO_FACTS[policy[i].algo].leases then
            return true
        end
    end
    return false
end

-- ratel_policy_check_request(): whether a request of `cost` permits with
-- a max wait of `max_wait` ms could ever be admitted under `policy`: nil;
-- 'ECOST' and the rule whose capacity the cost is above; 'EINVAL' and the
-- first rule that cannot reserve, for a max wait. Costs and max waits out
-- of their ranges never get here: the reader refused them.
local function check_request(policy, cost, max_wait)
    -- Every rule admits one permit without a reservation.
    if cost == 1 and max_wait == 0 then
        return nil
    end
    for i = 1, #policy do
        local r = policy[i]
        if cost > rule_capacity(r) then
            return 'ECOST', i
        end
        if max_wait > 0 and not ALGO_FACTS[r.algo].reserves then
            return 'EINVAL', i
        end
    end
    return nil
end

-- convert() of policy.c: for each rule of the policy, the same rule's
-- record, else one of the same algorithm, period and calendar (counts
-- kept, the new limit applies; gcra converts), else an empty one.
local function convert(policy, old, now_us)
    local taken, recs = {}, {}
    for i = 1, #policy do
        local rule, from = policy[i], nil
        for j = 1, #old do
            if not taken[j] and rule_equal(old[j], rule) then
                from = j
                break
            end
        end
        if not from then
            for j = 1, #old do
                if not taken[j] and rule_same_period(old[j], rule) then
                    from = j
                    break
                end
            end
        end
        if not from then
            recs[i] = empty_record(rule)
        else
            taken[from] = true
            local conv = ALGORITHMS[rule.algo].convert
            if conv then
                recs[i] = conv(old[from], rule, now_us)
            else
                old[from].limit, old[from].rule = rule.limit, rule
                recs[i] = old[from]
            end
        end
    end
    return recs
end

-- decide_all(): every rule's verdict; with MAXWAIT, a denied request whose
-- latest conforming instant lies within it is admitted at that instant.
local function decide_all(recs, now_us, cost, max_wait_ms)
    local all, at = true, now_us
    for i = 1, #recs do
        local r = recs[i]
        ALGORITHMS[r.algo].decide(r, now_us, cost)
        all = all and r.ok
        -- An algorithm that reserves (ALGO_FACTS) says when it admits.
        if ALGO_FACTS[r.algo].reserves and r.allow_at > at then
            at = r.allow_at
        end
    end
    if not all and max_wait_ms > 0 and at - now_us <= max_wait_ms * 1000 then
        return true, at, at - now_us
    end
    return all, now_us, 0
end

-- report(): the seven integers. The binding rule denies longest, or when
-- admitted has the fewest permits left.
local function report(policy, recs, allowed, wait_us)
    local rule, retry_us, retry_ms, remaining, reset_ms = 0, 0, 0, math.huge, 0
    for i = 1, #recs do
        local r = recs[i]
        if not allowed and r.retry_us > retry_us then
            retry_us, retry_ms, rule = r.retry_us, r.retry_ms, i - 1
        end
        if r.remaining < remaining then
            remaining = r.remaining
            if allowed then
                rule = i - 1
            end
        end
        if r.reset_ms > reset_ms then
            reset_ms = r.reset_ms
        end
    end
    -- The policy's own table: Redis turns the reply into its protocol as
    -- the call returns, so one table serves every call (an eighth
    -- element, a lease, is the caller's to add).
    local d = policy.reply
    d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8] = allowed and 1 or 0,
        policy[rule + 1].limit, remaining, allowed and 0 or retry_ms,
        reset_ms, rule, wait_us > 0 and cdiv(wait_us, 1000) or 0, nil
    return d
end
