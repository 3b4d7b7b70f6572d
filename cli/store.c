/*
 * store.c - `ratel acquire`, `refund`, `release`, `reset`, `inspect` and
 * `ping`: one
 * request against a real store, to try rules against Redis from a shell;
 * and `ratel lua-load`, which puts the Functions library on every
 * primary of a Redis URL.
 *
 * The store is a Redis URL, passed unchanged to ratel_store_redis_new()
 * (whose messages name what is wrong with it), or `memory`, an embedded
 * store that lives as long as the command. The time is the store's own:
 * Redis decides with its server's clock; `now_us` is read once, with
 * ratel_clock_now_us(), for what this process decides (the memory store,
 * a failure policy) and to read the state `inspect` fetched.
 *
 * Exit status: 0 success (acquire: allowed), 3 acquire denied, 1 the
 * store failed, 2 bad usage or input (an unknown option, a malformed rule
 * or URL, a cost the policy can never admit). When Redis cannot be reached
 * or does not answer, `acquire` is still decided, by the URL's failure
 * policy (open: allowed, closed: denied, local: a memory store), as a
 * service's store would decide it.
 */
#include "cli.h"
#include "ratel_internal.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The --store value that selects the embedded memory store. */
#define STORE_MEMORY "memory"
/* Bounds of the memory stores a command creates: one key is enough. */
#define STORE_MEMORY_BYTES ((size_t)1 << 20)
/* Longest keys the stores take (they refuse longer ones: RATEL_ERANGE). */
#define STORE_MEMORY_KEY_MAX ((int)RATEL_MEMORY_KEY_MAX)
#define STORE_REDIS_KEY_MAX ((int)RATEL_REDIS_KEY_MAX)

typedef enum store_cmd_e {
    CMD_ACQUIRE,
    CMD_REFUND,
    CMD_RELEASE,
    CMD_RESET,
    CMD_INSPECT,
    CMD_PING,
    CMD_LUA_LOAD
} store_cmd_t;

/* Options each command takes, besides --store and --help. */
#define TAKES_RULE 1u    /* --rule (required) */
#define TAKES_COST 2u    /* --cost */
#define TAKES_ACQUIRE 4u /* --peek, --max-wait */
#define TAKES_JSON 8u    /* --json */
#define TAKES_KEY 16u    /* one KEY operand (required) */
#define TAKES_LEASE 32u  /* --lease (required), --renew */

typedef struct store_command_s {
    const char *name;
    store_cmd_t cmd;
    unsigned takes;
    const char *synopsis; /* after "usage: ratel NAME " */
    const char *about;    /* what it does and prints */
    const char *example;
} store_command_t;

static const char store_help[] =
    "The store (--store URL, default $RATEL_STORE) is one of:\n"
    "  redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?OPTIONS]   one Redis "
    "server\n"
    "  redis+cluster://HOST:PORT[,HOST:PORT...][?OPTIONS]     Redis Cluster\n"
    "  redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/NAME"
    "[?OPTIONS]\n"
    "           the primary of NAME, as the Sentinels at the addresses say\n"
    "  rediss://..., rediss+cluster://..., rediss+sentinel://...  the same "
    "over TLS\n"
    "           (the certificate verified: tls_ca_file=FILE, else the "
    "system's CAs)\n"
    "  memory   an embedded store that lives only as long as this command: "
    "every\n"
    "           run starts from full, so it is only useful for trying a "
    "rule once\n"
    "OPTIONS are NAME=VALUE joined by '&': mode=auto|module|function|lua "
    "(auto: the\n"
    "ratel module where loaded, else the Functions library, else the EVAL "
    "script\n"
    "where FUNCTION LOAD is refused), on_failure=open|closed|local, "
    "timeout_ms,\n"
    "connect_timeout_ms, pool, deny_cache (docs/deployment.md). Redis "
    "decides with\n"
    "its own clock.\n";

static const char key_help[] =
    "KEY is one argument, any bytes (quote it for the shell); put `--` "
    "before a KEY\n"
    "that starts with '-'. A key holds the state of one policy: give each "
    "policy\n"
    "its own keys, e.g. prefixed with its name (sms:+15550100).\n";

static const char rule_help[] =
    "RULE is LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE] (`ratel help "
    "explain`), e.g.\n"
    "1/60s, 10/1h, 1000/1d:fixed,tz=+08:00, 1000/1mo:fixed, "
    "100/1s:gcra,burst=200,\n"
    "50/30s:concurrent. All --rule options make ONE\n"
    "policy: a request is admitted only if every rule admits it, and then "
    "it\n"
    "charges them all.\n";

