-- library.lua - the entry points of build/lua/ratel.lib.lua, a Redis
-- Functions library (Redis 7, Valkey):
--
--     FCALL ratel_acquire 1 KEY [COST n] [PEEK] [MAXWAIT ms] [AT unix_ms] rule...
--     FCALL ratel_refund 1 KEY [COST n] [AT unix_ms] rule...
--     FCALL ratel_release 1 KEY LEASE [RENEW] [AT unix_ms] rule...
--     FCALL ratel_reset 1 KEY
--     FCALL ratel_slice 2 KEY DEMAND_KEY WANT TTL ms [HOLDER id] [AT unix_ms] rule...
--     FCALL ratel_unslice 1 KEY UNSPENT UNTIL ms [AT unix_ms] rule...
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
-- ratel_acquire_many: lua/many.lua.
redis.register_function({
    function_name = 'ratel_acquire_many',
    callback = function(keys, args)
        if not run then
            run = load_core()
        end
        return acquire_many(run, keys, args, 1)
    end,
    flags = {},
})
register('ratel_refund', 'REFUND', {})
register('ratel_release', 'RELEASE', {})
register('ratel_reset', 'RESET', {})
register('ratel_slice', 'SLICE', {})
register('ratel_unslice', 'UNSLICE', {})
register('ratel_peek', 'PEEK', { 'no-writes' })
register('ratel_info', 'INFO', { 'no-writes' })
redis.register_function({
    function_name = 'ratel_version',
    callback = function()
        return RATEL_LIBRARY_VERSION
    end,
    flags = { 'no-writes' },
})
