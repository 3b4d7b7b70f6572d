/*
 * servers_selftest.c - checks the test server library (servers.h) against
 * real redis-server processes: start, commands, pause, kill, restart,
 * stop, AOF persistence, a three-node cluster, TLS-only servers and a TLS
 * cluster, a Sentinel setup and its failover (plain and TLS), the fake
 * servers, crashes of the test and cleanup.
 *
 *   servers_selftest MODULE_PATH [TEST...]
 *
 * MODULE_PATH is the Redis module to load (build/ratel.so), or "none".
 * Without TEST names every test runs, in the order of the table at the
 * end. Prints "ok NAME" / "FAIL NAME: why" lines and "N passed, N failed";
 * exits 1 when anything failed.
 */
#include "servers.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *module;
static char self[4096]; /* this program, to run it as a crashing test */
static int passed, failed;

/* ------------------------------------------------------------ checks */

static void ok(const char *name)
{
    printf("ok %s\n", name);
    passed++;
}

static void fail(const char *name, const char *fmt, ...)
{
    va_list ap;
    printf("FAIL %s: ", name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    failed++;
}

static void same(const char *name, const char *got, const char *want)
{
    if (strcmp(got, want) == 0)
        ok(name);
    else
        fail(name, "got [%s], want [%s]", got, want);
}

static void prefix(const char *name, const char *got, const char *want)
{
    if (strncmp(got, want, strlen(want)) == 0)
        ok(name);
    else
        fail(name, "got [%s], want it to start with [%s]", got, want);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether a process is alive (a zombie is dead), waiting up to 5 s for
 * one that is dying. */
static int process_exists(pid_t pid)
{
    int64_t deadline = now_ms() + 5000;
    for (;;) {
        char path[64], line[512], state = 'Z';
        const char *close_paren;
        FILE *f;
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "r");
        if (f == NULL)
            return 0;
        /* "pid (comm) state ...": comm may hold spaces and parentheses. */
        if (fgets(line, sizeof(line), f) != NULL &&
            (close_paren = strrchr(line, ')')) != NULL)
            sscanf(close_paren + 1, " %c", &state);
        fclose(f);
        if (state == 'Z' || state == 'X')
            return 0;
        if (now_ms() >= deadline)
            return 1;
        usleep(10000);
    }
}

/* The children of this process, from /proc (zombies included). */
static int count_children(void)
{
    DIR *proc = opendir("/proc");
    struct dirent *e;
    int n = 0;
    if (proc == NULL)
        return -1;
    while ((e = readdir(proc)) != NULL) {
        char path[300], line[512];
        const char *close_paren;
        FILE *f;
        int ppid;
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(line, sizeof(line), f) != NULL &&
            (close_paren = strrchr(line, ')')) != NULL &&
            sscanf(close_paren + 1, " %*c %d", &ppid) == 1 &&
            ppid == (int)getpid())
            n++;
        fclose(f);
    }
    closedir(proc);
    return n;
}

/* Whether a TCP connection to 127.0.0.1:port is refused. */
static int refused(int port)
{
    struct sockaddr_in sin;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int rc;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = connect(fd, (struct sockaddr *)&sin, sizeof(sin));
    close(fd);
    return rc != 0 && errno == ECONNREFUSED;
}

/* Connects, sends what (unless NULL), and reads until EOF or 2 s; the
 * answer goes into buf. Returns the bytes read, -1 if it cannot connect. */