static const char decision_help[] =
    "Output: one tab-separated line\n"
    "  allowed  remaining  retry_after_ms  reset_after_ms  rule  wait_ms  "
    "source\n"
    "allowed is 1 or 0; remaining what KEY may still spend now (the least "
    "over the\n"
    "rules); retry_after_ms 0 when allowed, else how long until the same "
    "request\n"
    "would be admitted; reset_after_ms until KEY is back to full; rule the "
    "index,\n"
    "from 0, of the rule that decided; wait_ms how long an admitted "
    "reservation\n"
    "must wait (--max-wait; nothing sleeps here); source who decided: "
    "store, or\n"
    "open, closed or local when Redis failed and the URL's on_failure "
    "policy\n"
    "decided (with a warning on standard error). A policy with a "
    "concurrent rule\n"
    "adds an eighth field, lease: the id `ratel release` takes, 0 when "
    "none was\n"
    "taken. --json prints one JSON object with these fields and the "
    "binding\n"
    "rule's limit.\n";

static const store_command_t commands[] = {
    {"acquire", CMD_ACQUIRE,
     TAKES_RULE | TAKES_COST | TAKES_ACQUIRE | TAKES_JSON | TAKES_KEY,
     "--store URL --rule RULE [--rule RULE ...] [--cost N]\n"
     "                     [--peek] [--max-wait MS] [--json] KEY",
     "Asks the store for COST permits of KEY, as a service using libratel "
     "would,\n"
     "and prints the decision. A denied request charges nothing.\n",
     "  $ ratel acquire --store redis://127.0.0.1:6379 --rule 1/60s --rule "
     "10/1h \\\n"
     "        sms:+15550100\n"
     "  1\t0\t0\t3600000\t0\t0\tstore\n"
     "  $ ratel acquire --store redis://127.0.0.1:6379 --rule 1/60s --rule "
     "10/1h \\\n"
     "        sms:+15550100 || echo \"denied: $?\"\n"
     "  0\t0\t59994\t3599994\t0\t0\tstore\n"
     "  denied: 3\n"},
    {"refund", CMD_REFUND, TAKES_RULE | TAKES_COST | TAKES_JSON | TAKES_KEY,
     "--store URL --rule RULE [--rule RULE ...] [--cost N]\n"
     "                    [--json] KEY",
     "Gives COST permits of KEY back to every rule of the policy (e.g. the "
     "SMS\n"
     "provider failed), never more than a rule has counted, and prints the "
     "key\n"
     "as a --peek would see it now.\n",
     "  $ ratel refund --store redis://127.0.0.1:6379 --rule 1/60s --rule "
     "10/1h \\\n"
     "        sms:+15550100\n"
     "  1\t1\t0\t0\t0\t0\tstore\n"},
    {"release", CMD_RELEASE, TAKES_RULE | TAKES_LEASE | TAKES_JSON | TAKES_KEY,
     "--store URL --rule RULE [--rule RULE ...] --lease ID\n"
     "                     [--renew] [--json] KEY",
     "Releases the lease ID that an acquire under the policy's concurrent "
     "rule\n"
     "took for KEY, or with --renew extends it to now + the rule's PERIOD. "
     "Prints\n"
     "one tab-separated line, held  remaining  reset_after_ms (--json: an "
     "object\n"
     "with held and renewed), and exits 3 when the lease was not held "
     "(unknown,\n"
     "released already, or expired).\n",
     "  $ ratel acquire --store redis://127.0.0.1:6379 --rule "
     "50/30s:concurrent \\\n"
     "        sms-provider\n"
     "  1\t49\t0\t30000\t0\t0\tstore\t1\n"
     "  $ ratel release --store redis://127.0.0.1:6379 --rule "
     "50/30s:concurrent \\\n"
     "        --lease 1 sms-provider\n"
     "  1\t50\t0\n"},
    {"reset", CMD_RESET, TAKES_KEY, "--store URL KEY",
     "Forgets KEY: its next request starts from full. Prints nothing.\n",
     "  $ ratel reset --store redis://127.0.0.1:6379 sms:+15550100\n"},
    {"inspect", CMD_INSPECT, TAKES_JSON | TAKES_KEY, "--store URL [--json] KEY",
     "Prints the state the store holds for KEY, one tab-separated line per "
     "rule:\n"
     "  rule  algo  used  remaining  reset_after_ms  DETAIL...\n"
     "used is what the rule counts now, reset_after_ms the time until its "
     "state is\n"
     "empty. DETAIL is NAME=VALUE: runs= and granularity_ms= for sliding "
     "(the\n"
     "(time, count) runs stored, and the rounding of new events), tat_us= "
     "for gcra\n"
     "(the theoretical arrival time, Unix microseconds), window_start_ms= "
     "for\n"
     "fixed and approx, last_lease= for concurrent. A key without state prints "
     "nothing. --json prints "
     "an array\n"
     "of objects. The state is read from the store and seen with this "
     "machine's\n"
     "clock.\n",
     "  $ ratel inspect --store redis://127.0.0.1:6379 sms:+15550100\n"
     "  1/1m\tsliding\t1\t0\t59982\truns=1\tgranularity_ms=1\n"
     "  10/1h\tsliding\t1\t9\t3599982\truns=1\tgranularity_ms=1\n"},
    {"ping", CMD_PING, 0, "--store URL",
     "Checks that the store can decide now: connects (every node of a "
     "cluster),\n"
     "checks the ratel module or loads the Functions library or the EVAL "
     "script,\n"
     "and prints \"ok\", or why not on standard error with exit status "
     "1.\n",
     "  $ ratel ping --store redis://127.0.0.1:6379\n"
     "  ok\n"},
    {"lua-load", CMD_LUA_LOAD, 0, "--store URL",
     "Loads this build's Functions library (FUNCTION LOAD REPLACE) on every "
     "primary\n"
     "of a Redis URL: the primary of redis:// (asked for its ROLE when the "
     "URL lists\n"
     "several addresses), every master of redis+cluster://. A primary that "
     "has it\n"
     "already is left alone; one with another version gets this one. "
     "Prints one\n"
     "tab-separated line per primary: address, version, and `loaded`, "
     "`replaced OLD`\n"
     "or `already loaded`. For servers where the store's own user may not "
     "run\n"
     "FUNCTION LOAD: run this as a user who may, then mode=auto or "
     "mode=function\n"
     "finds the library there (mode=auto would otherwise use the EVAL "
     "script).\n",
     "  $ ratel lua-load --store redis+cluster://127.0.0.1:7000\n"
     "  127.0.0.1:7000\t0.1.0+941025487\tloaded\n"
     "  127.0.0.1:7001\t0.1.0+941025487\treplaced 0.1.0+52230718\n"
     "  127.0.0.1:7002\t0.1.0+941025487\talready loaded\n"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const store_command_t *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

int cli_is_store_command(const char *name)
{
    return find_command(name) != NULL;
}

/* The range of each request option, from the one table of them
   (include/ratel.h), for --help. */
static const struct {
    uint64_t min, max;
} option_range[RATEL_OPTIONS] = {
#define OPTION_(NAME, name, kind, min, max, ops, value, note) {min, max},
    RATEL_OPTION_MAP(OPTION_)
#undef OPTION_
};
#define RANGE(opt) option_range[opt].min, option_range[opt].max

/* The operation of each command, whose request options it reads; AT sets
   the decision's clock, which is the store's, never a caller's. */
static const unsigned command_op[] = {
    [CMD_ACQUIRE] = RATEL_OP_ACQUIRE,
    [CMD_REFUND] = RATEL_OP_REFUND,
    [CMD_RELEASE] = RATEL_OP_RELEASE,
};
#define REFUSED (1u << RATEL_OPTION_AT)

/* Writes `ratel NAME --help` for one store command. */
static void usage(const store_command_t *c, FILE *out)
{
    fprintf(out, "usage: ratel %s %s\n\n%s\n", c->name, c->synopsis, c->about);
    if (c->cmd == CMD_ACQUIRE || c->cmd == CMD_REFUND)
        fprintf(out, "%s\n", decision_help);
    fputs("Options:\n"
          "  -s, --store URL      where the state lives: a Redis URL or "
          "`memory`;\n"
          "                       default: the environment variable "
          "RATEL_STORE\n",
          out);
    if (c->takes & TAKES_RULE)
        fputs("  -r, --rule RULE      add RULE to the policy (required; up "
              "to 8)\n",
              out);
    if (c->takes & TAKES_COST)
        fprintf(out,
                "  -c, --cost N         permits %s, %" PRIu64 " to %" PRIu64
                "; default 1\n",
                c->cmd == CMD_ACQUIRE ? "taken" : "given back",
                RANGE(RATEL_OPTION_COST));
    if (c->takes & TAKES_ACQUIRE)
        fprintf(out,
                "  -p, --peek           decide, but charge nothing\n"
                "  -w, --max-wait MS    reservation (every rule gcra): admit "
                "a request that\n"
                "                       fits within MS milliseconds, %" PRIu64
                " to %" PRIu64 "; it\n"
                "                       reports wait_ms, it does not sleep\n",
                RANGE(RATEL_OPTION_MAXWAIT));
    if (c->takes & TAKES_JSON)
        fprintf(out, "  -j, --json           print JSON instead\n");
    fputs("  -h, --help           print this help and exit\n\n", out);
    fputs(store_help, out);
    if (c->takes & TAKES_RULE)
        fprintf(out, "\n%s", rule_help);
    if (c->takes & TAKES_KEY)
        fprintf(out, "\n%s", key_help);
    if (c->cmd == CMD_ACQUIRE)
        fputs("\nExit status: 0 allowed, 3 denied (scripts can branch on "
              "it), 1 the store\n"
              "failed, 2 bad usage or input (a malformed rule or URL, a cost "
              "the policy can\n"
              "never admit). When Redis cannot be reached or does not answer, "
              "the URL's\n"
              "on_failure policy decides: closed denies (3), open and local "
              "allow (0).\n",
              out);
    else if (c->cmd == CMD_LUA_LOAD)
        fputs("\nExit status: 0 every primary has the library, 1 one could "
              "not be reached or\n"
              "refused it (the message says which and why), 2 bad usage or "
              "input (a\n"
              "malformed URL, `memory`).\n",
              out);
    else
        fprintf(out,
                "\nExit status: 0 %s, 1 the store %s, 2 bad usage or "
                "input (%s).\n",
                c->cmd == CMD_PING ? "ok" : "success",
                c->cmd == CMD_PING ? "cannot decide" : "failed",
                (c->takes & TAKES_RULE) ? "a malformed rule or URL"
                                        : "a malformed URL");
    fprintf(out, "\nExample:\n%s", c->example);
}

int cli_store_usage(const char *name, FILE *out)
{
    const store_command_t *c = find_command(name);

    if (!c)
        return -1;
    usage(c, out);
    return 0;
}

typedef struct store_options_s {
    const char *store;
    const char *rules[RATEL_MAX_RULES];
    size_t nrules;
    int json;
    const char *key;
    ratel_options_t request; /* --cost, --peek, --max-wait, --lease, --renew:
                                the request options, by their one reader */
} store_options_t;

/*
 * A request option (RATEL_OPTION_MAP) of getopt's table `lo` with its
 * argument (NULL for a flag), by the one reader of them. Returns 0, or an
 * exit status after its message.
 */
static int read_request_option(const store_command_t *c, store_options_t *o,
                               const struct option *lo, const char *arg)
{
    char err[300];

    if (ratel_options_read(&o->request, lo->name, strlen(lo->name), arg,
                           arg ? strlen(arg) : 0, err, sizeof err) == 0)
        return 0;
    cli_error(c->name, "%s", err);
    return CLI_EXIT_USAGE;
}

/*
 * After the options: the KEY operand, what is required (rules, a key, a
 * store, $RATEL_STORE standing in for --store). Returns 0, or an exit
 * status after saying what is missing.
 */
static int check_operands(const store_command_t *c, int argc, char **argv,
                          store_options_t *o)
{
    if ((c->takes & TAKES_KEY) && optind < argc)
        o->key = argv[optind++];
    if (optind < argc) {
        cli_error(c->name, "unexpected argument '%s'%s", argv[optind],
                  (c->takes & TAKES_KEY) ? ": give one KEY" : "");
        return CLI_EXIT_USAGE;
    }
    if ((c->takes & TAKES_RULE) && o->nrules == 0) {
        cli_error(c->name, "no rule given; add --rule RULE, e.g. --rule 10/1m");
        return CLI_EXIT_USAGE;
    }
    if ((c->takes & TAKES_LEASE) &&
        !(o->request.given & (1u << RATEL_OPTION_LEASE))) {
        cli_error(c->name, "no lease given; add --lease ID, the id an "
                           "acquire printed");
        return CLI_EXIT_USAGE;
    }
    if ((c->takes & TAKES_KEY) && !o->key) {
        cli_error(c->name,
                  "no key given; e.g. ratel %s --store URL%s "
                  "user:42",
                  c->name, (c->takes & TAKES_RULE) ? " --rule 10/1m" : "");
        return CLI_EXIT_USAGE;
    }
    if (!o->store) {
        const char *env = getenv("RATEL_STORE");
        if (!env || !*env) {
            cli_error(c->name, "no store: give --store URL or set "
                               "RATEL_STORE");
            return CLI_EXIT_USAGE;
        }
        o->store = env;
    }
    return 0;
}

/* Parses the options; returns 0, or an exit status after saying why. */
static int parse_options(const store_command_t *c, int argc, char **argv,
                         store_options_t *o, int *help)
{
    /* Every option, with what a command must take to accept it. */
    static const struct {
        struct option option;
        unsigned takes;
    } all[] = {{{"store", required_argument, NULL, 's'}, 0},
               {{"rule", required_argument, NULL, 'r'}, TAKES_RULE},
               {{"cost", required_argument, NULL, 'c'}, TAKES_COST},
               {{"peek", no_argument, NULL, 'p'}, TAKES_ACQUIRE},
               {{"max-wait", required_argument, NULL, 'w'}, TAKES_ACQUIRE},
               {{"json", no_argument, NULL, 'j'}, TAKES_JSON},
               {{"lease", required_argument, NULL, 'l'}, TAKES_LEASE},
               {{"renew", no_argument, NULL, 'n'}, TAKES_LEASE},
               {{"help", no_argument, NULL, 'h'}, 0}};
    struct option mine[sizeof all / sizeof all[0] + 1];
    char shortopts[32] = ":";
    size_t n = 0, ns = 1;
    int opt;

    /* Only the options this command takes: the others are unknown. */
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const struct option *lo = &all[i].option;
        if (all[i].takes && !(c->takes & all[i].takes))
            continue;
        mine[n++] = *lo;
        shortopts[ns++] = (char)lo->val;
        if (lo->has_arg == required_argument)
            shortopts[ns++] = ':';
    }
    mine[n] = (struct option){NULL, 0, NULL, 0};
    shortopts[ns] = '\0';

    memset(o, 0, sizeof *o);
    ratel_options_init(&o->request,
                       (size_t)c->cmd < sizeof command_op / sizeof command_op[0]
                           ? command_op[c->cmd]
                           : 0,
                       RATEL_SPELL_FLAG, REFUSED);
    *help = 0;
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, shortopts, mine, NULL)) != -1) {
        const struct option *lo = mine;
        while (lo->name && lo->val != opt)
            lo++;
        if (lo->name && ratel_option_find(RATEL_SPELL_FLAG, lo->name,
                                          strlen(lo->name), NULL) >= 0) {
            int status = read_request_option(c, o, lo, optarg);
            if (status != 0)
                return status;
            continue;
        }
        switch (opt) {
        case 's':
            o->store = optarg;
            break;
        case 'r':
            if (o->nrules == RATEL_MAX_RULES) {
                cli_error(c->name,
                          "too many rules: at most %d --rule options make "
                          "one policy",
                          RATEL_MAX_RULES);
                return CLI_EXIT_USAGE;
            }
            o->rules[o->nrules++] = optarg;
            break;
        case 'j':
            o->json = 1;
            break;
        case 'h':
            *help = 1;
            return 0;
        default:
            return cli_bad_option(c->name, opt, argv, mine);
        }
    }
    return check_operands(c, argc, argv, o);
}

