-- zone_flood.lua - wrk's requests for test_nginx_zone.sh: keys of many
-- sizes into one small zone. Each thread numbers its requests n = 1, 2,
-- ...: an odd n asks a new key, an even one asks again the key of n - 999
-- (keys asked twice: a sliding rule's log grows), every 8th one of 8 hot
-- keys under three sliding rules (logs of up to 100 runs each). A key's
-- value is "THREAD-I-" and 0 to 699 x's, its location chosen by I: one
-- sliding rule, three sliding rules, gcra + fixed + approx, or both of the
-- first two as one group.
local thread_id = 0
local threads = 0
local counter = 0
local paths = { "/one", "/logs", "/mixed", "/group" }

function setup(thread)
    thread:set("thread_id", threads)
    threads = threads + 1
end

function request()
    counter = counter + 1
    local n = counter
    if n % 8 == 0 then
        return wrk.format(nil, "/logs?k=hot" .. thread_id .. "-" .. (n / 8) % 8)
    end
    local i = n
    if n % 2 == 0 then
        i = n - 9
    end
    if i < 1 then
        i = n + 1
    end
    local path = paths[((i - 1) / 2) % 4 + 1]
    local key = thread_id .. "-" .. i .. "-" .. string.rep("x", (i * 37) % 700)
    return wrk.format(nil, path .. "?k=" .. key)
end
