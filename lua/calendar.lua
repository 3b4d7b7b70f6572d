-- calendar.lua - where the windows of fixed and approx lie in time
-- (mirrors lib/core/calendar.c for fixed offsets).

--[[
A rule without a calendar has windows aligned to the Unix epoch in UTC
(lua/window.lua computes those). A rule with one (tz=+HH:MM, weeks,
months) has windows aligned to the wall clock of its offset: the local
times

  durations  k x P from 1970-01-01 00:00 local (1d: every midnight)
  weeks      k x P from Monday 1970-01-05 00:00 local
  months     the 1st at 00:00 of every n-th month from January 1970

and a window starts at its local start minus the offset. Zone names
(tz=Asia/Shanghai), whose offsets change, need the time-zone database,
which Redis does not give a script: lua/rule.lua refuses them with the
module's words and lua/state.lua takes a record naming a zone for
corrupt, as the module does. Dates are proleptic Gregorian, computed in
integers: every value is in ms below 2^53, so doubles hold them exactly.
]]

-- ratel_rule_t.calendar's bits (include/ratel.h), and the bit of the
-- stored calendar byte that names a zone (RATEL__CAL_ZONE).
local CAL_TZ, CAL_WEEKS, CAL_MONTHS, CAL_ZONE = 1, 2, 4, 128

-- window(r, t): ratel__window(), this file's one export. The rest are
-- calendar.c's static functions, kept in a block of their own: the whole
-- core is one Lua function (scripts/lua-build.sh), and Lua 5.1 allows a
-- function 200 locals.
local window

do
    local DAY_MS = 86400000
    -- 1970-01-05, the first Monday of the epoch, in days.
    local FIRST_MONDAY_DAYS = 4
    local CUMULATIVE_DAYS = { [0] = 0, 31, 59, 90, 120, 151, 181, 212, 243,
        273, 304, 334 }

    -- Floor division for any sign of a, positive b: idiv (lua/internal.lua),
    -- whose correction of the double quotient holds for a < 0 as well.
    local floor_div = idiv

    local function is_leap(y)
        return (y % 4 == 0 and y % 100 ~= 0) or y % 400 == 0
    end

    -- Days from 1970-01-01 to January 1st of year y.
    local function days_before_year(y)
        local before = y - 1 -- whole years since year 1
        -- 477 leap days lie in the years 1 .. 1969.
        return 365 * (y - 1970) + floor_div(before, 4) -
            floor_div(before, 100) + floor_div(before, 400) - 477
    end

    -- Days from 1970-01-01 to the 1st of month `mi` (year x 12 + month - 1).
    local function days_before_month(mi)
        local y = floor_div(mi, 12)
        local m = mi - y * 12
        return days_before_year(y) + CUMULATIVE_DAYS[m] +
            ((m >= 2 and is_leap(y)) and 1 or 0)
    end

    -- The month index (year x 12 + month - 1) holding day `days`.
    local function month_of_day(days)
        -- An estimate from the mean Gregorian year, then exact steps.
        local y = 1970 + floor_div(days * 400, 146097)
        while days_before_year(y) > days do
            y = y - 1
        end
        while days_before_year(y + 1) <= days do
            y = y + 1
        end
        local mi = y * 12 + 11
        while days_before_month(mi) > days do
            mi = mi - 1
        end
        return mi
    end

    -- local_window() of calendar.c: the local window [ls, le) holding local
    -- time `t` (a rule of months has months >= 1, every other rule 0).
    local function local_window(r, t)
        local n = r.months
        if n > 0 then
            local first = 1970 * 12
            local mi = month_of_day(floor_div(t, DAY_MS))
            local start = first + floor_div(mi - first, n) * n
            return days_before_month(start) * DAY_MS,
                days_before_month(start + n) * DAY_MS
        end
        local anchor = floor(r.calendar / CAL_WEEKS) % 2 == 1 and
            FIRST_MONDAY_DAYS * DAY_MS or 0
        local p = r.period
        local ls = anchor + floor_div(t - anchor, p) * p
        return ls, ls + p
    end

    -- ratel__window() for a rule with a calendar: the window [start, end)
    -- holding instant t (ms). The offset is fixed (tz_offset is 0 without
    -- tz=), so no local time repeats and t always lies before the end.
    function window(r, t)
        local offset = r.tz_offset * 1000
        local ls, le = local_window(r, t + offset)
        return ls - offset, le - offset
    end
end