/* Why the first contact failed, when the store was made without one
   (open_store): what the user needs to hear, not the 1 ms retry's. */
static char first_failure[512];

/*
 * Opens the store `url` names for command `c`. Returns 0, or an exit
 * status after saying why: 2 for a URL the store refuses (its message
 * quotes the part that is wrong), 1 when it cannot be reached or is not
 * what it should be.
 *
 * A Redis store connects first, so that a wrong address, password or mode
 * is reported. But a request that Redis cannot decide because it cannot be
 * reached or does not answer (RATEL_EIO) is the failure policy's to decide:
 * for `acquire` the store is then made without connecting (lazy_connect),
 * and its request meets the failure and the policy. `lua-load` finds
 * the primaries itself.
 */
static int open_store(const store_command_t *c, const char *url,
                      ratel_store_t **out)
{
    ratel_redis_options_t ro = {.url = url};
    char err[512];
    int rc;

    if (strcmp(url, STORE_MEMORY) == 0) {
        ratel_memory_options_t mo = {STORE_MEMORY_BYTES, 1};
        if (c->cmd == CMD_LUA_LOAD) {
            cli_error(c->name, "the memory store has no library to load; "
                               "give a Redis URL");
            return CLI_EXIT_USAGE;
        }
        rc = ratel_store_memory_new(out, &mo);
        if (rc < 0) {
            cli_error(c->name, "creating the memory store: %s",
                      ratel_strerror(rc));
            return CLI_EXIT_FAIL;
        }
        return 0;
    }
    /* The `local` failure policy's store: this command's one key. */
    ro.local.max_bytes = STORE_MEMORY_BYTES;
    ro.local.shards = 1;
    ro.lazy_connect = c->cmd == CMD_LUA_LOAD;
    if (ratel__redis_tls_insecure(&ro))
        cli_error(c->name, "warning: %s", RATEL__TLS_INSECURE_WARNING);
    rc = ratel_store_redis_new(out, &ro, err, sizeof err);
    if (rc == RATEL_EIO && c->cmd == CMD_ACQUIRE) {
        snprintf(first_failure, sizeof first_failure, "%s",
                 strncmp(err, "redis store: ", 13) == 0 ? err + 13 : err);
        /* The first contact spent the time Redis had: the request goes
           to the failure policy at once (1 ms), not after a second
           timeout_ms. */
        ro.lazy_connect = 1;
        ro.connect_timeout_ms = ro.command_timeout_ms = 1;
        rc = ratel_store_redis_new(out, &ro, err, sizeof err);
    }
    if (rc < 0) {
        cli_error(c->name, "%s", err[0] ? err : ratel_strerror(rc));
        if (rc == RATEL_EINVAL && strstr(url, "://") == NULL)
            fprintf(stderr, "The store is a Redis URL such as "
                            "redis://127.0.0.1:6379, or `memory`.\n");
        return rc == RATEL_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_FAIL;
    }
    return 0;
}

