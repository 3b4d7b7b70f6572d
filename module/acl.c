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
 * hand, ACL LOAD - and users set up before the module was loaded. There
 * the RATEL.* commands must be named. So that this is seen, not guessed,
 * the module checks every user once the server runs (and after each ACL
 * LOAD): a user whose rules, categories counted, say otherwise than what
 * Redis lets it run gets a warning in the log naming it and the command.
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

/* A context to arm timers with from the filter, which has none; the
   check of every user (below). */
static RedisModuleCtx *timer_ctx;
static int check_pending; /* one check however many ACL LOADs precede it */
static void check_users(RedisModuleCtx *ctx, void *data);

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
    if (RedisModule_CommandFilterArgsCount(f) < 2 || !arg_is(f, 0, "acl"))
        return;
    /* The users ACL LOAD reads: checked once it has run. */
    if (arg_is(f, 1, "load")) {
        if (!check_pending)
            check_pending =
                RedisModule_CreateTimer(timer_ctx, 0, check_users, NULL) != 0;
        return;
    }
    if (!arg_is(f, 1, "setuser"))
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

/* ------------------------------------------ users the filter never saw */

/*
 * Whether a rule list as ACL GETUSER describes one ("+@all -@write
 * -ratel.reset ...") lets command i run when its categories count: the
 * last rule that names the command, one of its categories, or all
 * commands decides.
 */
static int rules_allow(const char *rules, size_t len, size_t i)
{
    const char *name = ratel__command_name(i);
    int allowed = 0;

    for (size_t p = 0, n; p < len; p = n) {
        const char *t;
        size_t tl;
        while (p < len && rules[p] == ' ')
            p++;
        for (n = p; n < len && rules[n] != ' ';)
            n++;
        t = rules + p;
        tl = n - p;
        if (tl == 11 && strncasecmp(t, "allcommands", tl) == 0)
            allowed = 1;
        else if (tl == 10 && strncasecmp(t, "nocommands", tl) == 0)
            allowed = 0;
        else if (tl < 2 || (t[0] != '+' && t[0] != '-'))
            continue;
        else if (t[1] == '@' &&
                 ((tl == 5 && strncasecmp(t + 2, "all", 3) == 0) ||
                  in_categories(ratel__command_categories(i), t + 2, tl - 2)))
            allowed = t[0] == '+';
        else if (tl - 1 == strlen(name) &&
                 strncasecmp(t + 1, name, tl - 1) == 0)
            allowed = t[0] == '+';
    }
    return allowed;
}

/* The value of `field` in a reply that is a flat field/value array. */
static RedisModuleCallReply *field_of(RedisModuleCallReply *map,
                                      const char *field)
{
    size_t n = RedisModule_CallReplyLength(map);

    for (size_t j = 0; j + 1 < n; j += 2) {
        size_t len;
        const char *k = RedisModule_CallReplyStringPtr(
            RedisModule_CallReplyArrayElement(map, j), &len);
        if (k && len == strlen(field) && memcmp(k, field, len) == 0)
            return RedisModule_CallReplyArrayElement(map, j + 1);
    }
    return NULL;
}

static int selector_allows(RedisModuleCallReply *sel, size_t i)
{
    RedisModuleCallReply *rules = field_of(sel, "commands");
    size_t len;
    const char *s = rules ? RedisModule_CallReplyStringPtr(rules, &len) : NULL;

    return s && rules_allow(s, len, i);
}

/* What ACL GETUSER's reply says of command i: its root rules or any of
   its selectors allow it. */
static int user_rules_allow(RedisModuleCallReply *user, size_t i)
{
    RedisModuleCallReply *sels = field_of(user, "selectors");
    size_t n = sels ? RedisModule_CallReplyLength(sels) : 0;

    if (selector_allows(user, i))
        return 1;
    for (size_t j = 0; j < n; j++)
        if (selector_allows(RedisModule_CallReplyArrayElement(sels, j), i))
            return 1;
    return 0;
}

/* Whether Redis lets the user run command i (its name alone: no key is
   checked). */
