/*
 * program.h - the `main` skeleton rateld and captchad share: the command
 * line (--config FILE, --check-config FILE, --version, --help) and the
 * signal thread (HUP reloads, TERM and INT drain the HTTP server).
 *
 * Each program keeps its own usage text, its check, what it starts and
 * what it frees; this is only what both would otherwise write out alike.
 */
#ifndef RATEL_APP_PROGRAM_H
#define RATEL_APP_PROGRAM_H

#include "http/http.h"

#include <pthread.h>
#include <stdio.h>

/* What a program's command line runs. */
typedef struct ratel__program_s {
    const char *name;               /* "rateld": messages, --version */
    const char *version;            /* RATEL_VERSION */
    void (*usage)(FILE *out);       /* --help (stdout), mistakes (stderr) */
    int (*check)(const char *path); /* --check-config FILE: exit status */
} ratel__program_t;

/*
 * Reads the command line: -c/--config FILE sets *path and returns -1 (the
 * program runs); -t/--check-config FILE returns p->check's status;
 * -V/--version and -h/--help print and return 0; anything else (an
 * unknown option, an extra argument, no --config) prints the usage to
 * stderr and returns 2.
 */
int ratel__program_args(const ratel__program_t *p, int argc, char **argv,
                        const char **path);

/*
 * Blocks SIGHUP, SIGTERM and SIGINT in the calling thread, and so in every
 * thread it starts afterwards (call it before the first one), so that only
 * the signal thread takes them; ignores SIGPIPE (a peer that hangs up is
 * an error on the write, not the end of the process).
 */
void ratel__signals_block(void);

/* The signal thread: sigwait() for HUP, TERM and INT. */
typedef struct ratel__signals_s {
    const char *name;          /* the program, for the log */
    ratel_http_server_t *http; /* TERM / INT: stopped, draining drain_ms */
    unsigned drain_ms;
    /* HUP: called on the signal thread, returns 0 when the new
       configuration was taken, -1 when it was refused (the old one kept);
       NULL: the signal is logged and ignored (no reload). */
    int (*reload)(void *ud);
    void *ud;
    pthread_t tid; /* set by ratel__signals_start */
} ratel__signals_t;

/*
 * Starts the signal thread on *s (which must outlive it); 0 or -1. Call it
 * once the program is listening: it then tells systemd READY=1 (Type=notify;
 * nothing without NOTIFY_SOCKET). The thread tells it RELOADING=1 and READY=1
 * around a reload, and STOPPING=1 on TERM or INT (sd_notify(3)).
 */
int ratel__signals_start(ratel__signals_t *s);

/*
 * Ends the signal thread and joins it, so that it is gone before the
 * program frees what it uses: after a TERM or INT it has ended already;
 * if the server stopped otherwise, it is woken with a TERM first (which
 * stops a server that is already stopped: a no-op).
 */
void ratel__signals_stop(ratel__signals_t *s);

/*
 * Warnings a program logs once at start about how it was deployed: the
 * configuration file `path` holds a secret (`holds_secret`: a token or a
 * password) and any user may read it (mode o+r), or the program runs as
 * root outside systemd (neither INVOCATION_ID nor NOTIFY_SOCKET set; under
 * systemd the unit says who runs it). Neither stops the program.
 */
void ratel__warn_deployment(const char *name, const char *path,
                            int holds_secret);

#endif /* RATEL_APP_PROGRAM_H */