/* Why the store's last call failed, for messages ("" when unknown). */
static void store_reason(ratel_store_t *store, char *why, size_t len)
{
    if (first_failure[0])
        snprintf(why, len, "%s", first_failure);
    else
        ratel_store_errstr(store, why, len);
}

/*
 * Reports a store call that failed with `rc`; returns the exit status.
 * `url` is the --store value.
 */
static int store_failed(const char *cmd, ratel_store_t *store, int rc,
                        const char *url, const char *key)
{
    char why[512] = "";
    int memory = strcmp(url, STORE_MEMORY) == 0;

    switch (rc) {
    case RATEL_ERANGE:
        cli_error(cmd,
                  "a key of %zu bytes is longer than the %s store takes "
                  "(%d bytes)",
                  strlen(key), memory ? "memory" : "Redis",
                  memory ? STORE_MEMORY_KEY_MAX : STORE_REDIS_KEY_MAX);
        return CLI_EXIT_USAGE;
    case RATEL_ECOST:
    case RATEL_ETOOMANY:
    case RATEL_ERULE:
        cli_error(cmd, "%s (%s)", ratel_strerror(rc), ratel_err_name(rc));
        return CLI_EXIT_USAGE;
    case RATEL_ECORRUPT:
    case RATEL_EVERSION:
        cli_error(cmd,
                  "key \"%s\": %s (%s); is the key used by something "
                  "else than ratel?",
                  key, ratel_strerror(rc), ratel_err_name(rc));
        return CLI_EXIT_FAIL;
    case RATEL_EIO:
    case RATEL_EPROTO:
        store_reason(store, why, sizeof why);
        break;
    default:
        break;
    }
    cli_error(cmd, "%s (%s)%s%s", ratel_strerror(rc), ratel_err_name(rc),
              why[0] ? ": " : "", why);
    return CLI_EXIT_FAIL;
}

