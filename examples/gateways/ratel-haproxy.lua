-- ratel-haproxy.lua: HAProxy (2.6 or later) asks rateld about every
-- request, as nginx's auth_request and Caddy's forward_auth do.
--
--   global
--       lua-load /usr/local/share/ratel/examples/gateways/ratel-haproxy.lua
--   defaults
--       mode http
--   frontend www
--       http-request lua.ratel_auth 127.0.0.1:8080 500 closed
--
-- Arguments: rateld's address, how long to wait for its answer in
-- milliseconds, and what to do when rateld does not answer in time or
-- cannot be reached: "closed" answers 503 (nothing passes unchecked),
-- "open" lets the request through. An allowed request goes on; any other
-- answer of rateld (429 with Retry-After and the RateLimit fields, 400
-- for a request without its key, 403 for one no route matches) is sent to
-- the client as rateld wrote it. docs/gateways.md has the whole set-up.
--
-- It talks to rateld on a socket of HAProxy's own (core.tcp), so it needs
-- no other Lua module, and the whole exchange is bounded by the given
-- time (HAProxy 2.6's core.httpclient retries a refused connection for
-- about 3 s whatever its timeout says). The original method, path and host travel as
-- X-Original-Method, X-Original-URI and X-Forwarded-Host, the client
-- address as X-Forwarded-For (put HAProxy's address in rateld's
-- trusted_proxies; set auth.gateway: haproxy), and the client's own
-- headers go along so that header: and cookie: key sources see them.

-- Headers never forwarded to rateld: those that describe the client's
-- connection to HAProxy, not the request, and every name a gateway uses
-- for the original request or the client's address. The latter are set
-- here and nowhere else, so a client's copy (in any spelling: names are
-- compared in lower case) never reaches rateld.
local skip = {
    ["connection"] = true, ["content-length"] = true, ["host"] = true,
    ["keep-alive"] = true, ["te"] = true, ["trailer"] = true,
    ["transfer-encoding"] = true, ["upgrade"] = true, ["expect"] = true,
    ["content-encoding"] = true, ["forwarded"] = true,
    ["x-forwarded-for"] = true, ["x-forwarded-host"] = true,
    ["x-original-uri"] = true, ["x-original-method"] = true,
    ["x-original-host"] = true, ["x-forwarded-uri"] = true,
    ["x-forwarded-method"] = true, ["x-ratel-response-status"] = true,
}

-- rateld's answer headers the client should see.
local pass = { "content-type", "retry-after", "ratelimit",
               "ratelimit-policy", "x-ratel-reason" }

