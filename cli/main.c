/*
 * main.c - the `ratel` command: dispatch to subcommands, global help and
 * version, and `ratel explain`.
 *
 * Every command parses its options with getopt_long(); whatever it rejects
 * is named in the message and ends the program with status 2, so scripts
 * can tell a typo from a failure.
 */
#include "cli.h"
#include "ratel_internal.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char rule_help[] =
    "Rules are LIMIT/PERIOD[:ALGO][,burst=N][,tz=ZONE]: LIMIT from 1 to\n"
    "1000000000, PERIOD a number and a unit (ms, s, m, h, d, w; a bare unit\n"
    "means 1 of it) from 1ms to 30d, or 1mo to 12mo (calendar months, fixed\n"
    "and approx only), ALGO one of sliding (the default), fixed, approx, gcra\n"
    "or concurrent (LIMIT leases held at once, each for PERIOD at most),\n"
    "burst for gcra only, tz (UTC, +08:00 or Asia/Shanghai: where days,\n"
    "weeks and months begin) for fixed and approx only. Examples: 10/1m,\n"
    "1/60s, 1000/1d:fixed,tz=+08:00, 1000/1mo:fixed, 100/1s:gcra,burst=200,\n"
    "50/30s:concurrent.\n";

static const char command_list[] =
    "explain, replay, acquire, refund, release, reset, inspect, ping, "
    "lua-load, help";

static void main_usage(FILE *out)
{
    fprintf(out,
            "usage: ratel [--help] [--version] COMMAND [ARGS]\n"
            "\n"
            "Try rate-limit rules, replay traffic traces through them and "
            "try them\n"
            "against a real store (Redis).\n"
            "\n"
            "Commands:\n"
            "  explain RULE...          print each rule's canonical form and "
            "what it means\n"
            "  replay --rule RULE...    run a trace of `t_ms key [cost "
            "[hold_ms]]` lines through a\n"
            "                           policy with simulated time; optional "
            "SVG chart\n"
            "  acquire --store URL --rule RULE... KEY\n"
            "                           take permits of KEY from a store and "
            "print the\n"
            "                           decision (exit 3 when denied)\n"
            "  refund --store URL --rule RULE... KEY\n"
            "                           give permits of KEY back\n"
            "  release --store URL --rule RULE... --lease ID KEY\n"
            "                           release (or --renew) a concurrent "
            "rule's lease\n"
            "  reset --store URL KEY    forget KEY: it starts from full\n"
            "  inspect --store URL KEY  print the state the store holds for "
            "KEY\n"
            "  ping --store URL         check that the store can decide now\n"
            "  lua-load --store URL     load the Functions library on every "
            "primary\n"
            "  help [COMMAND]           print this help, or a command's\n"
            "\n"
            "Options:\n"
            "  -h, --help               print this help and exit\n"
            "  -V, --version            print the version and exit\n"
            "\n"
            "%s"
            "\n"
            "Examples:\n"
            "  ratel explain 1/60s 10/1h 100/1s:gcra,burst=200\n"
            "  printf '0 a\\n0 a\\n1 a\\n999 a\\n1000 a\\n' | ratel replay "
            "--rule 2/1s\n"
            "  ratel replay --rule 20/1m --summary --svg chart.svg "
            "access.trace\n"
            "  ratel acquire --store redis://127.0.0.1:6379 --rule 1/60s "
            "--rule 10/1h \\\n"
            "        sms:+15550100\n"
            "\n"
            "URL is a Redis URL or `memory`; the environment variable "
            "RATEL_STORE is the\n"
            "default. Redis URLs:\n"
            "  redis://host:port[/db]                    one server\n"
            "  redis+cluster://host:port,host:port       Redis Cluster from "
            "its seed nodes\n"
            "  redis+sentinel://host:port,host:port/NAME the primary that "
            "Sentinels name\n"
            "  rediss://, rediss+cluster://, rediss+sentinel://  the same "
            "over TLS\n"
            "with ?OPTIONS (`ratel acquire --help`, docs/deployment.md).\n"
            "\n"
            "Exit status: 0 success, 1 I/O, store or internal failure, 2 bad "
            "usage or\n"
            "input; `ratel acquire` exits 3 when denied.\n"
            "`ratel COMMAND --help` describes a command; docs/cli.md has "
            "more.\n",
            rule_help);
}