/* `leases`: the policy has a concurrent rule, so the lease is printed. */
static void print_decision(const ratel_decision_t *d, int json, int leases)
{
    if (json)
        printf("{\"allowed\":%s,\"limit\":%" PRId64 ",\"remaining\":%" PRId64
               ",\"retry_after_ms\":%" PRId64 ",\"reset_after_ms\":%" PRId64
               ",\"rule\":%d,\"wait_ms\":%" PRId64 ",\"source\":\"%s\"",
               d->allowed ? "true" : "false", d->limit, d->remaining,
               d->retry_after_ms, d->reset_after_ms, d->rule, d->wait_ms,
               ratel_source_name(d->source));
    else
        printf("%d\t%" PRId64 "\t%" PRId64 "\t%" PRId64 "\t%d\t%" PRId64 "\t%s",
               d->allowed ? 1 : 0, d->remaining, d->retry_after_ms,
               d->reset_after_ms, d->rule, d->wait_ms,
               ratel_source_name(d->source));
    if (leases)
        printf(json ? ",\"lease\":%" PRIu32 : "\t%" PRIu32, d->lease);
    fputs(json ? "}\n" : "\n", stdout);
}

/* `ratel release`; returns the exit status. */
static int run_release(const store_command_t *c, const store_options_t *o,
                       ratel_store_t *store, const ratel_policy_t *policy)
{
    ratel_decision_t d;
    int held = 0, rc;

    if (!ratel_policy_has_leases(policy)) {
        cli_error(c->name, "the policy has no concurrent rule, so it takes "
                           "no leases; add one, e.g. --rule 50/30s:concurrent");
        return CLI_EXIT_USAGE;
    }
    rc = ratel_store_release(
        store, o->key, strlen(o->key), policy, ratel_clock_now_us(),
        (uint32_t)o->request.value[RATEL_OPTION_LEASE],
        o->request.value[RATEL_OPTION_RENEW] ? RATEL_RENEW : 0, &held, &d);
    if (rc < 0)
        return store_failed(c->name, store, rc, o->store, o->key);
    if (o->json)
        printf("{\"held\":%s,\"renewed\":%s,\"remaining\":%" PRId64
               ",\"reset_after_ms\":%" PRId64 "}\n",
               held ? "true" : "false",
               held && o->request.value[RATEL_OPTION_RENEW] ? "true" : "false",
               d.remaining, d.reset_after_ms);
    else
        printf("%d\t%" PRId64 "\t%" PRId64 "\n", held, d.remaining,
               d.reset_after_ms);
    return held ? CLI_EXIT_OK : CLI_EXIT_DENIED;
}