static int raw_exchange(int port, const char *what, char *buf, size_t size)
{
    struct sockaddr_in sin;
    struct timeval tv = {2, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    size_t len = 0;
    memset(&sin, 0, sizeof(sin));
    sin.sin_family = AF_INET;
    sin.sin_port = htons((uint16_t)port);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    buf[0] = '\0';
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (what != NULL && send(fd, what, strlen(what), MSG_NOSIGNAL) < 0) {
        close(fd);
        return -1;
    }
    while (len < size - 1) {
        ssize_t got = recv(fd, buf + len, size - 1 - len, 0);
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    buf[len] = '\0';
    close(fd);
    return (int)len;
}

/* Runs PING with a connection whose timeout is timeout_ms; returns the
 * milliseconds it took to fail, or -1 if it did not fail with a timeout. */
static int64_t ping_times_out(int port, int timeout_ms, char *why, size_t size)
{
    redisContext *c = test_redis_connect(port, timeout_ms);
    redisReply *reply;
    int64_t start;
    if (c == NULL) {
        snprintf(why, size, "cannot connect");
        return -1;
    }
    start = now_ms();
    reply = redisCommand(c, "PING");
    if (reply != NULL || c->err != REDIS_ERR_IO) {
        snprintf(why, size, "reply %s, err %d %s",
                 reply != NULL ? "received" : "none", c->err, c->errstr);
        freeReplyObject(reply);
        redisFree(c);
        return -1;
    }
    redisFree(c);
    return now_ms() - start;
}

/* ------------------------------------------------------------- tests */

static void test_standalone(void)
{
    test_redis_t r;
    char out[512], why[256];
    int i, loaded = 0, port;
    int64_t took;
    pid_t pid;

    if (test_redis_start(&r, module, NULL) != 0) {
        fail("standalone.start", "test_redis_start failed (see stderr)");
        return;
    }
    if (r.pid > 0 && r.port >= 10000 && r.port < 22000 && r.argv[0] != NULL &&
        strcmp(r.argv[0], "redis-server") == 0 && r.argv[r.argc] == NULL)
        ok("standalone.start");
    else
        fail("standalone.start", "pid %d port %d argv[0] %s", (int)r.pid,
             r.port, r.argv[0] != NULL ? r.argv[0] : "(null)");
    for (i = 0; i + 1 < r.argc; i++)
        loaded |= strcmp(r.argv[i], "--loadmodule") == 0;
    if (module != NULL) {
        test_redis_cmd(r.port, out, sizeof(out), "MODULE LIST");
        if (loaded && strstr(out, "ratel") != NULL)
            ok("standalone.module");
        else
            fail("standalone.module", "MODULE LIST says [%s]", out);
    }

    test_redis_cmd(r.port, out, sizeof(out), "SET %s %s", "k", "hello");
    same("cmd.set", out, "OK");
    test_redis_cmd(r.port, out, sizeof(out), "GET %s", "k");
    same("cmd.get", out, "hello");
    test_redis_cmd(r.port, out, sizeof(out), "INCR n");
    same("cmd.integer", out, "1");
    test_redis_cmd(r.port, out, sizeof(out), "GET missing");
    same("cmd.nil", out, "(nil)");
    test_redis_cmd(r.port, out, sizeof(out), "NOSUCHCOMMAND");
    prefix("cmd.error", out, "(error) ERR unknown command");
    test_redis_cmd(r.port, out, sizeof(out), "RPUSH l a b c");
    test_redis_cmd(r.port, out, sizeof(out), "LRANGE l 0 -1");
    same("cmd.array", out, "a\nb\nc");
    test_redis_cmd(r.port, out, sizeof(out), "EVAL %s 0",
                   "return {1, {'x', {}}, 'y', {}}");
    same("cmd.nested_array", out, "1\nx\ny");
    test_redis_cmd(r.port, out, sizeof(out), "LRANGE nothing 0 -1");
    same("cmd.empty_array", out, "");
    test_redis_cmd(r.port, out, 4, "GET k");
    same("cmd.cut", out, "hel");
    test_redis_cmd(r.port, out, sizeof(out), "SET b %b", "x\0y", (size_t)3);
    test_redis_cmd(r.port, out, sizeof(out), "STRLEN b");
    same("cmd.binary_arg", out, "3");

    test_redis_pause(&r);
    took = ping_times_out(r.port, 500, why, sizeof(why));
    if (took >= 450 && took < 3000)
        ok("pause.timeout");
    else if (took < 0)
        fail("pause.timeout", "%s", why);
    else
        fail("pause.timeout", "timed out after %lld ms, want ~500",
             (long long)took);
    test_redis_resume(&r);
    test_redis_cmd(r.port, out, sizeof(out), "GET k");
    same("resume", out, "hello");

    pid = r.pid;
    port = r.port;
    test_redis_kill(&r);
    if (r.pid == 0 && !process_exists(pid) && refused(port))
        ok("kill");
    else
        fail("kill", "pid %d still there or port %d not refused", (int)pid,
             port);

    if (test_redis_restart(&r) != 0) {
        fail("restart", "test_redis_restart failed (see stderr)");
    } else {
        test_redis_cmd(r.port, out, sizeof(out), "GET k");
        if (r.port == port && r.pid > 0 && r.pid != pid &&
            strcmp(out, "(nil)") == 0)
            ok("restart");
        else
            fail("restart",
                 "port %d (was %d), GET k [%s] (no persistence: "
                 "want (nil))",
                 r.port, port, out);
    }

    pid = r.pid;
    test_redis_stop(&r);
    if (r.pid == 0 && !process_exists(pid) && refused(port))
        ok("stop");
    else
        fail("stop", "pid %d still there or port %d not refused", (int)pid,
             port);

    /* A paused server must stop too, and quickly (resumed first). */
    if (test_redis_restart(&r) != 0) {
        fail("stop.paused", "restart failed (see stderr)");
    } else {
        int64_t start = now_ms();
        pid = r.pid;
        test_redis_pause(&r);
        test_redis_stop(&r);
        if (r.pid == 0 && !process_exists(pid) && now_ms() - start < 4000)
            ok("stop.paused");
        else
            fail("stop.paused", "pid %d, took %lld ms", (int)pid,
                 (long long)(now_ms() - start));
    }

    test_redis_free(&r);
    fprintf(stderr, "(an expected error follows: restart after free)\n");
    if (r.argv[0] == NULL && r.argc == 0 && test_redis_restart(&r) != 0)
        ok("free");
    else
        fail("free", "argv not cleared or restart accepted");
}

static void test_aof(void)
{
    static const char *const aof[] = {"--appendonly", "yes", NULL};
    test_redis_t r;
    char out[256];
    if (test_redis_start(&r, module, aof) != 0) {
        fail("aof.start", "test_redis_start failed (see stderr)");
        return;
    }
    test_redis_cmd(r.port, out, sizeof(out), "SET kept value");
    test_redis_stop(&r);
    if (test_redis_restart(&r) != 0) {
        fail("aof.stop_restart", "restart failed (see stderr)");
        test_redis_free(&r);
        return;
    }
    test_redis_cmd(r.port, out, sizeof(out), "GET kept");
    same("aof.stop_restart", out, "value");

    /* Each write reaches the AOF file before its reply: a crash keeps it. */
    test_redis_cmd(r.port, out, sizeof(out), "SET crash survivor");
    test_redis_kill(&r);
    if (test_redis_restart(&r) != 0) {
        fail("aof.kill_restart", "restart failed (see stderr)");
    } else {
        test_redis_cmd(r.port, out, sizeof(out), "GET crash");
        same("aof.kill_restart", out, "survivor");
    }
    test_redis_free(&r);
}

/* The port of the node that serves slot, from CLUSTER SLOTS; -1 if none. */
static int slot_owner(int port, long long slot)
{
    redisContext *c = test_redis_connect(port, 5000);
    redisReply *reply;
    int owner = -1;
    size_t i;
    if (c == NULL)
        return -1;
    reply = redisCommand(c, "CLUSTER SLOTS");
    for (i = 0; reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
                i < reply->elements;
         i++) {
        /* [start, end, [ip, port, id], replicas...] */
        redisReply *range = reply->element[i];
        if (range->elements >= 3 && range->element[0]->integer <= slot &&
            slot <= range->element[1]->integer)
            owner = (int)range->element[2]->element[1]->integer;
    }
    freeReplyObject(reply);
    redisFree(c);
    return owner;
}

static void test_cluster(void)
{
    test_redis_t nodes[3];
    char out[2048], want[64];
    int i, owner, other = -1, info_ok = 1;
    long long slot;

    if (test_cluster_start(nodes, module) != 0) {
        fail("cluster.start", "test_cluster_start failed (see stderr)");
        return;
    }
    ok("cluster.start");
    for (i = 0; i < 3; i++) {
        test_redis_cmd(nodes[i].port, out, sizeof(out), "CLUSTER INFO");
        if (strstr(out, "cluster_state:ok") == NULL) {
            fail("cluster.info", "node %d (port %d) says [%.200s]", i,
                 nodes[i].port, out);
            info_ok = 0;
        }
    }
    if (info_ok)
        ok("cluster.info");

    test_redis_cmd(nodes[0].port, out, sizeof(out), "CLUSTER KEYSLOT %s",
                   "ratel:key");
    slot = atoll(out);
    owner = slot_owner(nodes[0].port, slot);
    for (i = 0; i < 3; i++) {
        if (nodes[i].port != owner)
            other = nodes[i].port;
    }
    if (owner < 0 || other < 0) {
        fail("cluster.slots", "slot %lld: owner %d, not among the nodes", slot,
             owner);
    } else {
        ok("cluster.slots");
        test_redis_cmd(owner, out, sizeof(out), "SET %s %s", "ratel:key", "v");
        test_redis_cmd(owner, out, sizeof(out), "GET %s", "ratel:key");
        same("cluster.set_get", out, "v");
        test_redis_cmd(other, out, sizeof(out), "GET %s", "ratel:key");
        snprintf(want, sizeof(want), "(error) MOVED %lld 127.0.0.1:%d", slot,
                 owner);
        same("cluster.moved", out, want);
    }
    for (i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
}

/* A TLS-only server: it answers over TLS only, stops and restarts over
   TLS; with tls-auth-clients yes too (the harness presents client.crt). */
static void test_tls(void)
{
    test_redis_t r;
    char certs[512], out[512];

    if (test_tls_certs(certs, sizeof(certs)) != 0) {
        fail("tls.certs", "test_tls_certs failed (see stderr)");
        return;
    }
    ok("tls.certs");
    if (test_redis_start_tls(&r, certs, "server", 1, module, NULL) != 0) {
        fail("tls.start", "test_redis_start_tls failed (see stderr)");
        return;
    }
    ok("tls.start");
    test_redis_cmd_on(&r, out, sizeof(out), "SET %s %s", "k", "v");
    same("tls.set", out, "OK");
    test_redis_tls_cmd(r.port, certs, out, sizeof(out), "GET %s", "k");
    same("tls.get", out, "v");
    test_redis_cmd_on(&r, out, sizeof(out), "CONFIG GET %s", "port");
    same("tls.no_plain_port", out, "port\n0");
    /* The plain protocol gets no answer on a TLS port. */
    prefix("tls.plain_refused",
           (test_redis_cmd(r.port, out, sizeof(out), "PING"), out),
           "(no reply)");
    test_redis_stop(&r);
    if (r.pid == 0)
        ok("tls.stop");
    else
        fail("tls.stop", "still running");
    if (test_redis_restart(&r) == 0) {
        test_redis_cmd_on(&r, out, sizeof(out), "PING");
        same("tls.restart", out, "PONG");
    } else {
        fail("tls.restart", "test_redis_restart failed");
    }
    test_redis_free(&r);
    /* A server on the expired certificate comes up all the same. */
    if (test_redis_start_tls(&r, certs, "expired", 0, NULL, NULL) == 0) {
        test_redis_cmd_on(&r, out, sizeof(out), "PING");
        same("tls.expired_server", out, "PONG");
    } else {
        fail("tls.expired_server", "did not start");
    }
    test_redis_free(&r);
}

static void test_tls_cluster(void)
{
    test_redis_t nodes[3];
    char certs[512], out[2048], want[64];
    int i, info_ok = 1;

    if (test_tls_certs(certs, sizeof(certs)) != 0 ||
        test_cluster_start_tls(nodes, certs, module) != 0) {
        fail("tls_cluster.start", "test_cluster_start_tls failed");
        return;
    }
    ok("tls_cluster.start");
    for (i = 0; i < 3; i++) {
        test_redis_cmd_on(&nodes[i], out, sizeof(out), "CLUSTER INFO");
        info_ok &= strstr(out, "cluster_state:ok") != NULL;
    }
    if (info_ok)
        ok("tls_cluster.info");
    else
        fail("tls_cluster.info", "a node says [%.200s]", out);
    /* CLUSTER SLOTS names the TLS ports. */
    test_redis_cmd_on(&nodes[0], out, sizeof(out), "CLUSTER SLOTS");
    snprintf(want, sizeof(want), "127.0.0.1\n%d\n", nodes[1].port);
    if (strstr(out, want) != NULL)
        ok("tls_cluster.slots");
    else
        fail("tls_cluster.slots", "no %d in [%.300s]", nodes[1].port, out);
    for (i = 0; i < 3; i++)
        test_redis_free(&nodes[i]);
}

/* A primary, a replica and Sentinels; SENTINEL FAILOVER moves the
   primary and every Sentinel follows. */
static void sentinel_case(const char *name, int n, const char *certs)
{
    test_sentinel_t s;
    char out[512], label[64];
    int64_t t0 = now_ms();
    int next;

    snprintf(label, sizeof(label), "%s.start", name);
    if (test_sentinel_start(&s, n, module, certs) != 0) {
        fail(label, "test_sentinel_start failed (see stderr)");
        return;
    }
    ok(label);
    snprintf(label, sizeof(label), "%s.primary", name);
    if (s.primary_port == s.data[0].port)
        ok(label);
    else
        fail(label, "primary %d, want %d", s.primary_port, s.data[0].port);
    test_redis_cmd_on(&s.data[0], out, sizeof(out), "SET %s %s", "k", "1");
    /* Replication is asynchronous: the replica has it before it is
       promoted. */
    test_redis_cmd_on(&s.data[0], out, sizeof(out), "WAIT 1 5000");
    next = test_sentinel_failover(&s, 30000);
    snprintf(label, sizeof(label), "%s.failover", name);
    if (next == s.data[1].port && s.primary_port == next)
        ok(label);
    else
        fail(label, "new primary %d, want %d", next, s.data[1].port);
    test_redis_cmd_on(&s.data[1], out, sizeof(out), "ROLE");
    snprintf(label, sizeof(label), "%s.new_role", name);
    prefix(label, out, "master\n");
    test_redis_cmd_on(&s.data[1], out, sizeof(out), "GET %s", "k");
    snprintf(label, sizeof(label), "%s.data_kept", name);
    same(label, out, "1");
    test_redis_cmd_on(&s.sentinels[n - 1], out, sizeof(out),
                      "SENTINEL GET-MASTER-ADDR-BY-NAME %s",
                      TEST_SENTINEL_MASTER);
    {
        char want[64];
        snprintf(want, sizeof(want), "127.0.0.1\n%d", s.data[1].port);
        snprintf(label, sizeof(label), "%s.sentinels_follow", name);
        same(label, out, want);
    }
    printf("# %s: %d Sentinels, start and failover in %lld ms\n", name, n,
           (long long)(now_ms() - t0));
    test_sentinel_free(&s);
}

static void test_sentinel(void)
{
    sentinel_case("sentinel1", 1, NULL);
    sentinel_case("sentinel3", 3, NULL);
}

static void test_sentinel_tls(void)
{
    char certs[512];

    if (test_tls_certs(certs, sizeof(certs)) != 0) {
        fail("sentinel_tls.certs", "test_tls_certs failed");
        return;
    }
    sentinel_case("sentinel_tls", 2, certs);
}

static void test_fakes(void)
{
    char buf[512], why[256];
    int http = test_not_redis_start();
    int silent = test_silent_start();
    redisContext *c;
    redisReply *reply;
    int64_t took;

    if (http < 0 || silent < 0) {
        fail("fake.start", "ports %d and %d", http, silent);
        test_fake_servers_stop();
        return;
    }
    raw_exchange(http, "PING\r\n", buf, sizeof(buf));
    same("not_redis.answer", buf,
         "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
         "Connection: close\r\n\r\n");
    raw_exchange(http, NULL, buf, sizeof(buf));
    prefix("not_redis.answer_unasked", buf, "HTTP/1.1 400 Bad Request\r\n");

    c = test_redis_connect(http, 2000);
    reply = c != NULL ? redisCommand(c, "PING") : NULL;
    if (c != NULL && reply == NULL && c->err == REDIS_ERR_PROTOCOL)
        ok("not_redis.hiredis");
    else
        fail("not_redis.hiredis", "want a protocol error, got %s",
             c == NULL ? "no connection" : c->errstr);
    freeReplyObject(reply);
    if (c != NULL)
        redisFree(c);

    took = ping_times_out(silent, 300, why, sizeof(why));
    if (took >= 250 && took < 3000)
        ok("silent.timeout");
    else if (took < 0)
        fail("silent.timeout", "%s", why);
    else
        fail("silent.timeout", "timed out after %lld ms, want ~300",
             (long long)took);

    test_fake_server_stop(silent);
    if (refused(silent) && !refused(http))
        ok("fake.stop_one");
    else
        fail("fake.stop_one", "silent port %d or http port %d wrong", silent,
             http);
    test_fake_servers_stop();
    if (refused(http))
        ok("fake.stop_all");
    else
        fail("fake.stop_all", "port %d still accepts", http);
}

static void test_ports(void)
{
    test_redis_t r;
    int port = test_free_port(), i, clash = 0;
    if (port >= 10000 && port < 22000 && refused(port) && refused(port + 10000))
        ok("free_port");
    else
        fail("free_port", "port %d", port);

    /* A killed server's port stays its own, for the restart. */
    if (test_redis_start(&r, NULL, NULL) != 0) {
        fail("free_port.reserved", "test_redis_start failed (see stderr)");
        return;
    }
    test_redis_kill(&r);
    for (i = 0; i < 2000; i++) {
        port = test_free_port();
        clash |=
            port == r.port || port == r.port + 10000 || port + 10000 == r.port;
    }
    if (!clash)
        ok("free_port.reserved");
    else
        fail("free_port.reserved", "port %d handed out again", r.port);
    test_redis_free(&r);
}

/*
 * The crashing test of test_crash(), run as "servers_selftest --crash-child
 * abort|exit": a fresh process (so a valgrind run of the selftest does not
 * follow it) that starts a server, prints its pid and root directory, and
 * dies without cleaning up.
 */
static int crash_child_main(const char *how)
{
    test_redis_t r;
    struct rlimit no_core = {0, 0};
    if (test_redis_start(&r, NULL, NULL) != 0)
        return 1;
    printf("%d %s\n", (int)r.pid, test_servers_root());
    fflush(stdout);
    if (strcmp(how, "abort") == 0) {
        setrlimit(RLIMIT_CORE, &no_core);
        abort(); /* the library's SIGABRT handler kills the server */
    }
    _exit(0); /* runs nothing: PR_SET_PDEATHSIG kills the server */
}

/* Runs the crashing test and checks that its server died with it. */
static void crash(const char *name, const char *how)
{
    int fds[2], status;
    pid_t child, server = 0;
    char root[512] = "";
    FILE *in;
    if (pipe(fds) != 0) {
        fail(name, "pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    child = fork();
    if (child == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl(self, "servers_selftest", "--crash-child", how, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    in = fdopen(fds[0], "r");
    if (in == NULL || fscanf(in, "%d %511s", &server, root) != 2)
        server = 0;
    if (in != NULL)
        fclose(in);
    waitpid(child, &status, 0);
    if (server <= 0)
        fail(name, "the child did not start a server");
    else if (process_exists(server))
        fail(name, "server %d outlived its test", (int)server);
    else
        ok(name);
    if (strncmp(root, "/", 1) == 0 && strstr(root, "/ratel-test-") != NULL) {
        /* A crashed test cannot remove its root: do it for the child. */
        char cmd[600];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", root);
    }
}

static void test_crash(void)
{
    crash("crash.abort", "abort");
    crash("crash.exit", "exit");
}

/*
 * A child forked by a test that uses the library gets servers of its own;
 * its cleanup leaves the parent's alone.
 */
static void test_fork(void)
{
    test_redis_t mine;
    char out[64];
    int fds[2], status;
    pid_t child, theirs = 0;
    if (test_redis_start(&mine, NULL, NULL) != 0 || pipe(fds) != 0) {
        fail("fork", "test_redis_start or pipe failed");
        return;
    }
    fflush(stdout);
    child = fork();
    if (child == 0) {
        test_redis_t r;
        int answer = 0;
        close(fds[0]);
        if (test_redis_start(&r, NULL, NULL) == 0 && r.port != mine.port &&
            strcmp(test_servers_root(), "") != 0)
            answer = (int)r.pid;
        test_redis_kill(&mine); /* not the child's: must do nothing */
        test_servers_cleanup();
        if (write(fds[1], &answer, sizeof(answer)) != sizeof(answer))
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    if (read(fds[0], &theirs, sizeof(theirs)) != sizeof(theirs))
        theirs = 0;
    close(fds[0]);
    waitpid(child, &status, 0);
    test_redis_cmd(mine.port, out, sizeof(out), "PING");
    if (theirs <= 0)
        fail("fork", "the child could not start a server of its own");
    else if (process_exists(theirs))
        fail("fork", "the child's cleanup left server %d", (int)theirs);
    else if (strcmp(out, "PONG") != 0 || mine.pid <= 0)
        fail("fork", "the child touched the parent's server: [%s]", out);
    else
        ok("fork");
    test_redis_free(&mine);
}

static void test_cleanup(void)
{
    static const char *const cluster_bus[] = {"--cluster-enabled", "yes", NULL};
    test_redis_t a, b;
    char root[512];
    struct stat st;
    int http;
    if (test_redis_start(&a, module, NULL) != 0 ||
        test_redis_start(&b, NULL, cluster_bus) != 0) {
        fail("cleanup", "test_redis_start failed (see stderr)");
        return;
    }
    http = test_not_redis_start();
    test_redis_pause(&b); /* forgotten, and paused at that */
    snprintf(root, sizeof(root), "%s", test_servers_root());
    test_servers_cleanup();
    if (process_exists(a.pid) || process_exists(b.pid))
        fail("cleanup", "a server survived: %d %d", (int)a.pid, (int)b.pid);
    else if (count_children() != 0)
        fail("cleanup", "%d children left", count_children());
    else if (stat(root, &st) == 0)
        fail("cleanup", "%s still there", root);
    else if (test_servers_root()[0] != '\0')
        fail("cleanup", "root still set: %s", test_servers_root());
    else if (http < 0 || !refused(http))
        fail("cleanup", "fake server %d still there", http);
    else
        ok("cleanup");
    /* The structs are dead: using them is harmless. */
    test_redis_stop(&a);
    test_redis_kill(&b);
    test_redis_free(&a);
    test_redis_free(&b);
}

/* ------------------------------------------------------------ runner */

static const struct {
    const char *name;
    void (*run)(void);
} tests[] = {
    {"standalone", test_standalone},
    {"aof", test_aof},
    {"cluster", test_cluster},
    {"tls", test_tls},
    {"tls_cluster", test_tls_cluster},
    {"sentinel", test_sentinel},
    {"sentinel_tls", test_sentinel_tls},
    {"fakes", test_fakes},
    {"ports", test_ports},
    {"crash", test_crash},
    {"fork", test_fork},
    {"cleanup", test_cleanup},
};

int main(int argc, char **argv)
{
    size_t i;
    int k;
    if (argc == 3 && strcmp(argv[1], "--crash-child") == 0)
        return crash_child_main(argv[2]);
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODULE_PATH|none [TEST...]\n", argv[0]);
        return 2;
    }
    module = strcmp(argv[1], "none") == 0 ? NULL : argv[1];
    /* Not execl("/proc/self/exe"): under valgrind that starts valgrind's
     * tool; readlink() gives this program's path. */
    if (readlink("/proc/self/exe", self, sizeof(self) - 1) < 0)
        snprintf(self, sizeof(self), "%s", argv[0]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
        int chosen = argc == 2;
        for (k = 2; k < argc; k++)
            chosen |= strcmp(argv[k], tests[i].name) == 0;
        if (chosen)
            tests[i].run();
    }
    for (k = 2; k < argc; k++) {
        int known = 0;
        for (i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
            known |= strcmp(argv[k], tests[i].name) == 0;
        if (!known)
            fail(argv[k], "no such test");
    }
    test_servers_cleanup();
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
