/*
 * options.c - the request options (RATEL_OPTION_MAP, include/ratel.h) read
 * from any front end's text: the RATEL.* commands' words (module/args.c),
 * rateld's query and JSON fields (rateld/params.c) and the ratel command's
 * flags (cli/store.c). One table gives each option its spellings, range
 * and operations; one parse of a value; and one message per error, which
 * names the option as its front end spells it. lua/commands.lua mirrors
 * it with the same messages.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *word;  /* COST: RATEL_SPELL_WORD */
    const char *field; /* max_wait: RATEL_SPELL_FIELD; "-" for "_": FLAG */
    size_t wordlen, fieldlen;
    int kind; /* RATEL_ARG_* */
    int64_t min, max;
    unsigned ops;      /* RATEL_OP_* */
    const char *value; /* its value in a list of options */
    const char *note;  /* after its range in a message */
} options[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note)                  \
    {#NAME, #name, sizeof #NAME - 1, sizeof #name - 1, kind, min, max, ops,    \
     value, note},
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};

/* The longest spelling of a name: "--" and a field. */
#define NAME_MAX_ 24

/* Option i as `spell` writes it: "COST", "max_wait", "--max-wait". */
static const char *spelled(int i, int spell, char *buf)
{
    size_t n = 0;

    if (spell == RATEL_SPELL_WORD)
        return options[i].word;
    if (spell == RATEL_SPELL_FIELD)
        return options[i].field;
    buf[n++] = '-';
    buf[n++] = '-';
    for (const char *c = options[i].field; *c && n + 1 < NAME_MAX_; c++)
        buf[n++] = *c == '_' ? '-' : *c;
    buf[n] = '\0';
    return buf;
}

/* Whether `name` (len bytes) is option i spelled `spell` (FLAG: no "--"). */
static int named(int i, int spell, const char *name, size_t len)
{
    const char *f = options[i].field;

    if (spell == RATEL_SPELL_WORD) {
        /* Any case: the words are upper-case ASCII letters. */
        if (len != options[i].wordlen)
            return 0;
        for (size_t k = 0; k < len; k++) {
            char c = name[k];
            if ((c >= 'a' && c <= 'z' ? (char)(c - 'a' + 'A') : c) !=
                options[i].word[k])
                return 0;
        }
        return 1;
    }
    if (len != options[i].fieldlen)
        return 0;
    for (size_t k = 0; k < len; k++)
        if (name[k] != (spell == RATEL_SPELL_FLAG && f[k] == '_' ? '-' : f[k]))
            return 0;
    return 1;
}

int ratel_option_find(int spell, const char *name, size_t len, int *kind)
{
    for (int i = 0; i < RATEL_OPTIONS; i++)
        if (options[i].kind != RATEL_ARG_FIRST || spell != RATEL_SPELL_WORD)
            if (named(i, spell, name, len)) {
                if (kind)
                    *kind = options[i].kind;
                return i;
            }
    return -1;
}

/* Each option's value until it is read: an option with a value its
   minimum (COST 1), the others 0. */
static const int64_t unread[RATEL_OPTIONS] = {
#define UNREAD_(NAME, name, kind, min, max, ops, value, note)                  \
    (kind) == RATEL_ARG_VALUE ? (min) : 0,
    RATEL_OPTION_MAP(UNREAD_)
#undef UNREAD_
};

/* The options an operation takes, and the one it takes first (-1 when
   none): expressions of the table, so a call computes no loop. */