/*
 * A decision the failure policy made, not the key's state: says so on
 * standard error (the decision itself is still printed and obeyed).
 */
static void warn_fallback(const char *cmd, ratel_store_t *store,
                          const ratel_decision_t *d)
{
    char why[512];

    if (d->source == RATEL_SOURCE_STORE || d->source == RATEL_SOURCE_CACHE)
        return;
    store_reason(store, why, sizeof why);
    cli_error(cmd,
              "warning: Redis did not decide (down, too slow or "
              "failing%s%s); the failure policy '%s' did",
              why[0] ? ": " : "", why, ratel_source_name(d->source));
}

/* `ratel acquire` and `ratel refund`; returns the exit status. */
static int run_decide(const store_command_t *c, const store_options_t *o,
                      ratel_store_t *store, const ratel_policy_t *policy)
{
    ratel_request_t request;
    ratel_decision_t d;
    int64_t now_us = ratel_clock_now_us();
    size_t keylen = strlen(o->key);
    int rc;

    ratel_options_request(&o->request, &request);
    if (c->cmd == CMD_ACQUIRE)
        rc = ratel_store_acquire(store, o->key, keylen, policy, now_us,
                                 &request, &d);
    else
        rc = ratel_store_refund(store, o->key, keylen, policy, now_us,
                                request.cost, &d);
    if (rc < 0)
        return store_failed(c->name, store, rc, o->store, o->key);
    warn_fallback(c->name, store, &d);
    print_decision(&d, o->json, ratel_policy_has_leases(policy));
    if (c->cmd == CMD_ACQUIRE && !d.allowed)
        return CLI_EXIT_DENIED;
    return CLI_EXIT_OK;
}

