-- eval.lua - the entry point of build/lua/ratel.eval.lua, for EVAL and
-- EVALSHA (Redis 6, and servers that refuse FUNCTION):
--
--     EVALSHA sha 1 KEY ACQUIRE [COST n] [PEEK] [MAXWAIT ms] [AT unix_ms] rule...
--     EVALSHA sha 1 KEY REFUND [COST n] [AT unix_ms] rule...
--     EVALSHA sha 1 KEY RELEASE LEASE [RENEW] [AT unix_ms] rule...
--     EVALSHA sha 1 KEY RESET
--     EVALSHA sha 1 KEY INFO [AT unix_ms]
--     EVALSHA sha 1 KEY PEEK [COST n] [MAXWAIT ms] [AT unix_ms] rule...
--     EVALSHA sha 2 KEY DEMAND_KEY SLICE WANT TTL ms [HOLDER id] [AT unix_ms] rule...
--     EVALSHA sha 1 KEY UNSLICE UNSPENT UNTIL ms [AT unix_ms] rule...
--     EVALSHA sha N KEY... ACQUIRE_MANY COUNT word... (lua/many.lua)
--
-- The operation is case-insensitive; the words after it are those of
-- RATEL.<OP> after the key. PEEK and INFO write nothing: EVALSHA_RO runs
-- them on replicas. Redis runs this whole chunk on every call, so the
-- core is made anew each time (lua/library.lua makes it once).

local run = load_core()
if string.upper(ARGV[1] or '') == 'ACQUIRE_MANY' then
    return acquire_many(run, KEYS, ARGV, 2)
end
return run(ARGV[1] or '', KEYS, ARGV, 2)
