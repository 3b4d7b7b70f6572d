/*
 * program.c - the command line and the signal thread of rateld and
 * captchad (program.h).
 */
#include "app/program.h"

#include "app/log.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

int ratel__program_args(const ratel__program_t *p, int argc, char **argv,
                        const char **path)
{
    static const struct option longs[] = {
        {"config", required_argument, NULL, 'c'},
        {"check-config", required_argument, NULL, 't'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    int opt;

    *path = NULL;
    while ((opt = getopt_long(argc, argv, "c:t:Vh", longs, NULL)) != -1) {
        switch (opt) {
        case 'c':
            *path = optarg;
            break;
        case 't':
            return p->check(optarg);
        case 'V':
            printf("%s %s\n", p->name, p->version);
            return 0;
        case 'h':
            p->usage(stdout);
            return 0;
        default:
            p->usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        fprintf(stderr, "%s: unexpected argument \"%s\"\n", p->name,
                argv[optind]);
    else if (!*path)
        fprintf(stderr, "%s: --config FILE is required\n", p->name);
    else
        return -1;
    p->usage(stderr);
    return 2;
}

/* The signals the signal thread takes. */
static void signal_set(sigset_t *set)
{
    sigemptyset(set);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGINT);
}

void ratel__signals_block(void)
{
    sigset_t set;

    signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/*
 * A reload under systemd (Type=notify): RELOADING=1 with the monotonic
 * clock's microseconds, as sd_notify(3) asks, then READY=1 again whether
 * the new configuration was taken or refused (the old one still serves),
 * with a STATUS= line that says which.
 */
static void reload_notified(ratel__signals_t *s)
{
    struct timespec ts;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu",
               (unsigned long long)ts.tv_sec * 1000000ULL +
                   (unsigned long long)ts.tv_nsec / 1000);
    rc = s->reload(s->ud);
    sd_notifyf(0, "READY=1\nSTATUS=%s",
               rc == 0 ? "configuration reloaded"
                       : "reload refused, running "
                         "configuration kept "
                         "(see the log)");
}

static void *signal_thread(void *arg)
{
    ratel__signals_t *s = arg;
    sigset_t set;
    int sig = 0;

    signal_set(&set);
    for (;;) {
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig != SIGHUP)
            break;
        if (s->reload)
            reload_notified(s);
        else
            ratel__log("warn", "SIGHUP ignored",
                       "program=%s reason=\"it does not reload its "
                       "configuration; restart it\"",
                       s->name);
    }
    sd_notify(0, "STOPPING=1");
    ratel__log("info", "stopping", "signal=%s drain_ms=%u",
               sig == SIGTERM ? "TERM" : "INT", s->drain_ms);
    ratel_http_server_stop(s->http, s->drain_ms);
    return NULL;
}

int ratel__signals_start(ratel__signals_t *s)
{
    if (pthread_create(&s->tid, NULL, signal_thread, s) != 0)
        return -1;
    /* Listening, the store open, signals taken: ready (a no-op unless
       systemd started the program with NOTIFY_SOCKET). */
    sd_notifyf(0, "READY=1\nSTATUS=serving on port %d",
               ratel_http_server_port(s->http));
    return 0;
}

void ratel__signals_stop(ratel__signals_t *s)
{
    pthread_kill(s->tid, SIGTERM);
    pthread_join(s->tid, NULL);
}

void ratel__warn_deployment(const char *name, const char *path,
                            int holds_secret)
{
    struct stat st;

    if (holds_secret && stat(path, &st) == 0 && (st.st_mode & S_IROTH))
        ratel__log("warn", "the configuration holds a secret any user can read",
                   "program=%s path=%s mode=%04o fix=\"chmod o-r %s (a token "
                   "or a password in it is readable by every user of this "
                   "host)\"",
                   name, path, (unsigned)(st.st_mode & 07777), path);
    if (geteuid() == 0 && !getenv("INVOCATION_ID") && !getenv("NOTIFY_SOCKET"))
        ratel__log("warn", "running as root",
                   "program=%s fix=\"run it as an unprivileged user, or "
                   "under systemd with the shipped unit (DynamicUser=yes)\"",
                   name);
}