/* One primary's outcome of `ratel lua-load`; counts the failures. */
static void print_lua_load(void *ud, const ratel__library_report_t *r)
{
    int *failed = ud;

    if (r->rc == 0) {
        if (strcmp(r->found, r->loaded) == 0)
            printf("%s\t%s\talready loaded\n", r->node, r->loaded);
        else if (r->found[0])
            printf("%s\t%s\treplaced %s\n", r->node, r->loaded, r->found);
        else
            printf("%s\t%s\tloaded\n", r->node, r->loaded);
        return;
    }
    (*failed)++;
    cli_error("lua-load", "%s", r->error);
    if (r->refused)
        fputs("Run it as a user allowed FUNCTION LOAD (ACL +function), or "
              "load\n"
              "build/lua/ratel.lib.lua as docs/lua.md says; until then "
              "mode=auto uses\n"
              "the EVAL script there and mode=function fails.\n",
              stderr);
}

/* `ratel lua-load`; returns the exit status. */
static int run_lua_load(const store_command_t *c, ratel_store_t *store)
{
    char err[512] = "";
    int failed = 0, rc;

    rc = ratel__redis_load_library(store, print_lua_load, &failed, err,
                                   sizeof err);
    if (rc == 0)
        return CLI_EXIT_OK;
    if (failed == 0)
        cli_error(c->name, "%s", err[0] ? err : ratel_strerror(rc));
    return CLI_EXIT_FAIL;
}