static void explain_usage(FILE *out)
{
    fprintf(out,
            "usage: ratel explain [--help] [--lease SETTINGS] RULE...\n"
            "\n"
            "Parses each RULE and prints one line per rule: its canonical "
            "form, a colon\n"
            "and an English sentence saying what it admits. A malformed rule "
            "prints\n"
            "why to standard error; the other rules are still explained and "
            "the exit\n"
            "status is 2.\n"
            "\n"
            "Options:\n"
            "  -h, --help    print this help and exit\n"
            "  --lease SETTINGS\n"
            "                the rules as one policy leased with SETTINGS "
            "(ttl_ms=N,\n"
            "                max_slice=N,min_slice=N,hosts=N; "
            "docs/leases.md): print its\n"
            "                overshoot bound\n"
            "\n"
            "%s"
            "\n"
            "Example:\n"
            "  $ ratel explain 10/60m\n"
            "  10/1h: at most 10 requests in any 1-hour window\n",
            rule_help);
}

void cli_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;

    fputs(cmd ? "ratel " : "ratel", stderr);
    if (cmd)
        fputs(cmd, stderr);
    fputs(": ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_bad_option(const char *cmd, int opt, char *const argv[],
                   const struct option *longopts)
{
    /*
     * With opterr = 0 getopt_long() leaves the reporting to us. optopt is
     * the short option it choked on, the long option's value when a long
     * one was misused, or 0 for an unknown long option; the word it was
     * reading is argv[optind - 1] unless it stopped inside a cluster of
     * short options ("-sx").
     */
    const char *word = optind > 1 ? argv[optind - 1] : "";
    const struct option *found = NULL;
    size_t len = 0;
    int matches = 0;

    if (strncmp(word, "--", 2) == 0) {
        len = strcspn(word + 2, "=");
        for (const struct option *o = longopts; o->name; o++) {
            if (strncmp(o->name, word + 2, len) != 0)
                continue;
            if (strlen(o->name) == len) { /* exact beats a prefix */
                found = o;
                matches = 1;
                break;
            }
            found = o;
            matches++;
        }
    }
    if (found && (optopt == 0 || optopt == found->val)) {
        /* A long option, as the user typed it (without "=value"). */
        if (matches > 1)
            cli_error(cmd, "ambiguous option '%.*s'", (int)len + 2, word);
        else if (opt == ':')
            cli_error(cmd, "option '--%s' needs an argument", found->name);
        else
            cli_error(cmd, "option '--%s' takes no argument", found->name);
    } else if (len > 0 && optopt == 0) {
        cli_error(cmd, "unknown option '%.*s'", (int)len + 2, word);
    } else if (opt == ':') {
        cli_error(cmd, "option '-%c' needs an argument", optopt);
    } else if (optopt) {
        cli_error(cmd, "unknown option '-%c'", optopt);
    } else {
        cli_error(cmd, "unknown option '%s'", word);
    }
    fprintf(stderr, "Run 'ratel%s%s --help' for the options.\n", cmd ? " " : "",
            cmd ? cmd : "");
    return CLI_EXIT_USAGE;
}

void *cli_check_alloc(void *p)
{
    if (!p) {
        cli_error(NULL, "out of memory");
        exit(CLI_EXIT_FAIL);
    }
    return p;
}

/*
 * Explains each rule on the command line. A malformed rule gets the
 * core's message, which quotes the rule and says what is accepted.
 */
/*
 * --lease SETTINGS: "ttl_ms=250,max_slice=50,hosts=4" (the lease: fields
 * of rateld's and the nginx module's configuration, ratel__lease_options)
 * into *lease. 0, or -1 after saying what is wrong.
 */