static int may_run(RedisModuleUser *user, size_t i)
{
    const char *name = ratel__command_name(i);
    RedisModuleString *argv[1] = {
        RedisModule_CreateString(NULL, name, strlen(name))};
    int ok =
        RedisModule_ACLCheckCommandPermissions(user, argv, 1) == REDISMODULE_OK;

    RedisModule_FreeString(NULL, argv[0]);
    return ok;
}

/* At most this many warnings per check (one or two lines per user). */
#define WARNINGS_MAX 20

/* The user's name as the log may show it: printable bytes, at most 64. */
static void shown_name(RedisModuleString *name, char out[65])
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(name, &len);

    len = len < 64 ? len : 64;
    for (size_t i = 0; i < len; i++)
        out[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    out[len] = 0;
}

/* Logs the commands of `list` (can: may run, !can: may not run). */
static void warn_user(RedisModuleCtx *ctx, const char *user, int can,
                      const char *list)
{
    RedisModule_Log(
        ctx, "warning",
        "ratel: user '%s' %s%s, which its rules' categories %s: this server "
        "applies to module commands no category rule it read itself "
        "(redis.conf user lines, an aclfile, ACL LOAD) or got before the "
        "module was loaded; name the commands in the user's rules, or set "
        "them with ACL SETUSER (docs/commands.md, ACL)",
        user, can ? "may run" : "may not run", list, can ? "refuse" : "allow");
}

static void check_user(RedisModuleCtx *ctx, RedisModuleString *name,
                       int *warned)
{
    RedisModuleUser *user = RedisModule_GetModuleUserFromUserName(name);
    RedisModuleCallReply *info =
        RedisModule_Call(ctx, "ACL", "cs", "GETUSER", name);
    char lists[2][EXPANSION_MAX] = {"", ""}, shown[65];

    if (user && info &&
        RedisModule_CallReplyType(info) == REDISMODULE_REPLY_ARRAY) {
        for (size_t i = 0; i < ratel__commands_count(); i++) {
            int can = may_run(user, i);
            char *list = lists[can];
            size_t used = strlen(list);
            if (can != user_rules_allow(info, i))
                snprintf(list + used, EXPANSION_MAX - used, " %s",
                         ratel__command_name(i));
        }
        shown_name(name, shown);
        for (int can = 0; can < 2; can++)
            if (lists[can][0] && (*warned)++ < WARNINGS_MAX)
                warn_user(ctx, shown, can, lists[can]);
    }
    if (info)
        RedisModule_FreeCallReply(info);
    if (user)
        RedisModule_FreeModuleUser(user);
}

/* Every user, once the server runs and after each ACL LOAD. */
static void check_users(RedisModuleCtx *ctx, void *data)
{
    RedisModuleCallReply *users = RedisModule_Call(ctx, "ACL", "c", "USERS");
    int warned = 0;

    (void)data;
    check_pending = 0;
    if (!users || RedisModule_CallReplyType(users) != REDISMODULE_REPLY_ARRAY) {
        if (users)
            RedisModule_FreeCallReply(users);
        return;
    }
    for (size_t j = 0; j < RedisModule_CallReplyLength(users); j++) {
        RedisModuleString *name = RedisModule_CreateStringFromCallReply(
            RedisModule_CallReplyArrayElement(users, j));
        check_user(ctx, name, &warned);
        RedisModule_FreeString(ctx, name);
    }
    if (warned > WARNINGS_MAX)
        RedisModule_Log(ctx, "warning",
                        "ratel: %d more such warnings not shown",
                        warned - WARNINGS_MAX);
    RedisModule_FreeCallReply(users);
}

int ratel__acl_filter_init(RedisModuleCtx *ctx)
{
    timer_ctx = RedisModule_GetDetachedThreadSafeContext(ctx);
    /* A timer of 0 ms fires once the event loop runs: after Redis has read
       redis.conf's users and the aclfile, which it does after loading the
       modules. */
    if (!timer_ctx || !RedisModule_CreateTimer(ctx, 0, check_users, NULL))
        return REDISMODULE_ERR;
    check_pending = 1;
    return RedisModule_RegisterCommandFilter(ctx, acl_setuser_filter, 0)
               ? REDISMODULE_OK
               : REDISMODULE_ERR;
}