/* What inspect prints after the common fields of one rule. */
static void print_detail(const ratel_rule_status_t *st, int json)
{
    const char *sep = json ? "," : "\t";
    const char *eq = json ? "\":" : "=";
    const char *q = json ? "\"" : "";
    unsigned fields = ratel_algo_fields(st->rule.algo);

#define DETAIL_(NAME, member, bit)                                             \
    if (fields & (bit))                                                        \
        printf("%s%s" #member "%s%" PRId64, sep, q, eq, (int64_t)st->member);
    RATEL_STATUS_FIELD_MAP(DETAIL_)
#undef DETAIL_
}

/* `ratel inspect`; returns the exit status. */
static int run_inspect(const store_command_t *c, const store_options_t *o,
                       ratel_store_t *store)
{
    ratel_rule_status_t st[RATEL_MAX_RULES];
    size_t n = 0;
    int rc;

    rc = ratel_store_inspect(store, o->key, strlen(o->key),
                             ratel_clock_now_us(), st, RATEL_MAX_RULES, &n);
    if (rc < 0)
        return store_failed(c->name, store, rc, o->store, o->key);
    if (n > RATEL_MAX_RULES)
        n = RATEL_MAX_RULES;
    if (o->json)
        putchar('[');
    for (size_t i = 0; i < n; i++) {
        char text[64];

        ratel_rule_format(&st[i].rule, text, sizeof text);
        if (o->json)
            printf("%s{\"rule\":\"%s\",\"algo\":\"%s\",\"limit\":%" PRIu32
                   ",\"period_ms\":%" PRIu32 ",\"burst\":%" PRIu32
                   ",\"used\":%" PRId64 ",\"remaining\":%" PRId64
                   ",\"reset_after_ms\":%" PRId64,
                   i ? "," : "", text, ratel_algo_name(st[i].rule.algo),
                   st[i].rule.limit, st[i].rule.period_ms, st[i].rule.burst,
                   st[i].used, st[i].remaining, st[i].reset_after_ms);
        else
            printf("%s\t%s\t%" PRId64 "\t%" PRId64 "\t%" PRId64, text,
                   ratel_algo_name(st[i].rule.algo), st[i].used,
                   st[i].remaining, st[i].reset_after_ms);
        print_detail(&st[i], o->json);
        fputs(o->json ? "}" : "\n", stdout);
    }
    if (o->json)
        puts("]");
    return CLI_EXIT_OK;
}

int cli_store_command(int argc, char **argv)
{
    const store_command_t *c = find_command(argv[0]);
    store_options_t o;
    ratel_policy_t policy;
    ratel_store_t *store = NULL;
    char err[512];
    int help, status;

    if (!c) {
        cli_error(NULL, "unknown store command '%s'", argv[0]);
        return CLI_EXIT_USAGE;
    }
    if ((status = parse_options(c, argc, argv, &o, &help)) != 0)
        return status;
    if (help) {
        usage(c, stdout);
        return CLI_EXIT_OK;
    }
    if (c->takes & TAKES_RULE) {
        if (ratel_policy_parse(&policy, o.rules, o.nrules, err, sizeof err) <
            0) {
            cli_error(c->name, "%s", err);
            return CLI_EXIT_USAGE;
        }
        /* What the store would refuse with a bare code, worded once by
           the core: a cost a rule can never admit, a --max-wait a rule
           cannot. */
        if (ratel_options_check(&o.request, &policy, err, sizeof err) != 0) {
            cli_error(c->name, "%s", err);
            return CLI_EXIT_USAGE;
        }
    }
    if ((status = open_store(c, o.store, &store)) != 0)
        return status;

    switch (c->cmd) {
    case CMD_ACQUIRE:
    case CMD_REFUND:
        status = run_decide(c, &o, store, &policy);
        break;
    case CMD_RELEASE:
        status = run_release(c, &o, store, &policy);
        break;
    case CMD_RESET:
        status = ratel_store_reset(store, o.key, strlen(o.key));
        if (status < 0)
            status = store_failed(c->name, store, status, o.store, o.key);
        break;
    case CMD_INSPECT:
        status = run_inspect(c, &o, store);
        break;
    case CMD_PING:
        status = ratel_store_ping(store, err, sizeof err);
        if (status < 0) {
            cli_error(c->name, "%s", err[0] ? err : ratel_strerror(status));
            status = CLI_EXIT_FAIL;
        } else {
            puts("ok");
        }
        break;
    case CMD_LUA_LOAD:
        status = run_lua_load(c, store);
        break;
    }
    ratel_store_free(store);
    return status;
}
