-- many.lua - N independent ACQUIREs in one call (one dispatch, one
-- reply), for a client that sends a batch's requests to one node: the
-- library's ratel_acquire_many and the EVAL script's ACQUIRE_MANY.
--
--     FCALL ratel_acquire_many N KEY... COUNT word... [COUNT word...]...
--     EVALSHA sha N KEY... ACQUIRE_MANY COUNT word... [COUNT word...]...
--
-- Item i's words (those after the key of ACQUIRE) are COUNT followed by
-- COUNT words; a COUNT of 0 repeats the words of the item before. Each
-- item runs exactly as its own call would, and its reply, or its error,
-- is element i of the answer: one bad item fails only itself. A malformed
-- list of words fails the whole call before any item runs.

-- Where each item's words start in args, and how many there are; nil and
-- the error when the list does not match the keys.
local function word_lists(keys, args, first)
    local starts, counts, at, argc = {}, {}, first, #args
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

-- The items of args[first..] on keys, each by run() (commands.lua's).
local function acquire_many(run, keys, args, first)
    local starts, counts = word_lists(keys, args, first)
    if not starts then
        return { err = counts }
    end
    local out, one, words = {}, {}, nil
    -- One reading of the clock serves every item: they are decided in
    -- one script, which no other command interleaves, at one instant.
    local t = redis.call('TIME')
    local now_us = t[1] * 1000000 + t[2]
    for i = 1, #keys do
        if counts[i] > 0 then
            words = {}
            for j = 1, counts[i] do
                words[j] = args[starts[i] + j - 1]
            end
        end
        one[1] = keys[i]
        local reply = run('ACQUIRE', one, words, 1, now_us)
        -- run() answers a policy's calls with one table it refills
        -- (lua/commands.lua): the items of one policy each keep a copy.
        if not reply.err then
            local copy = {}
            for j = 1, #reply do
                copy[j] = reply[j]
            end
            reply = copy
        end
        out[i] = reply
    end
    return out
end