static int read_lease(const char *text, ratel_lease_t *lease)
{
    char why[200];

    memset(lease, 0, sizeof *lease);
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, ","), name = strcspn(p, "=");
        const ratel__option_t *o =
            name < len ? ratel__option_find(ratel__lease_options,
                                            ratel__lease_noptions, p, name)
                       : NULL;
        if (!o) {
            ratel__option_names(ratel__lease_options, ratel__lease_noptions,
                                why, sizeof why);
            cli_error("explain",
                      "--lease: \"%.*s\" is not NAME=VALUE of a lease "
                      "setting (%s)",
                      (int)len, p, why);
            return -1;
        }
        if (ratel__option_set(o, p + name + 1, len - name - 1, lease, why,
                              sizeof why) != 0) {
            cli_error("explain", "--lease: %s: %s", o->name, why);
            return -1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The overshoot bound of the rules as one leased policy (--lease). */
static int explain_lease(char **rules, int n, const ratel_lease_t *lease)
{
    ratel_rule_t parsed[RATEL_MAX_RULES];
    ratel_policy_t policy;
    char err[512];

    if (n > RATEL_MAX_RULES) {
        cli_error("explain", "--lease: a policy has at most %d rules",
                  RATEL_MAX_RULES);
        return CLI_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++)
        if (ratel_rule_parse(rules[i], strlen(rules[i]), &parsed[i], NULL, 0))
            return CLI_EXIT_USAGE; /* said above */
    if (ratel_policy_init(&policy, parsed, (size_t)n, err, sizeof err) != 0 ||
        ratel_lease_bound(&policy, lease, NULL, err, sizeof err) != 0) {
        cli_error("explain", "--lease: %s", err);
        return CLI_EXIT_USAGE;
    }
    printf("lease: %s\n", err);
    return CLI_EXIT_OK;
}

static int cli_explain(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"lease", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0}};
    int opt, status = CLI_EXIT_OK, nopts = 1, leased = 0;
    ratel_lease_t lease;

    /*
     * A rule such as "-1/1s" looks like an option; it is bad, but as a
     * rule, and deserves the rule's message. So options end at the first
     * word that is not one (or --lease's value), "--", or a '-' followed
     * by a digit.
     */
    while (nopts < argc && argv[nopts][0] == '-' && argv[nopts][1] != '\0' &&
           strcmp(argv[nopts], "--") != 0 &&
           !(argv[nopts][1] >= '0' && argv[nopts][1] <= '9'))
        nopts +=
            strcmp(argv[nopts], "--lease") == 0 && nopts + 1 < argc ? 2 : 1;
    optind = 0;
    opterr = 0;
    while ((opt = getopt_long(nopts, argv, "+:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            explain_usage(stdout);
            return CLI_EXIT_OK;
        case 'l':
            if (read_lease(optarg, &lease) != 0)
                return CLI_EXIT_USAGE;
            leased = 1;
            break;
        default:
            return cli_bad_option("explain", opt, argv, longopts);
        }
    }
    if (optind < argc && strcmp(argv[optind], "--") == 0)
        optind++;
    if (optind >= argc) {
        cli_error("explain", "no rule given; try: ratel explain 10/1m");
        return CLI_EXIT_USAGE;
    }
    for (int i = optind; i < argc; i++) {
        ratel_rule_t rule;
        char err[512], canon[64], sentence[512];

        if (ratel_rule_parse(argv[i], strlen(argv[i]), &rule, err, sizeof err) <
            0) {
            cli_error("explain", "%s", err);
            status = CLI_EXIT_USAGE;
            continue;
        }
        ratel_rule_format(&rule, canon, sizeof canon);
        ratel_rule_explain(&rule, sentence, sizeof sentence);
        printf("%s: %s\n", canon, sentence);
    }
    if (leased && status == CLI_EXIT_OK)
        status = explain_lease(argv + optind, argc - optind, &lease);
    return status;
}

/* `ratel help [COMMAND]`: the same text as --help. */
static int cli_help(int argc, char **argv)
{
    if (argc < 2) {
        main_usage(stdout);
        return CLI_EXIT_OK;
    }
    if (argc > 2) {
        cli_error("help", "expected at most one command, got '%s' too",
                  argv[2]);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "explain") == 0)
        explain_usage(stdout);
    else if (strcmp(argv[1], "replay") == 0)
        cli_replay_usage(stdout);
    else if (strcmp(argv[1], "help") == 0)
        main_usage(stdout);
    else if (cli_store_usage(argv[1], stdout) < 0) {
        cli_error("help", "unknown command '%s' (commands: %s)", argv[1],
                  command_list);
        return CLI_EXIT_USAGE;
    }
    return CLI_EXIT_OK;
}

/*
 * Closes stdout and reports a write error (a full disk, a closed pipe
 * when SIGPIPE is ignored): a command whose output was lost must not
 * claim success.
 */
static int finish(int status)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        cli_error(NULL, "writing standard output: %s", strerror(errno));
        return CLI_EXIT_FAIL;
    }
    return status;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    int opt;
    const char *cmd;

    opterr = 0;
    /* '+': stop at the command, its options are its own. */
    while ((opt = getopt_long(argc, argv, "+:hV", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            main_usage(stdout);
            return finish(CLI_EXIT_OK);
        case 'V':
            printf("ratel %s\n", RATEL_VERSION);
            return finish(CLI_EXIT_OK);
        default:
            return cli_bad_option(NULL, opt, argv, longopts);
        }
    }
    if (optind >= argc) {
        main_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    cmd = argv[optind];
    argc -= optind;
    argv += optind;
    if (strcmp(cmd, "explain") == 0)
        return finish(cli_explain(argc, argv));
    if (strcmp(cmd, "replay") == 0)
        return finish(cli_replay(argc, argv));
    if (strcmp(cmd, "help") == 0)
        return finish(cli_help(argc, argv));
    if (cli_is_store_command(cmd))
        return finish(cli_store_command(argc, argv));
    cli_error(NULL, "unknown command '%s' (commands: %s)", cmd, command_list);
    fprintf(stderr, "Run 'ratel --help' for usage.\n");
    return CLI_EXIT_USAGE;
}
