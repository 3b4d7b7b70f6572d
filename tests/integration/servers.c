/*
 * servers.c - real redis-server processes and fake servers for C
 * integration tests (servers.h says what each function promises).
 *
 * The library keeps one table entry per server started and not freed,
 * keyed by its port: the entry owns the argv strings and keeps the port
 * reserved while the server is down, so it can come back on it. The pids
 * are in a separate array of plain integers, the only thing the fatal
 * signal handler reads. Everything is per process: a forked child of the
 * test that uses the library starts afresh and never touches its parent's
 * servers.
 */
#include "servers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SERVERS 128
#define MAX_ARGS 64
#define MAX_WRAP 16
#define START_ATTEMPTS 5
#define START_TIMEOUT_MS 10000
#define WRAPPED_START_TIMEOUT_MS 60000
#define STOP_TIMEOUT_MS 5000
#define CMD_TIMEOUT_MS 5000
#define CLUSTER_CREATE_TIMEOUT_MS 30000
#define CLUSTER_OK_TIMEOUT_MS 20000
#define POLL_INTERVAL_MS 10
#define LOG_TAIL_LINES 20
/* Below the kernel's ephemeral range (32768..60999) with the bus port
   (+10000) too, so no client connection's local port can take them. */
#define PORT_LOW 10000
#define PORT_SPAN 12000
#define BUS_OFFSET 10000

#define MAX_FAKES 16
#define MAX_FAKE_CLIENTS 128
#define FAKE_ANSWER_AFTER_MS 100

/* ------------------------------------------------------------- state */

static struct {
    int port; /* 0: a free entry */
    char *argv[MAX_ARGS];
} servers[MAX_SERVERS];

/* pids[i] is the running process of servers[i] (0: none); the extra last
 * entry holds a helper such as redis-cli --cluster create while it runs. */
#define HELPER_SLOT MAX_SERVERS
static volatile pid_t pids[MAX_SERVERS + 1];

static char root[448];   /* "" until the first start */
static pid_t owner;      /* the process the state belongs to */
static int atexit_added; /* atexit() survives fork: register once */
static uint64_t rng_state;

enum fake_kind { FAKE_NOT_REDIS, FAKE_SILENT };

static struct fake {
    int port; /* 0: a free entry */
    enum fake_kind kind;
    int listen_fd;
    int wake[2]; /* a byte on wake[1] stops the thread */
    pthread_t thread;
} fakes[MAX_FAKES];

static const char not_redis_answer[] = "HTTP/1.1 400 Bad Request\r\n"
                                       "Content-Length: 0\r\n"
                                       "Connection: close\r\n\r\n";

