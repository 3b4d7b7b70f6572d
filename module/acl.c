/*
 * acl.c - ACL categories for the RATEL.* commands on Redis 7.0.
 *
 * Redis 7.0 cannot put a module's command in an ACL category: its category
 * rules skip module commands, so `+@all -@write` would leave RATEL.ACQUIRE
 * and RATEL.RESET allowed. On such a server (module/commands.c decides) a
 * command filter reads every ACL SETUSER before Redis applies it and
 * follows each category rule that reaches a RATEL.* command with the same
 * rule for that command:
 *
 *     ACL SETUSER app +@all -@write
 *  -> ACL SETUSER app +@all -@write -ratel.acquire -ratel.refund
 *                     -ratel.release -ratel.reset
 *
 * The rules keep their order, so a later `+ratel.acquire` still grants
 * it, exactly as where the server knows the categories (7.2 and later).
 * Selectors, `(...)` (in one argument or spread over several), get the
 * same inside their parentheses. What Redis stores is the rewritten list:
 * ACL GETUSER, ACL LIST and ACL SAVE show the RATEL.* rules, and an
 * aclfile written by ACL SAVE keeps them after a restart.
 *
 * Not covered (docs/commands.md says so): rules Redis reads itself, with
 * no command to filter - `user` lines of redis.conf, an aclfile written by
 * hand, ACL LOAD. There the RATEL.* commands must be named.
 */
#include "commands.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* " -ratel.acquire -ratel.refund ...": at most every command, each named. */
#define EXPANSION_MAX 256

/* Whether the space-separated list `cats` holds the category `name`
   (`len` bytes; Redis compares category names without case). */
static int in_categories(const char *cats, const char *name, size_t len)
{
    while (*cats) {
        size_t n = strcspn(cats, " ");
        if (n == len && strncasecmp(cats, name, len) == 0)
            return 1;
        cats += n;
        cats += strspn(cats, " ");
    }
    return 0;
}

/*
 * The rules that must follow `rule` (`len` bytes, e.g. "-@write"), each
 * with a space before it (" -ratel.acquire -ratel.refund ..."), written
 * to out; their length, 0 when the rule is no category rule or reaches no
 * RATEL.* command (`+@all` and `-@all` reach them already).
 */
static size_t expansion(const char *rule, size_t len, char *out, size_t cap)
{
    size_t n = 0;

    /* Redis reads a category's name as a C string: "-@write\0x" is
       -@write to it, so it is to us. */
    len = strnlen(rule, len);
    if (len < 3 || (rule[0] != '+' && rule[0] != '-') || rule[1] != '@')
        return 0;
    for (size_t i = 0; i < ratel__commands_count(); i++) {
        int w;
        if (!in_categories(ratel__command_categories(i), rule + 2, len - 2))
            continue;
        w = snprintf(out + n, cap - n, " %c%s", rule[0],
                     ratel__command_name(i));
        if (w < 0 || (size_t)w >= cap - n)
            return 0; /* cannot happen: EXPANSION_MAX holds every name */
        n += (size_t)w;
    }
    return n;
}

/* Where the token starting at s[i] ends, as Redis's own splitting of a
   selector (sdssplitargs) sees it: quoted parts may hold spaces. */
static size_t token_end(const char *s, size_t len, size_t i)
{
    while (i < len && !isspace((unsigned char)s[i])) {
        char q = s[i];
        if (q == '"' || q == '\'') {
            for (i++; i < len && s[i] != q; i++)
                if (s[i] == '\\' && i + 1 < len)
                    i++;
        }
        if (i < len)
            i++;
    }
    return i;
}

/*
 * One argument of a selector, each category rule in it followed by its
 * expansion (before the selector's closing parenthesis); NULL when no rule
 * in it reaches a RATEL.* command. A rule quoted whole ("-@write") is read
 * as Redis reads it.
 */
