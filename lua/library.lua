-- library.lua - the entry points of build/lua/ratel.lib.lua, a Redis
-- Functions library (Redis 7, Valkey):
--
--     FCALL ratel_acquire 1 KEY [COST n] [PEEK] [MAXWAIT ms] [AT unix_ms] rule...
--     FCALL ratel_refund 1 KEY [COST n] [AT unix_ms] rule...
--     FCALL ratel_release 1 KEY LEASE [RENEW] [AT unix_ms] rule...
--     FCALL ratel_reset 1 KEY
--     FCALL_RO ratel_peek 1 KEY [COST n] [MAXWAIT ms] [AT unix_ms] rule...
--     FCALL_RO ratel_info 1 KEY [AT unix_ms]
--     FCALL_RO ratel_version 0
--     FCALL ratel_acquire_many N KEY... COUNT word... [COUNT word...]...
--
-- The words after the key are those of RATEL.<OP>. FUNCTION LOAD runs this
-- chunk once; each FCALL runs only the registered function, and the rules
-- parsed by earlier calls are kept (lua/rule.lua). ratel_peek and ratel_info
-- write nothing and are registered no-writes, so replicas serve them.

-- Redis runs the library's chunk with nothing but redis.register_function
-- at hand (no math, string or struct), so the core is made at the first
-- call, and kept.
local run

local function register(name, op, flags)
    redis.register_function({
        function_name = name,
        callback = function(keys, args)
            if not run then
                run = load_core()
            end
            return run(op, keys, args, 1)
        end,
        flags = flags,
    })
end
register('ratel_acquire', 'ACQUIRE', {})

-- ratel_acquire_many: N independent ratel_acquire calls in one FCALL
-- (one dispatch, one reply), for a client that sends a batch's requests
-- to one node. Item i's words (those after the key of ratel_acquire) are
-- COUNT followed by COUNT words; a COUNT of 0 repeats the words of the
-- item before. Each item runs exactly as its own call would, and its
-- reply, or its error, is element i of the answer: one bad item fails
-- only itself. A malformed list of words fails the whole call before any
-- item runs.
local function word_lists(keys, args)
    local starts, counts, at, argc = {}, {}, 1, #args
    for i = 1, #keys do
        local count = args[at]
        if not count or not count:find('^%d+$') or #count > 3 or
            (count == '0' and i == 1) or at + tonumber(count) > argc then
            return nil, 'ERR ratel: ratel_acquire_many: item ' .. i ..
                ' needs a word count (0 repeats the previous item\'s words)' ..
                ' and as many words'
        end
        starts[i], counts[i] = at + 1, tonumber(count)
        at = at + counts[i] + 1
    end
    if at <= argc then
        return nil, 'ERR ratel: ratel_acquire_many: more words than its ' ..
            #keys .. ' keys take'
    end
    return starts, counts
end

local function acquire_many(keys, args)
    local starts, counts = word_lists(keys, args)
    if not starts then
        return { err = counts }
    end
    local out, one, words = {}, {}, nil
    for i = 1, #keys do
        if counts[i] > 0 then
            words = {}
            for j = 1, counts[i] do
                words[j] = args[starts[i] + j - 1]
            end
        end
        one[1] = keys[i]
        out[i] = run('ACQUIRE', one, words, 1)
    end
    return out
end
redis.register_function({
    function_name = 'ratel_acquire_many',
    callback = function(keys, args)
        if not run then
            run = load_core()
        end
        return acquire_many(keys, args)
    end,
    flags = {},
})
register('ratel_refund', 'REFUND', {})
register('ratel_release', 'RELEASE', {})
register('ratel_reset', 'RESET', {})
register('ratel_peek', 'PEEK', { 'no-writes' })
register('ratel_info', 'INFO', { 'no-writes' })
redis.register_function({
    function_name = 'ratel_version',
    callback = function()
        return RATEL_LIBRARY_VERSION
    end,
    flags = { 'no-writes' },
})