/* ---------------------------------------------------------- utilities */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polling pause between two looks at a process or a port. */
static void pause_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static uint64_t random_next(void)
{
    if (rng_state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        rng_state = (((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^
                     (uint64_t)ts.tv_sec) |
                    1;
    }
    /* xorshift64*: ports only need to differ between runs and processes. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/*
 * Reads the last size - 1 bytes (or fewer) of a file into buf as a string.
 * Returns the number of bytes read; 0 when the file is missing or empty.
 */
static size_t read_tail(const char *path, char *buf, size_t size)
{
    size_t got = 0;
    FILE *f = fopen(path, "rb");
    buf[0] = '\0';
    if (f == NULL)
        return 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long end = ftell(f);
        long from = end - (long)(size - 1);
        if (fseek(f, from > 0 ? from : 0, SEEK_SET) == 0)
            got = fread(buf, 1, size - 1, f);
    }
    buf[got] = '\0';
    fclose(f);
    return got;
}

static int file_contains(const char *path, const char *needle)
{
    char buf[8192];
    read_tail(path, buf, sizeof(buf));
    return strstr(buf, needle) != NULL;
}

/* Prints the last LOG_TAIL_LINES lines of a file, indented, if any. */
static void print_tail(const char *path)
{
    char buf[4096];
    const char *start;
    size_t len = read_tail(path, buf, sizeof(buf));
    int lines = 0;
    if (len == 0)
        return;
    while (len > 0 && buf[len - 1] == '\n')
        buf[--len] = '\0';
    start = buf + len;
    while (start > buf) {
        if (start[-1] == '\n' && ++lines == LOG_TAIL_LINES)
            break;
        start--;
    }
    fprintf(stderr, "  %s ends:\n", path);
    while (*start != '\0') {
        const char *nl = strchr(start, '\n');
        int n = nl != NULL ? (int)(nl - start) : (int)strlen(start);
        fprintf(stderr, "  | %.*s\n", n, start);
        start += n + (nl != NULL);
    }
}

/* The server's own files, for error messages: log, stderr, stdout. */
static void print_server_files(const test_redis_t *r)
{
    static const char *const names[] = {"log", "stderr", "stdout"};
    char path[600];
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", r->dir, names[i]);
        print_tail(path);
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0; /* go on: remove as much as possible */
}

/* -------------------------------------------- the process-wide hooks */

static void slot_release(int slot);

/* Kills every recorded process, then lets the signal do what it would
 * have done. Only kill(), getpid(), signal() and raise(): all
 * async-signal-safe. */
static void on_fatal_signal(int sig)
{
    int i;
    if (getpid() == owner) {
        for (i = 0; i <= MAX_SERVERS; i++) {
            if (pids[i] > 0)
                kill(pids[i], SIGKILL);
        }
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* A signal whose disposition the test (or a sanitizer) already set is left
 * alone: PR_SET_PDEATHSIG still kills the servers when the test dies. */
static void install_signal_handlers(void)
{
    static const int signals[] = {SIGINT, SIGTERM, SIGABRT, SIGSEGV};
    struct sigaction sa, old;
    size_t i;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    for (i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        if (sigaction(signals[i], NULL, &old) == 0 &&
            !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL)
            sigaction(signals[i], &sa, NULL);
    }
}

/*
 * Makes the state this process' own. In a child forked by the test after
 * servers were started, the inherited tables describe the parent's
 * servers and fake servers: the child drops its copies (the argv strings,
 * the descriptors of the fake servers, whose threads did not follow it)
 * and never signals nor reaps the parent's processes.
 */
static void take_ownership(void)
{
    int i;
    if (owner == getpid())
        return;
    if (owner != 0) {
        for (i = 0; i < MAX_SERVERS; i++) {
            if (servers[i].port != 0)
                slot_release(i);
        }
        for (i = 0; i < MAX_FAKES; i++) {
            if (fakes[i].port != 0) {
                close(fakes[i].listen_fd);
                close(fakes[i].wake[0]);
                close(fakes[i].wake[1]);
            }
        }
        memset((void *)pids, 0, sizeof(pids));
        memset(fakes, 0, sizeof(fakes));
        root[0] = '\0';
        rng_state = 0;
    }
    owner = getpid();
    if (!atexit_added && atexit(test_servers_cleanup) == 0)
        atexit_added = 1;
    install_signal_handlers();
}

/* Creates the root directory, canonical (CONFIG GET dir is compared with
 * the directories under it), unless it exists. */
static int ensure_root(void)
{
    const char *tmp = getenv("TMPDIR");
    char template[PATH_MAX];
    char real[PATH_MAX];
    take_ownership();
    if (root[0] != '\0')
        return 0;
    if (tmp == NULL || tmp[0] == '\0')
        tmp = "/tmp";
    snprintf(template, sizeof(template), "%s/ratel-test-XXXXXX", tmp);
    if (mkdtemp(template) == NULL) {
        fprintf(stderr, "test_servers: mkdtemp %s: %s\n", template,
                strerror(errno));
        return -1;
    }
    if (realpath(template, real) == NULL || strlen(real) >= sizeof(root) - 32) {
        fprintf(stderr, "test_servers: %s: unusable root directory\n",
                template);
        rmdir(template);
        return -1;
    }
    strcpy(root, real);
    return 0;
}

const char *test_servers_root(void)
{
    return owner == getpid() ? root : "";
}

const char *test_servers_root_make(void)
{
    return ensure_root() == 0 ? root : NULL;
}

/* ------------------------------------------------------------- ports */

/* Whether a port belongs to a server of ours, or is the bus port of one. */
static int port_reserved(int port)
{
    int i;
    for (i = 0; i < MAX_SERVERS; i++) {
        int q = servers[i].port;
        if (q != 0 &&
            (port == q || port == q + BUS_OFFSET || port + BUS_OFFSET == q))
            return 1;
    }
    return 0;
}

/* A listening socket bound to 127.0.0.1:port, or -1. */
static int listen_on(int port)
{
    struct sockaddr_in sin;
    int one = 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(fd, 128) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int can_listen(int port)
{
    int fd = listen_on(port);
    if (fd < 0)
        return 0;
    close(fd);
    return 1;
}

int test_free_port(void)
{
    int i;
    take_ownership();
    for (i = 0; i < 1000; i++) {
        int port = PORT_LOW + (int)(random_next() % PORT_SPAN);
        if (!port_reserved(port) && can_listen(port) &&
            can_listen(port + BUS_OFFSET))
            return port;
    }
    fprintf(stderr, "test_free_port: no free port pair in %d..%d\n", PORT_LOW,
            PORT_LOW + PORT_SPAN - 1);
    return -1;
}

/* ------------------------------------------------- the server table */

static void slot_release(int slot)
{
    int i;
    for (i = 0; i < MAX_ARGS && servers[slot].argv[i] != NULL; i++)
        free(servers[slot].argv[i]);
    memset(servers[slot].argv, 0, sizeof(servers[slot].argv));
    servers[slot].port = 0;
    pids[slot] = 0;
}

/* The table entry of r, or -1 when it has none (freed, cleaned up, or
 * never started). The argv pointer tells a struct from an older one that
 * had the same port. */
static int slot_of(const test_redis_t *r)
{
    int i;
    if (owner != getpid() || r->port <= 0 || r->argv[0] == NULL)
        return -1;
    for (i = 0; i < MAX_SERVERS; i++) {
        if (servers[i].port == r->port && servers[i].argv[0] == r->argv[0])
            return i;
    }
    return -1;
}

/* The entry of r if its recorded process is the running one; otherwise
 * r->pid is stale (the server was reaped by cleanup) and is cleared. */
static int running_slot(test_redis_t *r)
{
    int slot = slot_of(r);
    if (slot < 0 || r->pid <= 0 || pids[slot] != r->pid) {
        r->pid = 0;
        return -1;
    }
    return slot;
}

static void forget_process(test_redis_t *r, int slot)
{
    pids[slot] = 0;
    r->pid = 0;
}

/* Waits for the process of r to end; returns its wait status. */
static int reap(test_redis_t *r, int slot)
{
    int status = 0;
    while (waitpid(r->pid, &status, 0) < 0 && errno == EINTR) {
    }
    forget_process(r, slot);
    return status;
}

/* How to start one server: test_redis_start()'s arguments, and what
 * test_redis_start_tls() and test_sentinel_start() add. */
typedef struct {
    const char *module_path;  /* absolute, or NULL */
    const char *const *extra; /* NULL-terminated, or NULL */
    const char *certs;        /* TLS only on the port: test_tls_certs() */
    const char *cert_name;    /* "server", "expired", "wrong-name" */
    int auth_clients;         /* --tls-auth-clients yes */
    const char *conf;         /* written to DIR/redis.conf, argv[1] */
} spec_t;

/* The TLS arguments of spec into all[*n..]: the port speaks only TLS. */
static void tls_argv(const spec_t *spec, const char *port, char files[3][600],
                     const char **all, int *n)
{
    const char *args[] = {
        "--port",
        "0",
        "--tls-port",
        port,
        "--tls-cert-file",
        files[0],
        "--tls-key-file",
        files[1],
        "--tls-ca-cert-file",
        files[2],
        "--tls-auth-clients",
        spec->auth_clients ? "yes" : "no",
        "--tls-replication",
        "yes",
    };
    size_t k;
    snprintf(files[0], 600, "%s/%s.crt", spec->certs, spec->cert_name);
    snprintf(files[1], 600, "%s/%s.key", spec->certs, spec->cert_name);
    snprintf(files[2], 600, "%s/ca.crt", spec->certs);
    for (k = 0; k < sizeof(args) / sizeof(args[0]); k++)
        all[(*n)++] = args[k];
}

/* Writes spec->conf to DIR/redis.conf (a Sentinel rewrites its file);
 * -1 with the reason on stderr. */
static int write_conf(const test_redis_t *r, const char *conf, char *path,
                      size_t cap)
{
    FILE *f;
    snprintf(path, cap, "%s/redis.conf", r->dir);
    f = fopen(path, "w");
    if (f == NULL || fputs(conf, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "test_redis_start: %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Fills servers[slot] and r->argv with the command line; -1 if too long or
 * out of memory. */
static int build_argv(test_redis_t *r, int slot, const spec_t *spec)
{
    char port[16], log[600], conf[600], files[3][600];
    const char *fixed[][2] = {
        {"--port", port},       {"--bind", "127.0.0.1"}, {"--save", ""},
        {"--appendonly", "no"}, {"--dir", r->dir},       {"--logfile", log},
        {"--daemonize", "no"},
    };
    const char *module_path = spec->module_path;
    const char *const *extra = spec->extra;
    const char *all[MAX_ARGS];
    int n = 0, i;
    size_t k;
    snprintf(port, sizeof(port), "%d", r->port);
    snprintf(log, sizeof(log), "%s/log", r->dir);
    all[n++] = "redis-server";
    if (spec->conf != NULL) {
        if (write_conf(r, spec->conf, conf, sizeof(conf)) != 0) {
            slot_release(slot);
            return -1;
        }
        all[n++] = conf;
    }
    for (k = 0; k < sizeof(fixed) / sizeof(fixed[0]); k++) {
        all[n++] = fixed[k][0];
        all[n++] = fixed[k][1];
    }
    if (spec->certs != NULL)
        tls_argv(spec, port, files, all, &n);
    if (module_path != NULL) {
        all[n++] = "--loadmodule";
        all[n++] = module_path;
    }
    for (i = 0; extra != NULL && extra[i] != NULL; i++) {
        if (n == MAX_ARGS - 1) {
            fprintf(stderr, "test_redis_start: more than %d arguments\n",
                    MAX_ARGS - 1);
            return -1;
        }
        all[n++] = extra[i];
    }
    for (i = 0; i < n; i++) {
        servers[slot].argv[i] = strdup(all[i]);
        if (servers[slot].argv[i] == NULL) {
            fprintf(stderr, "test_redis_start: out of memory\n");
            slot_release(slot);
            return -1;
        }
    }
    memcpy(r->argv, servers[slot].argv, sizeof(r->argv));
    r->argc = n;
    return 0;
}

/* ----------------------------------------------------------- processes */

/*
 * Forks and execs argv (argv[0] looked up in PATH) in dir, with the
 * environment envp (NULL: this process' own), stdin from /dev/null, stdout
 * and stderr appended to the files out and err. The child dies with the
 * thread that forked it (PR_SET_PDEATHSIG), holds none of the test's
 * descriptors and starts with default signal handling.
 * Returns the pid, or -1 with the reason on stderr.
 */
static pid_t spawn(char *const argv[], char *const envp[], const char *dir,
                   const char *out, const char *err)
{
    sigset_t all, saved;
    pid_t parent = getpid();
    pid_t pid;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pid = fork();
    if (pid == 0) {
        static const char failed[] = "test_servers: exec failed\n";
        sigset_t none;
        int in, fd_out, fd_err;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the test died before prctl */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGABRT, SIG_DFL);
        signal(SIGSEGV, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        in = open("/dev/null", O_RDONLY);
        fd_out = open(out, O_WRONLY | O_CREAT | O_APPEND, 0644);
        fd_err = open(err, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (in < 0 || fd_out < 0 || fd_err < 0 || dup2(in, 0) < 0 ||
            dup2(fd_out, 1) < 0 || dup2(fd_err, 2) < 0 || chdir(dir) != 0)
            _exit(126);
        if (close_range(3, ~0U, 0) != 0) {
            long fd, max = sysconf(_SC_OPEN_MAX);
            for (fd = 3; fd < max && fd < 65536; fd++)
                close((int)fd);
        }
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execvpe(argv[0], argv, envp != NULL ? envp : environ);
        if (write(2, failed, sizeof(failed) - 1) < 0)
            _exit(127);
        _exit(127);
    }
    if (pid < 0)
        fprintf(stderr, "test_servers: fork: %s\n", strerror(errno));
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    return pid;
}

/* Starts the process of r (RATEL_REDIS_WRAP + r->argv) as servers[slot]. */
static int launch(test_redis_t *r, int slot)
{
    char *argv[MAX_WRAP + MAX_ARGS + 1];
    char out[600], err[600];
    const char *wrap = getenv("RATEL_REDIS_WRAP");
    char *words = NULL, *save = NULL, *word;
    int n = 0, i;
    pid_t pid;
    if (wrap != NULL && (words = strdup(wrap)) != NULL) {
        for (word = strtok_r(words, " \t", &save); word != NULL && n < MAX_WRAP;
             word = strtok_r(NULL, " \t", &save))
            argv[n++] = word;
    }
    for (i = 0; i < r->argc; i++)
        argv[n++] = r->argv[i];
    argv[n] = NULL;
    snprintf(out, sizeof(out), "%s/stdout", r->dir);
    snprintf(err, sizeof(err), "%s/stderr", r->dir);
    pid = spawn(argv, NULL, r->dir, out, err);
    free(words);
    if (pid < 0)
        return -1;
    pids[slot] = pid;
    r->pid = pid;
    return 0;
}

/* One command to the server of r, plain or TLS (NULL: no reply). */
static redisReply *command(const test_redis_t *r, redisContext *c,
                           const char *fmt, ...)
{
    char err[256];
    redisReply *reply;
    va_list ap;
    va_start(ap, fmt);
    reply = r->tls[0] != '\0' ? test_redis_tls_vcommand(r->port, r->tls, err,
                                                        sizeof(err), fmt, ap)
                              : redisvCommand(c, fmt, ap);
    va_end(ap);
    return reply;
}

/* PING answered: PONG, or an error other than LOADING (a server that
 * wants AUTH is up too). */
static int answers_ping(const test_redis_t *r, redisContext *c)
{
    redisReply *reply = command(r, c, "PING");
    int up = reply != NULL && (reply->type != REDIS_REPLY_ERROR ||
                               strncmp(reply->str, "LOADING", 7) != 0);
    freeReplyObject(reply);
    return up;
}

/* Whether the server answering on c runs in dir; an error reply (CONFIG
 * renamed, AUTH needed, a Sentinel) cannot tell, and counts as yes. */
static int runs_in(const test_redis_t *r, redisContext *c, const char *dir)
{
    redisReply *reply = command(r, c, "CONFIG GET dir");
    int mine = 1;
    if (reply == NULL)
        return 0;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[1]->type == REDIS_REPLY_STRING)
        mine = strcmp(reply->element[1]->str, dir) == 0;
    freeReplyObject(reply);
    return mine;
}

/* Whether something accepts a TCP connection on 127.0.0.1:port. */
static int can_connect(int port)
{
    struct sockaddr_in sin;
    int ok, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok = connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0;
    close(fd);
    return ok;
}

/*
 * Waits until the server of r answers PING. Returns 0; 1 when it exited
 * because its port or bus port was taken (reported only when report_taken
 * is set); -1 otherwise, with the reason on stderr and the process gone.
 */
static int wait_ready(test_redis_t *r, int slot, int report_taken)
{
    int timeout = getenv("RATEL_REDIS_WRAP") != NULL ? WRAPPED_START_TIMEOUT_MS
                                                     : START_TIMEOUT_MS;
    int64_t deadline = now_ms() + timeout;
    int foreign = 0;
    char log[600], err[600];
    snprintf(log, sizeof(log), "%s/log", r->dir);
    snprintf(err, sizeof(err), "%s/stderr", r->dir);
    for (;;) {
        int status;
        redisContext *c;
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            int taken = file_contains(log, "Address already in use") ||
                        file_contains(err, "Address already in use");
            forget_process(r, slot);
            if (taken && !report_taken)
                return 1;
            fprintf(stderr,
                    "test_redis: redis-server on port %d exited (%s %d)%s\n",
                    r->port, WIFEXITED(status) ? "status" : "signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
                    taken ? ": port taken" : "");
            print_server_files(r);
            return taken ? 1 : -1;
        }
        c = r->tls[0] != '\0' ? NULL : test_redis_connect(r->port, 500);
        if (c != NULL || (r->tls[0] != '\0' && can_connect(r->port))) {
            int up = answers_ping(r, c);
            int mine = up && runs_in(r, c, r->dir);
            if (c != NULL)
                redisFree(c);
            if (up && mine)
                return 0;
            foreign |= up && !mine;
        }
        if (now_ms() >= deadline)
            break;
        pause_ms(POLL_INTERVAL_MS);
    }
    fprintf(stderr,
            "test_redis: redis-server on port %d did not answer "
            "PING within %d s%s\n",
            r->port, timeout / 1000,
            foreign ? " (another server answers on its port)" : "");
    print_server_files(r);
    kill(r->pid, SIGKILL);
    reap(r, slot);
    return -1;
}

/* Makes a fresh directory for a server on r->port: ROOT/redis-PORT, or
 * ROOT/redis-PORT.N when an earlier server of that port left one. */
static int make_dir(test_redis_t *r)
{
    int n;
    for (n = 1; n < 100; n++) {
        int len = n == 1 ? snprintf(r->dir, sizeof(r->dir), "%s/redis-%d", root,
                                    r->port)
                         : snprintf(r->dir, sizeof(r->dir), "%s/redis-%d.%d",
                                    root, r->port, n);
        if (len < 0 || (size_t)len >= sizeof(r->dir))
            break;
        if (mkdir(r->dir, 0700) == 0)
            return 0;
        if (errno != EEXIST)
            break;
    }
    fprintf(stderr, "test_redis_start: cannot make %s: %s\n", r->dir,
            strerror(errno));
    return -1;
}

static int free_slot(void)
{
    int i;
    for (i = 0; i < MAX_SERVERS; i++) {
        if (servers[i].port == 0)
            return i;
    }
    fprintf(stderr, "test_redis_start: more than %d servers not freed\n",
            MAX_SERVERS);
    return -1;
}

/* test_redis_start() by a spec_t. */
static int start(test_redis_t *r, const spec_t *given)
{
    char module[PATH_MAX];
    spec_t spec = *given;
    int attempt;
    memset(r, 0, sizeof(*r));
    /* The server runs in its own directory: a relative path would miss. */
    if (spec.module_path != NULL &&
        realpath(spec.module_path, module) == NULL) {
        fprintf(stderr, "test_redis_start: module %s: %s\n", spec.module_path,
                strerror(errno));
        return -1;
    }
    if (spec.module_path != NULL)
        spec.module_path = module;
    if (ensure_root() != 0)
        return -1;
    for (attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
        int slot = free_slot();
        int rc;
        if (slot < 0)
            return -1;
        memset(r, 0, sizeof(*r));
        if (spec.certs != NULL)
            snprintf(r->tls, sizeof(r->tls), "%s", spec.certs);
        r->port = test_free_port();
        if (r->port < 0 || make_dir(r) != 0)
            return -1;
        servers[slot].port = r->port; /* reserves the port */
        if (build_argv(r, slot, &spec) != 0) {
            slot_release(slot);
            return -1;
        }
        rc = launch(r, slot);
        if (rc == 0)
            rc = wait_ready(r, slot, attempt == START_ATTEMPTS);
        if (rc == 0)
            return 0;
        slot_release(slot);
        memset(r->argv, 0, sizeof(r->argv));
        r->argc = 0;
        if (rc < 0)
            return -1;
    }
    fprintf(stderr, "test_redis_start: port taken %d times\n", START_ATTEMPTS);
    return -1;
}

int test_redis_start(test_redis_t *r, const char *module_path,
                     const char *const *extra)
{
    spec_t spec = {module_path, extra, NULL, NULL, 0, NULL};
    return start(r, &spec);
}

int test_redis_start_tls(test_redis_t *r, const char *certs,
                         const char *cert_name, int auth_clients,
                         const char *module_path, const char *const *extra)
{
    spec_t spec = {module_path, extra, certs, cert_name, auth_clients, NULL};
    if (certs == NULL || cert_name == NULL) {
        fprintf(stderr, "test_redis_start_tls: no certificates\n");
        return -1;
    }
    return start(r, &spec);
}

int test_redis_start_conf(test_redis_t *r, const char *conf, const char *certs,
                          const char *const *extra)
{
    spec_t spec = {NULL, extra, certs, "server", 0, conf};
    return start(r, &spec);
}

int test_redis_restart(test_redis_t *r)
{
    int slot = slot_of(r);
    if (slot < 0) {
        fprintf(stderr,
                "test_redis_restart: port %d: not a server of this "
                "process (freed or cleaned up?)\n",
                r->port);
        return -1;
    }
    if (running_slot(r) >= 0) {
        fprintf(stderr, "test_redis_restart: port %d: still running\n",
                r->port);
        return -1;
    }
    if (launch(r, slot) != 0)
        return -1;
    return wait_ready(r, slot, 1) == 0 ? 0 : -1;
}

void test_redis_kill(test_redis_t *r)
{
    int slot = running_slot(r);
    if (slot < 0)
        return;
    kill(r->pid, SIGKILL);
    reap(r, slot);
}

void test_redis_stop(test_redis_t *r)
{
    int slot = running_slot(r);
    int status, asked = 0;
    int64_t deadline;
    redisContext *c;
    if (slot < 0)
        return;
    kill(r->pid, SIGCONT);
    if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
        forget_process(r, slot); /* it had died already */
        return;
    }
    c = r->tls[0] != '\0' ? NULL : test_redis_connect(r->port, 1000);
    if (c != NULL || r->tls[0] != '\0') {
        /* On success the server closes the connection: no reply. */
        redisReply *reply = command(r, c, "SHUTDOWN NOSAVE NOW");
        asked = reply == NULL || reply->type != REDIS_REPLY_ERROR;
        freeReplyObject(reply);
        if (c != NULL)
            redisFree(c);
    }
    if (!asked)
        kill(r->pid, SIGTERM);
    deadline = now_ms() + STOP_TIMEOUT_MS;
    while (now_ms() < deadline) {
        if (waitpid(r->pid, &status, WNOHANG) == r->pid) {
            forget_process(r, slot);
            return;
        }
        pause_ms(POLL_INTERVAL_MS);
    }
    kill(r->pid, SIGKILL);
    reap(r, slot);
}

void test_redis_pause(test_redis_t *r)
{
    int slot = running_slot(r);
    int status = 0;
    pid_t got;
    if (slot < 0 || kill(r->pid, SIGSTOP) != 0)
        return;
    /* Returns once it is stopped (or, should it have died, reaps it). */
    do {
        got = waitpid(r->pid, &status, WUNTRACED);
    } while (got < 0 && errno == EINTR);
    if (got == r->pid && !WIFSTOPPED(status))
        forget_process(r, slot);
}

void test_redis_resume(test_redis_t *r)
{
    if (running_slot(r) >= 0)
        kill(r->pid, SIGCONT);
}

void test_redis_free(test_redis_t *r)
{
    int slot = slot_of(r);
    test_redis_kill(r);
    if (slot >= 0)
        slot_release(slot);
    r->pid = 0;
    memset(r->argv, 0, sizeof(r->argv));
    r->argc = 0;
}

/* ---------------------------------------------------------- commands */

redisContext *test_redis_connect(int port, int timeout_ms)
{
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL)
        return NULL;
    if (c->err != 0 || redisSetTimeout(c, tv) != REDIS_OK) {
        redisFree(c);
        return NULL;
    }
    return c;
}

/* A reply being written out as text: cut at cap - 1 bytes. */
typedef struct {
    char *buf;
    size_t cap, len;
    int empty; /* nothing written yet: no '\n' before the next element */
} text_t;

static void text_add(text_t *t, const char *s, size_t n)
{
    if (t->cap == 0)
        return;
    if (n > t->cap - 1 - t->len)
        n = t->cap - 1 - t->len;
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_reply(text_t *t, const redisReply *reply)
{
    char num[32];
    size_t i;
    if (reply->type == REDIS_REPLY_ARRAY) {
        for (i = 0; i < reply->elements; i++)
            text_reply(t, reply->element[i]);
        return;
    }
    if (!t->empty)
        text_add(t, "\n", 1);
    t->empty = 0;
    switch (reply->type) {
    case REDIS_REPLY_INTEGER:
        snprintf(num, sizeof(num), "%lld", reply->integer);
        text_add(t, num, strlen(num));
        break;
    case REDIS_REPLY_NIL:
        text_add(t, "(nil)", 5);
        break;
    case REDIS_REPLY_ERROR:
        text_add(t, "(error) ", 8);
        text_add(t, reply->str, reply->len);
        break;
    default: /* string, status */
        text_add(t, reply->str, reply->len);
        break;
    }
}

int test_redis_cmd(int port, char *out, size_t outlen, const char *fmt, ...)
{
    text_t t = {out, outlen, 0, 1};
    redisContext *c;
    redisReply *reply;
    va_list ap;
    if (outlen > 0)
        out[0] = '\0';
    c = test_redis_connect(port, CMD_TIMEOUT_MS);
    if (c == NULL) {
        snprintf(out, outlen, "(no reply) cannot connect to port %d", port);
        return -1;
    }
    va_start(ap, fmt);
    reply = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (reply == NULL) {
        snprintf(out, outlen, "(no reply) %s", c->errstr);
        redisFree(c);
        return -1;
    }
    text_reply(&t, reply);
    freeReplyObject(reply);
    redisFree(c);
    return 0;
}

int test_redis_tls_cmd(int port, const char *certs, char *out, size_t outlen,
                       const char *fmt, ...)
{
    text_t t = {out, outlen, 0, 1};
    char err[256];
    redisReply *reply;
    va_list ap;
    if (outlen > 0)
        out[0] = '\0';
    va_start(ap, fmt);
    reply = test_redis_tls_vcommand(port, certs, err, sizeof(err), fmt, ap);
    va_end(ap);
    if (reply == NULL) {
        snprintf(out, outlen, "(no reply) %s", err);
        return -1;
    }
    text_reply(&t, reply);
    freeReplyObject(reply);
    return 0;
}

int test_redis_cmd_on(const test_redis_t *r, char *out, size_t outlen,
                      const char *fmt, ...)
{
    text_t t = {out, outlen, 0, 1};
    char err[256];
    redisContext *c = NULL;
    redisReply *reply;
    va_list ap;
    if (outlen > 0)
        out[0] = '\0';
    if (r->tls[0] == '\0') {
        c = test_redis_connect(r->port, CMD_TIMEOUT_MS);
        if (c == NULL) {
            snprintf(out, outlen, "(no reply) cannot connect to port %d",
                     r->port);
            return -1;
        }
    }
    va_start(ap, fmt);
    reply = c != NULL ? redisvCommand(c, fmt, ap)
                      : test_redis_tls_vcommand(r->port, r->tls, err,
                                                sizeof(err), fmt, ap);
    va_end(ap);
    if (reply == NULL) {
        snprintf(out, outlen, "(no reply) %s", c != NULL ? c->errstr : err);
        if (c != NULL)
            redisFree(c);
        return -1;
    }
    text_reply(&t, reply);
    freeReplyObject(reply);
    if (c != NULL)
        redisFree(c);
    return 0;
}

/* ----------------------------------------------------------- cluster */

/* This process' environment with TERM=dumb: redis-cli colours its log
 * when TERM says xterm, even into a file. NULL when out of memory. */
static char **environment_without_colours(void)
{
    size_t n = 0, k = 0;
    char **env;
    while (environ[n] != NULL)
        n++;
    env = malloc((n + 2) * sizeof(*env));
    if (env == NULL)
        return NULL;
    for (n = 0; environ[n] != NULL; n++) {
        if (strncmp(environ[n], "TERM=", 5) != 0)
            env[k++] = environ[n];
    }
    env[k++] = "TERM=dumb";
    env[k] = NULL;
    return env;
}

/* Runs redis-cli --cluster create on the three nodes (over TLS when they
 * are TLS servers); 0 when it succeeded. */
static int cluster_create(test_redis_t nodes[3])
{
    char addr[3][32], log[600], ca[600], cert[600], key[600];
    char *argv[] = {"redis-cli",
                    "--cluster",
                    "create",
                    addr[0],
                    addr[1],
                    addr[2],
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL,
                    NULL};
    char **env = environment_without_colours();
    if (nodes[0].tls[0] != '\0') {
        char *tls[] = {"--tls", "--cacert", ca, "--cert", cert, "--key", key};
        snprintf(ca, sizeof(ca), "%s/ca.crt", nodes[0].tls);
        snprintf(cert, sizeof(cert), "%s/client.crt", nodes[0].tls);
        snprintf(key, sizeof(key), "%s/client.key", nodes[0].tls);
        memcpy(argv + 9, tls, sizeof(tls));
    }
    int64_t deadline = now_ms() + CLUSTER_CREATE_TIMEOUT_MS;
    int i, status = 0;
    pid_t pid;
    for (i = 0; i < 3; i++)
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", nodes[i].port);
    snprintf(log, sizeof(log), "%s/cluster-create-%d.log", root, nodes[0].port);
    pid = spawn(argv, env, root, log, log);
    free(env);
    if (pid < 0)
        return -1;
    pids[HELPER_SLOT] = pid;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (now_ms() >= deadline) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            pids[HELPER_SLOT] = 0;
            fprintf(stderr,
                    "test_cluster_start: redis-cli --cluster create "
                    "still running after %d s\n",
                    CLUSTER_CREATE_TIMEOUT_MS / 1000);
            print_tail(log);
            return -1;
        }
        pause_ms(POLL_INTERVAL_MS);
    }
    pids[HELPER_SLOT] = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "test_cluster_start: redis-cli --cluster create "
                        "failed\n");
        print_tail(log);
        return -1;
    }
    return 0;
}

static int cluster_node_ok(const char *info)
{
    return strstr(info, "cluster_state:ok") != NULL &&
           strstr(info, "cluster_slots_assigned:16384") != NULL &&
           strstr(info, "cluster_known_nodes:3") != NULL;
}

/* Waits until every node sees a complete, healthy three-node cluster. */
static int cluster_wait_ok(test_redis_t nodes[3])
{
    int64_t deadline = now_ms() + CLUSTER_OK_TIMEOUT_MS;
    char info[2048];
    int i;
    for (;;) {
        for (i = 0; i < 3; i++) {
            if (test_redis_cmd_on(&nodes[i], info, sizeof(info),
                                  "CLUSTER INFO") != 0 ||
                !cluster_node_ok(info))
                break;
        }
        if (i == 3)
            return 0;
        if (now_ms() >= deadline)
            break;
        pause_ms(50);
    }
    fprintf(stderr,
            "test_cluster_start: node on port %d not ok after %d s; "
            "CLUSTER INFO:\n%s\n",
            nodes[i].port, CLUSTER_OK_TIMEOUT_MS / 1000, info);
    return -1;
}

/* test_cluster_start(), TLS when certs is not NULL. */
static int cluster_start(test_redis_t nodes[3], const char *module_path,
                         const char *certs)
{
    static const char *const cluster[] = {"--cluster-enabled", "yes",
                                          "--tls-cluster", "yes", NULL};
    static const char *const plain[] = {"--cluster-enabled", "yes", NULL};
    spec_t spec = {module_path, certs ? cluster : plain, certs, "server", 0,
                   NULL};
    int i;
    memset(nodes, 0, 3 * sizeof(nodes[0]));
    for (i = 0; i < 3; i++) {
        if (start(&nodes[i], &spec) != 0)
            goto fail;
    }
    if (cluster_create(nodes) == 0 && cluster_wait_ok(nodes) == 0)
        return 0;
fail:
    for (i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
    return -1;
}

int test_cluster_start(test_redis_t nodes[3], const char *module_path)
{
    return cluster_start(nodes, module_path, NULL);
}

int test_cluster_start_tls(test_redis_t nodes[3], const char *certs,
                           const char *module_path)
{
    return cluster_start(nodes, module_path, certs);
}

/* ------------------------------------------------------ fake servers */

typedef struct {
    int fd;
    int64_t since_ms;
    int answered;
} fake_client_t;

static void fake_answer(fake_client_t *client)
{
    /* Short enough for one send; the client may be gone already. */
    ssize_t sent =
        send(client->fd, not_redis_answer, sizeof(not_redis_answer) - 1,
             MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)sent;
    /* Closing our side only: what the client still sends is read and
     * dropped until it closes, so it gets a FIN, not a reset that could
     * destroy the answer before it is read. */
    shutdown(client->fd, SHUT_WR);
    client->answered = 1;
}

/* Serves one fake server until a byte arrives on its wake pipe. */
static void *fake_serve(void *arg)
{
    struct fake *f = arg;
    fake_client_t clients[MAX_FAKE_CLIENTS];
    struct pollfd pfd[2 + MAX_FAKE_CLIENTS];
    int n = 0, i;
    for (;;) {
        int timeout = -1;
        int64_t now = now_ms();
        pfd[0].fd = f->wake[0];
        pfd[1].fd = f->listen_fd;
        for (i = 0; i < n; i++) {
            pfd[2 + i].fd = clients[i].fd;
            if (f->kind == FAKE_NOT_REDIS && !clients[i].answered) {
                int64_t left = clients[i].since_ms + FAKE_ANSWER_AFTER_MS - now;
                left = left < 0 ? 0 : left;
                if (timeout < 0 || left < timeout)
                    timeout = (int)left;
            }
        }
        for (i = 0; i < 2 + n; i++) {
            pfd[i].events = POLLIN;
            pfd[i].revents = 0;
        }
        if (poll(pfd, (nfds_t)(2 + n), timeout) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        if (pfd[0].revents != 0)
            break;
        now = now_ms();
        for (i = n - 1; i >= 0; i--) {
            fake_client_t *client = &clients[i];
            int done = 0;
            if (pfd[2 + i].revents != 0) {
                char buf[4096];
                ssize_t got = recv(client->fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN))
                    done = 1;
                else if (got > 0 && f->kind == FAKE_NOT_REDIS &&
                         !client->answered)
                    fake_answer(client);
            }
            if (!done && f->kind == FAKE_NOT_REDIS && !client->answered &&
                now - client->since_ms >= FAKE_ANSWER_AFTER_MS)
                fake_answer(client);
            if (done) {
                close(client->fd);
                clients[i] = clients[--n];
            }
        }
        if (pfd[1].revents & POLLIN) {
            int fd =
                accept4(f->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && n == MAX_FAKE_CLIENTS) {
                close(fd);
            } else if (fd >= 0) {
                clients[n].fd = fd;
                clients[n].since_ms = now;
                clients[n].answered = 0;
                n++;
            }
        }
    }
    for (i = 0; i < n; i++)
        close(clients[i].fd);
    return NULL;
}

static int fake_start(enum fake_kind kind, const char *who)
{
    struct fake *f = NULL;
    int i, err;
    take_ownership();
    for (i = 0; i < MAX_FAKES && f == NULL; i++) {
        if (fakes[i].port == 0)
            f = &fakes[i];
    }
    if (f == NULL) {
        fprintf(stderr, "%s: more than %d fake servers\n", who, MAX_FAKES);
        return -1;
    }
    f->kind = kind;
    f->listen_fd = -1;
    for (i = 0; i < 10 && f->listen_fd < 0; i++) {
        int port = test_free_port();
        if (port < 0)
            return -1;
        f->listen_fd = listen_on(port);
        f->port = port;
    }
    if (f->listen_fd < 0) {
        fprintf(stderr, "%s: cannot listen: %s\n", who, strerror(errno));
        f->port = 0;
        return -1;
    }
    if (pipe2(f->wake, O_CLOEXEC) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
        close(f->listen_fd);
        f->port = 0;
        return -1;
    }
    err = pthread_create(&f->thread, NULL, fake_serve, f);
    if (err != 0) {
        fprintf(stderr, "%s: pthread_create: %s\n", who, strerror(err));
        close(f->listen_fd);
        close(f->wake[0]);
        close(f->wake[1]);
        f->port = 0;
        return -1;
    }
    return f->port;
}

int test_not_redis_start(void)
{
    return fake_start(FAKE_NOT_REDIS, "test_not_redis_start");
}

int test_silent_start(void)
{
    return fake_start(FAKE_SILENT, "test_silent_start");
}

static void fake_stop(struct fake *f)
{
    if (write(f->wake[1], "x", 1) != 1)
        fprintf(stderr, "test_fake_server_stop: %s\n", strerror(errno));
    pthread_join(f->thread, NULL);
    close(f->listen_fd);
    close(f->wake[0]);
    close(f->wake[1]);
    f->port = 0;
}

void test_fake_server_stop(int port)
{
    int i;
    if (owner != getpid())
        return;
    for (i = 0; i < MAX_FAKES; i++) {
        if (fakes[i].port != 0 && fakes[i].port == port)
            fake_stop(&fakes[i]);
    }
}

void test_fake_servers_stop(void)
{
    int i;
    if (owner != getpid())
        return;
    for (i = 0; i < MAX_FAKES; i++) {
        if (fakes[i].port != 0)
            fake_stop(&fakes[i]);
    }
}

/* ----------------------------------------------------------- cleanup */

void test_servers_cleanup(void)
{
    int i;
    if (owner != getpid())
        return;
    for (i = 0; i <= MAX_SERVERS; i++) {
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    }
    for (i = 0; i <= MAX_SERVERS; i++) {
        if (pids[i] > 0) {
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {
            }
            pids[i] = 0;
        }
    }
    for (i = 0; i < MAX_SERVERS; i++) {
        if (servers[i].port != 0)
            slot_release(i);
    }
    test_fake_servers_stop();
    if (root[0] != '\0') {
        nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        root[0] = '\0';
    }
}