static RedisModuleString *expand_selector_arg(const char *s, size_t len)
{
    RedisModuleString *out = NULL;
    char exp[EXPANSION_MAX];
    size_t i = 0, copied = 0, end = strnlen(s, len);

    /* Redis splits a selector as a C string: nothing after a NUL counts. */
    while (i < end) {
        size_t start, rs, re, n;
        while (i < end && isspace((unsigned char)s[i]))
            i++;
        start = i;
        i = token_end(s, end, i);
        rs = start;
        re = i;
        while (rs < re && s[rs] == '(')
            rs++;
        while (re > rs && s[re - 1] == ')')
            re--;
        n = re - rs >= 2 && s[rs] == '"' && s[re - 1] == '"' &&
                    !memchr(s + rs, '\\', re - rs)
                ? expansion(s + rs + 1, re - rs - 2, exp, sizeof exp)
                : expansion(s + rs, re - rs, exp, sizeof exp);
        if (n == 0)
            continue;
        if (!out)
            out = RedisModule_CreateString(NULL, "", 0);
        RedisModule_StringAppendBuffer(NULL, out, s + copied, re - copied);
        RedisModule_StringAppendBuffer(NULL, out, exp, n);
        copied = re;
    }
    if (out)
        RedisModule_StringAppendBuffer(NULL, out, s + copied, len - copied);
    return out;
}

/* A rule given as its own argument: its expansion as arguments after it,
   at pos + 1 onwards. Returns how many were inserted. */
static int expand_rule_arg(RedisModuleCommandFilterCtx *f, int pos,
                           const char *s, size_t len)
{
    char exp[EXPANSION_MAX];
    size_t n = expansion(s, len, exp, sizeof exp);
    int added = 0;

    for (size_t i = 0; i < n;) {
        size_t w;
        i++; /* the space before each rule */
        w = strcspn(exp + i, " ");
        RedisModule_CommandFilterArgInsert(
            f, pos + 1 + added, RedisModule_CreateString(NULL, exp + i, w));
        added++;
        i += w;
    }
    return added;
}

static int arg_is(RedisModuleCommandFilterCtx *f, int pos, const char *word)
{
    size_t len;
    const char *s =
        RedisModule_StringPtrLen(RedisModule_CommandFilterArgGet(f, pos), &len);
    return len == strlen(word) && strncasecmp(s, word, len) == 0;
}

/*
 * ACL SETUSER name rule...: the rules from argv[3] on. A selector opens
 * with an argument that starts with "(" and does not end with ")", and
 * closes with one that ends with ")" - the way Redis joins selectors
 * spread over arguments (ACLMergeSelectorArguments).
 */
static void acl_setuser_filter(RedisModuleCommandFilterCtx *f)
{
    int open = 0;

    /* Every command passes here: the common case leaves at once. */
    if (RedisModule_CommandFilterArgsCount(f) < 4 || !arg_is(f, 0, "acl") ||
        !arg_is(f, 1, "setuser"))
        return;
    for (int pos = 3; pos < RedisModule_CommandFilterArgsCount(f); pos++) {
        size_t len;
        const char *s = RedisModule_StringPtrLen(
            RedisModule_CommandFilterArgGet(f, pos), &len);
        int starts = len > 0 && s[0] == '(',
            ends = len > 0 && s[len - 1] == ')';

        if (len == 0)
            continue;
        if (open || starts) {
            RedisModuleString *rewritten = expand_selector_arg(s, len);
            /* Inside a selector until an argument ends with ")". */
            open = !ends;
            if (rewritten)
                RedisModule_CommandFilterArgReplace(f, pos, rewritten);
            continue;
        }
        pos += expand_rule_arg(f, pos, s, len);
    }
}

int ratel__acl_filter_init(RedisModuleCtx *ctx)
{
    return RedisModule_RegisterCommandFilter(ctx, acl_setuser_filter, 0)
               ? REDISMODULE_OK
               : REDISMODULE_ERR;
}