#define TAKES_(NAME, name, kind, min, max, ops, value, note)                   \
    | (((ops)&op) ? 1u << RATEL_OPTION_##NAME : 0u)
#define FIRST_(NAME, name, kind, min, max, ops, value, note)                   \
    ((kind) == RATEL_ARG_FIRST && ((ops)&op)) ? RATEL_OPTION_##NAME:

void ratel_options_init(ratel_options_t *o, unsigned op, int spell,
                        unsigned refused)
{
    memcpy(o->value, unread, sizeof o->value);
    o->given = 0;
    o->takes = (0u RATEL_OPTION_MAP(TAKES_)) & ~refused;
    o->op = op;
    o->spell = spell;
    o->first = RATEL_OPTION_MAP(FIRST_) - 1;
    if (o->first >= 0 && !(o->takes & (1u << o->first)))
        o->first = -1;
}
#undef TAKES_
#undef FIRST_

int ratel_options_list(const ratel_options_t *o, char *buf, size_t len)
{
    char name[NAME_MAX_];
    int n = 0, m;

    if (len)
        buf[0] = '\0';
    for (int i = 0; i < RATEL_OPTIONS; i++) {
        /* The commands give their first option by place, not by word. */
        if (!(o->takes & (1u << i)) ||
            (o->spell == RATEL_SPELL_WORD && i == o->first))
            continue;
        m = snprintf(buf + ((size_t)n < len ? n : 0),
                     (size_t)n < len ? len - (size_t)n : 0, "%s%s%s%s",
                     n ? ", " : "", spelled(i, o->spell, name),
                     options[i].value[0] ? " " : "", options[i].value);
        n += m > 0 ? m : 0;
    }
    if (o->spell == RATEL_SPELL_WORD &&
        (o->op & (RATEL_OP_RULES | RATEL_OP_SLICES))) {
        m = snprintf(buf + ((size_t)n < len ? n : 0),
                     (size_t)n < len ? len - (size_t)n : 0, "%s",
                     n ? ", then the rules" : "the rules");
        n += m > 0 ? m : 0;
    }
    return n;
}

/* The argument quoted for a message: at most 40 bytes, printable only. */
static void quote(const char *arg, size_t len, char *buf, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; i < len && i < 40 && o + 5 < size; i++) {
        unsigned char c = (unsigned char)arg[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, size - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    if (len > 40 && o + 4 < size) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
}

/*
 * A name that is no option of the call, or one read before. The commands
 * say both at once, as they always have ("unknown or repeated option"),
 * with the options they take; the other front ends say which.
 */
static int not_an_option(const ratel_options_t *o, int i, const char *name,
                         size_t len, char *err, size_t errlen)
{
    char q[200], list[160];

    if (!err || !errlen)
        return RATEL_EINVAL;
    quote(name, len, q, sizeof q);
    ratel_options_list(o, list, sizeof list);
    if (o->spell == RATEL_SPELL_WORD)
        snprintf(err, errlen,
                 "unknown or repeated option \"%s\"; options are %s", q, list);
    else if (i >= 0 && (o->given & (1u << i)))
        snprintf(err, errlen, "%s%s is given twice; give it once",
                 o->spell == RATEL_SPELL_FLAG ? "--" : "", q);
    else
        snprintf(err, errlen, "%s%s is not an option here; options are %s",
                 o->spell == RATEL_SPELL_FLAG ? "--" : "", q, list);
    return RATEL_EINVAL;
}

/* A decimal integer of 1..18 digits in [min, max]: 1 and *out, or 0. */
static int parse_int(const char *s, size_t len, int64_t min, int64_t max,
                     int64_t *out)
{
    int64_t v = 0;

    if (!s || len == 0 || len > 18)
        return 0;
    for (size_t k = 0; k < len; k++) {
        if (s[k] < '0' || s[k] > '9')
            return 0;
        v = v * 10 + (s[k] - '0');
    }
    if (v < min || v > max)
        return 0;
    *out = v;
    return 1;
}

/* A flag's value: none (its word alone), true, false, 1, 0 or empty. */
static int parse_flag(const char *s, size_t len, int64_t *out)
{
    static const struct {
        const char *text;
        int64_t v;
    } words[] = {{"1", 1}, {"true", 1}, {"0", 0}, {"false", 0}, {"", 0}};

    if (!s) {
        *out = 1;
        return 1;
    }
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++)
        if (len == strlen(words[k].text) &&
            memcmp(s, words[k].text, len) == 0) {
            *out = words[k].v;
            return 1;
        }
    return 0;
}

/*
 * "COST must be an integer from 1 to 1000000000, not \"x\"": the range (a
 * flag's words) and the value given, quoted, when one was.
 */
static int bad_value(const ratel_options_t *o, int i, const char *value,
                     size_t len, char *err, size_t errlen)
{
    char name[NAME_MAX_], q[200] = "";
    int n;

    if (!err || !errlen)
        return RATEL_EINVAL;
    if (options[i].kind == RATEL_ARG_FLAG)
        n = snprintf(err, errlen, "%s must be true, false, 1 or 0",
                     spelled(i, o->spell, name));
    else
        n = snprintf(err, errlen, "%s must be an integer from %lld to %lld%s",
                     spelled(i, o->spell, name), (long long)options[i].min,
                     (long long)options[i].max, options[i].note);
    if (value && n > 0 && (size_t)n < errlen) {
        quote(value, len, q, sizeof q);
        snprintf(err + n, errlen - (size_t)n, ", not \"%s\"", q);
    }
    return RATEL_EINVAL;
}

int ratel_options_read(ratel_options_t *o, const char *name, size_t namelen,
                       const char *value, size_t len, char *err, size_t errlen)
{
    int i = name ? ratel_option_find(o->spell, name, namelen, NULL) : o->first;
    int64_t v;

    if (i < 0 || !(o->takes & (1u << i)) || (o->given & (1u << i)))
        return not_an_option(o, i, name ? name : "", name ? namelen : 0, err,
                             errlen);
    if (options[i].kind == RATEL_ARG_FLAG
            ? !parse_flag(value, len, &v)
            : !parse_int(value, len, options[i].min, options[i].max, &v))
        return bad_value(o, i, value, len, err, errlen);
    o->value[i] = v;
    o->given |= 1u << i;
    return 0;
}

void ratel_options_request(const ratel_options_t *o, ratel_request_t *request)
{
    *request = (ratel_request_t)RATEL_REQUEST_INIT;
    request->cost = (uint64_t)o->value[RATEL_OPTION_COST];
    request->max_wait_ms = o->value[RATEL_OPTION_MAXWAIT];
    request->flags = o->value[RATEL_OPTION_PEEK] ? RATEL_PEEK : 0;
}

/* "gcra" or "gcra or ...": the algorithms that reserve. */
static void reserving(char *buf, size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int a = 0; a < RATEL_ALGOS && n < size; a++)
        if (ratel__facts((ratel_algo_t)a) & RATEL_ALGO_RESERVES)
            n += (size_t)snprintf(buf + n, size - n, "%s%s", n ? " or " : "",
                                  ratel_algo_name((ratel_algo_t)a));
}

