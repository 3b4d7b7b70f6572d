-- error.lua - error replies (mirrors lib/core/error.c and the module's
-- texts).

-- An error reply is kept here and the call is left with error(): the
-- pcall around it (lua/commands.lua) returns the reply, and nothing is written once one is raised.
-- (Redis's pcall turns a raised table into a string, hence the upvalue.)
local failure

local function raise(reply)
    failure = reply
    error('ratel', 0)
end

local function fail(text)
    raise({ err = 'ERR ratel: ' .. text })
end

-- The error reply of the call, if one was raised, and no more after.
local function take_failure()
    local reply = failure
    failure = nil
    return reply
end

local function corrupt()
    fail('key holds a value that is not ratel state')
end

local function wrong_arity(op)
    raise({ err = "ERR wrong number of arguments for 'ratel." ..
        string.lower(op) .. "' command" })
end