local function request_headers(txn)
    local out = {}
    for name, values in pairs(txn.http:req_get_headers()) do
        if not skip[name:lower()] then
            local list = {}
            for i = 0, #values do
                if values[i] ~= nil then list[#list + 1] = values[i] end
            end
            out[name] = list
        end
    end
    out["X-Original-Method"] = { txn.sf:method() }
    out["X-Original-URI"] = { txn.sf:pathq() }
    out["X-Forwarded-Host"] = { txn.sf:req_fhdr("host") or "" }
    out["X-Forwarded-For"] = { txn.sf:src() }
    return out
end

local function unreachable(txn, mode)
    if mode == "open" then
        return
    end
    local reply = txn:reply({ status = 503, body = "rate limiter unavailable\n" })
    reply:add_header("retry-after", "1")
    reply:add_header("content-type", "text/plain")
    txn:done(reply)
end

-- The original request as rateld reads it: header lines (without the
-- request line) and the body, for json: key sources when HAProxy
-- buffered it (option http-buffer-request).
local function original(txn)
    local lines = {}
    for name, values in pairs(request_headers(txn)) do
        for _, v in ipairs(values) do
            lines[#lines + 1] = name .. ": " .. v:gsub("[\r\n]", " ")
        end
    end
    return { lines = lines, body = txn.sf:req_body() or "" }
end

-- One HTTP/1.1 exchange with rateld on a socket of HAProxy's own
-- (core.tcp), so that the whole exchange is bounded by `ms`: connect,
-- send `first` (the request line), the extra lines and the original
-- request, and read until rateld closes. Returns status, headers
-- (lower-case names), body; nil when rateld cannot be reached or is too
-- slow.
local function ask(addr, ms, first, extra, req)
    local host, port = addr:match("^(.*):(%d+)$")
    local s = core.tcp()
    s:settimeout(ms / 1000)
    if not host or not s:connect(host, tonumber(port)) then
        s:close()
        return nil
    end
    local lines = { first, "Host: " .. addr, "Connection: close" }
    for _, l in ipairs(extra) do lines[#lines + 1] = l end
    for _, l in ipairs(req.lines) do lines[#lines + 1] = l end
    lines[#lines + 1] = "Content-Length: " .. #req.body
    if not s:send(table.concat(lines, "\r\n") .. "\r\n\r\n" .. req.body) then
        s:close()
        return nil
    end
    local answer = s:receive("*a")
    s:close()
    if not answer then
        return nil
    end
    local head, body = answer:match("^(.-)\r\n\r\n(.*)$")
    local status = head and tonumber(head:match("^HTTP/1%.%d (%d%d%d)"))
    if not status then
        return nil
    end
    local headers = {}
    for name, value in head:gmatch("\r\n([^:\r\n]+):[ \t]*([^\r\n]*)") do
        headers[name:lower()] = value
    end
    return status, headers, body
end

core.register_action("ratel_auth", { "http-req" }, function(txn, addr, ms, mode)
    local req = original(txn)
    local status, headers, body = ask(addr, tonumber(ms) or 500,
                                      "GET /v1/auth HTTP/1.1", {}, req)
    if not status or status >= 500 then
        return unreachable(txn, mode)
    end
    if status >= 200 and status < 300 then
        -- A policy with max_wait reserved the request's turn: hold it
        -- until then (core.msleep yields: HAProxy goes on serving).
        local wait = tonumber(headers["x-ratel-wait-ms"] or "")
        if wait and wait > 0 then
            core.msleep(math.floor(wait))
        end
        -- A charge_on policy (docs/login.md): kept for ratel_report,
        -- which charges it if the answer's status is one of these.
        if headers["x-ratel-charge-on"] then
            req.charge_on = "," .. headers["x-ratel-charge-on"] .. ","
            txn:set_priv(req)
        end
        return
    end
    local reply = txn:reply({ status = status, body = body })
    for _, name in ipairs(pass) do
        if headers[name] then
            reply:add_header(name, headers[name])
        end
    end
    txn:done(reply)
end, 3)

-- http-response lua.ratel_report ADDR MS: when rateld said the request's
-- policies count only some answers (X-Ratel-Charge-On, e.g. failed
-- logins: 401,403) and this answer's status is one of them, tell rateld
-- (POST /v1/report with the original request and the status) before the
-- answer goes on, with rateld's api_token from the environment variable
-- RATEL_API_TOKEN when it is set (HAProxy's `setenv`, or the service's
-- environment: the secret stays out of haproxy.cfg). The answer waits
-- for rateld at most MS; a report rateld does not take is lost (the
-- failure is not counted), never the answer.
local token = os.getenv("RATEL_API_TOKEN")

core.register_action("ratel_report", { "http-res" }, function(txn, addr, ms)
    local req = txn:get_priv()
    local status = txn.sf:status()
    if type(req) ~= "table" or not req.charge_on or not status or
        not req.charge_on:find("," .. status .. ",", 1, true) then
        return
    end
    -- The token before the client's own Authorization, if any: rateld
    -- reads the first.
    local extra = { "X-Ratel-Response-Status: " .. status }
    if token and token ~= "" then
        table.insert(extra, 1, "Authorization: Bearer " .. token)
    end
    ask(addr, tonumber(ms) or 500, "POST /v1/report HTTP/1.1", extra, req)
end, 2)