/*
 * The first option the call needs (RATEL_ARG_NEEDED) that was not read,
 * with its message ("TTL is needed: an integer from 1 to 3600000 (the
 * slice's lifetime in ms)"); 0 when none is missing.
 */
static int missing(const ratel_options_t *o, char *err, size_t errlen)
{
    char name[NAME_MAX_];

    for (int i = 0; i < RATEL_OPTIONS; i++)
        if (options[i].kind == RATEL_ARG_NEEDED && (o->takes & (1u << i)) &&
            !(o->given & (1u << i))) {
            if (err && errlen)
                snprintf(err, errlen,
                         "%s is needed: an integer from %lld to %lld%s",
                         spelled(i, o->spell, name), (long long)options[i].min,
                         (long long)options[i].max, options[i].note);
            return RATEL_EINVAL;
        }
    return 0;
}

/* A slice of a policy with a concurrent rule, refused with its reason. */
static int unsliceable(const ratel_options_t *o, const ratel_policy_t *policy,
                       char *err, size_t errlen)
{
    char text[64];

    if (!(o->op & RATEL_OP_SLICES) || !ratel_policy_has_leases(policy))
        return 0;
    for (uint32_t i = 0; i < policy->nrules; i++)
        if (ratel__facts(policy->rules[i].algo) & RATEL_ALGO_LEASES) {
            ratel_rule_format(&policy->rules[i], text, sizeof text);
            if (err && errlen)
                snprintf(err, errlen,
                         "a slice cannot be taken of rule %u (\"%s\"): a "
                         "%s rule's permits are leases a request holds and "
                         "gives back, not a rate to slice",
                         i + 1, text, ratel_algo_name(policy->rules[i].algo));
            break;
        }
    return RATEL_EINVAL;
}

int ratel_options_check(const ratel_options_t *o, const ratel_policy_t *policy,
                        char *err, size_t errlen)
{
    ratel_request_t req;
    size_t r = (size_t)-1; /* no rule: an error of the request alone */
    char name[NAME_MAX_], text[64], algos[96];
    int rc;

    if ((rc = missing(o, err, errlen)) != 0 ||
        (rc = unsliceable(o, policy, err, errlen)) != 0)
        return rc;
    if (!(o->op & RATEL_OP_ACQUIRE))
        return 0;
    ratel_options_request(o, &req);
    rc = ratel_policy_check_request(policy, &req, &r);
    if (rc == 0 || !err || !errlen)
        return rc;
    if (r >= policy->nrules) {
        snprintf(err, errlen, "%s", ratel_strerror(rc));
        return rc;
    }
    ratel_rule_format(&policy->rules[r], text, sizeof text);
    if (rc == RATEL_ECOST) {
        snprintf(err, errlen,
                 "%s %llu is more than rule %zu (\"%s\") can ever admit "
                 "(%llu)",
                 spelled(RATEL_OPTION_COST, o->spell, name),
                 (unsigned long long)req.cost, r + 1, text,
                 (unsigned long long)ratel_rule_capacity(&policy->rules[r]));
        return rc;
    }
    reserving(algos, sizeof algos);
    snprintf(err, errlen,
             "%s needs every rule to be %s; rule %zu (\"%s\") is %s",
             spelled(RATEL_OPTION_MAXWAIT, o->spell, name), algos, r + 1, text,
             ratel_algo_name(policy->rules[r].algo));
    return rc;
}
