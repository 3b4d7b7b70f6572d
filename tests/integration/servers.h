/*
 * servers.h - real redis-server processes for C integration tests: the C
 * twin of lib.sh, so a test of a Redis client can kill, pause and restart
 * the servers it talks to in the middle of a test.
 *
 *   test_redis_t r;
 *   if (test_redis_start(&r, "build/ratel.so", NULL) != 0)
 *       ...;                               (the reason is on stderr)
 *   test_redis_cmd(r.port, out, sizeof(out), "SET %s %s", "k", "v");
 *   test_redis_pause(&r);                  (accepts, never answers)
 *   test_redis_resume(&r);
 *   test_redis_kill(&r);                   (SIGKILL, like a crash)
 *   test_redis_restart(&r);                (same port, directory, args)
 *   test_redis_stop(&r);                   (clean SHUTDOWN)
 *
 *   char certs[512];                       (TLS: tls_certs.sh's files)
 *   test_tls_certs(certs, sizeof(certs));
 *   test_redis_start_tls(&r, certs, "server", 0, NULL, NULL);
 *   test_redis_cmd_on(&r, out, sizeof(out), "PING");   (plain or TLS)
 *
 *   test_sentinel_t s;                     (a primary, a replica and
 *   test_sentinel_start(&s, 3, NULL, NULL);  Sentinels monitoring them)
 *   int new_port = test_sentinel_failover(&s, 20000);
 *   test_sentinel_free(&s);
 *
 * Every server runs on a loopback port in its own directory under one
 * temporary root per process. Whatever a test forgets, test_servers_cleanup()
 * (registered with atexit() by the first start) kills the servers and
 * removes the root; a crash of the test (SIGINT, SIGTERM, SIGABRT, SIGSEGV)
 * kills them from a signal handler (the root and its logs stay, for a
 * post-mortem), and every server gets SIGKILL from the kernel when the
 * thread that started it dies (PR_SET_PDEATHSIG), so no server outlives
 * its test. The handlers are installed only for signals whose disposition
 * is still the default: a handler of the test's or a sanitizer's, or an
 * ignored SIGINT (background jobs of a shell), is left as it is.
 *
 * Not thread-safe: call every function from one thread, the one that
 * outlives the servers (PR_SET_PDEATHSIG watches the thread that forked,
 * not the process). RATEL_REDIS_WRAP, if set (e.g. "valgrind -q"), is split
 * on blanks and prefixed to every redis-server command line, as in lib.sh;
 * with it, servers get 60 s instead of 10 s to answer their first PING.
 */
#ifndef RATEL_TEST_SERVERS_H
#define RATEL_TEST_SERVERS_H

#include <hiredis/hiredis.h>

#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct test_redis_s {
    int port;      /* loopback port */
    pid_t pid;     /* 0 when not running */
    char dir[512]; /* its own working directory (logs, rdb, aof, nodes.conf) */
    /* The redis-server command line it was started with, argv[0] being
     * "redis-server" (RATEL_REDIS_WRAP is not part of it), NULL-terminated.
     * The strings belong to the library: test_redis_free() or
     * test_servers_cleanup() frees them; never free them yourself. */
    char *argv[64];
    int argc;
    char tls[512]; /* the certificates' directory of a TLS-only server
                      (r->port speaks only TLS); "" for a plain one */
} test_redis_t;

/*
 * Starts redis-server on a free loopback port (test_free_port()) in its own
 * directory ROOT/redis-PORT with
 *
 *   --port P --bind 127.0.0.1 --save '' --appendonly no --dir DIR
 *   --logfile DIR/log --daemonize no [--loadmodule MODULE_PATH] EXTRA...
 *
 * (stdout and stderr to DIR/stdout and DIR/stderr, stdin from /dev/null),
 * EXTRA being NULL or a NULL-terminated list such as {"--appendonly", "yes",
 * NULL}: later arguments override earlier ones. A relative module_path is
 * made absolute first (the server runs in DIR). Waits, polling PING, until
 * the server answers PONG (a LOADING error means wait on), and checks with
 * CONFIG GET dir that the answer came from this server, not from another
 * one on the port. If the server exits because the port (or the cluster
 * bus port, P + 10000) was taken meanwhile, tries another port, five
 * attempts in all. The previous contents of *r are ignored (to reuse a
 * struct, test_redis_free() it first). Returns 0 with *r filled in, or -1
 * with the reason and the tail of the server's log on stderr (then r->pid
 * is 0 and r->argv empty).
 */
int test_redis_start(test_redis_t *r, const char *module_path,
                     const char *const *extra);

/*
 * Starts the server again, after test_redis_kill() or test_redis_stop(), on
 * the same port, in the same directory (so an AOF, an RDB or nodes.conf is
 * read back) with the same arguments, and waits for PONG as
 * test_redis_start() does, without trying other ports. Returns 0, or -1
 * with the reason on stderr (also when it is still running).
 */
int test_redis_restart(test_redis_t *r);

/* SIGKILL (a crash: nothing is flushed) and reap. No-op when not running. */
void test_redis_kill(test_redis_t *r);

/*
 * A clean shutdown: SHUTDOWN NOSAVE NOW through hiredis (NOSAVE: no RDB
 * snapshot, but an AOF is flushed and fsynced; NOW: no waiting for lagging
 * replicas), SIGTERM when the command is refused, SIGKILL if the server is
 * still there after 5 s; then reaps it. A paused server is resumed first.
 * No-op when not running.
 */
void test_redis_stop(test_redis_t *r);

/*
 * SIGSTOP and wait until the server is stopped: the kernel still accepts
 * connections on its port (into the listen backlog) but nothing answers,
 * so clients time out. test_redis_resume() sends SIGCONT.
 */
void test_redis_pause(test_redis_t *r);
void test_redis_resume(test_redis_t *r);

/*
 * Stops the server if it runs (test_redis_kill()) and frees what the
 * library keeps for it, the argv strings included; *r is then all zero
 * but for port and dir. Its port is no longer kept free for a restart.
 */
void test_redis_free(test_redis_t *r);

/*
 * Runs one command, hiredis redisCommand() format (%s, %b with a pointer
 * and a size_t length, %d...), on 127.0.0.1:PORT with 5 s timeouts to
 * connect and to answer, and writes the reply as text into out (always
 * NUL-terminated, cut to outlen - 1 bytes): integers in decimal, strings
 * and status replies as they are, nil as "(nil)", errors prefixed with
 * "(error) " (e.g. "(error) MOVED 866 127.0.0.1:24001"), arrays as their
 * elements joined by '\n' with nested arrays flattened (an empty array is
 * ""). Returns 0 for any reply, errors included; -1 when it could not
 * connect or got no reply, with "(no reply) " and hiredis' reason in out.
 */
int test_redis_cmd(int port, char *out, size_t outlen, const char *fmt, ...);

/*
 * A hiredis connection to 127.0.0.1:PORT whose connect and every command
 * time out after timeout_ms (then the command returns NULL and c->err is
 * REDIS_ERR_IO). Returns NULL if it could not connect; the caller frees it
 * with redisFree().
 */
redisContext *test_redis_connect(int port, int timeout_ms);

/*
 * Three masters with --cluster-enabled yes (and the module when
 * module_path is not NULL), joined by `redis-cli --cluster create
 * 127.0.0.1:P1 127.0.0.1:P2 127.0.0.1:P3 --cluster-replicas 0
 * --cluster-yes` (its output in ROOT/cluster-create-P1.log; killed after
 * 30 s). Then waits, up to 20 s, until every node's CLUSTER INFO says
 * cluster_state:ok, cluster_slots_assigned:16384 and cluster_known_nodes:3,
 * so any node answers with the right MOVED. redis-cli 7.0 hands out the
 * slots in argument order (nodes[0] 0-5460, nodes[1] 5461-10922, nodes[2]
 * 10923-16383), but a test that needs a key's owner should ask CLUSTER
 * SLOTS or follow MOVED. The cluster-node-timeout is redis' default (15 s).
 * Returns 0, or -1 with the reason on stderr; on failure the three servers
 * are killed and freed.
 */
int test_cluster_start(test_redis_t nodes[3], const char *module_path);

/* ------------------------------------------------------------- TLS */

/*
 * The test certificates (tests/integration/tls_certs.sh documents each
 * file: ca.crt, other-ca.crt, server.crt, expired.crt, wrong-name.crt,
 * client.crt, other-client.crt and their keys), made once per process in
 * ROOT/certs; their directory is written into dir (cap bytes). The script
 * is found relative to the working directory (tests run from the source
 * tree) unless RATEL_TLS_CERTS_SH names it. Returns 0, or -1 with the
 * reason on stderr.
 */
int test_tls_certs(char *dir, size_t cap);

/*
 * A TLS-only redis-server, as test_redis_start() starts one but with
 *
 *   --port 0 --tls-port P --tls-cert-file CERTS/NAME.crt
 *   --tls-key-file CERTS/NAME.key --tls-ca-cert-file CERTS/ca.crt
 *   --tls-auth-clients yes|no --tls-replication yes
 *
 * before EXTRA: r->port is the TLS port, r->tls the certificates'
 * directory. cert_name is "server", "expired" or "wrong-name" (the server
 * comes up with any of them: the harness's own client verifies nothing
 * and presents client.crt). The harness's functions (stop, restart,
 * test_redis_cmd_on) speak TLS to it; test_redis_cmd() and
 * test_redis_connect() do not (hiredis 0.14 has no TLS).
 */
int test_redis_start_tls(test_redis_t *r, const char *certs,
                         const char *cert_name, int auth_clients,
                         const char *module_path, const char *const *extra);

/*
 * A server started from a configuration file: `conf` is written to
 * DIR/redis.conf and given as the first argument, before the usual ones
 * and EXTRA (e.g. {"--sentinel", NULL}); TLS-only with CERTS/server.crt
 * (and tls-auth-clients no) when certs is not NULL. test_sentinel_start()
 * starts its Sentinels this way.
 */
int test_redis_start_conf(test_redis_t *r, const char *conf, const char *certs,
                          const char *const *extra);

/*
 * test_redis_cmd() to the server of r, over TLS when it is a TLS server.
 */
int test_redis_cmd_on(const test_redis_t *r, char *out, size_t outlen,
                      const char *fmt, ...);

/* test_redis_cmd() over TLS to 127.0.0.1:PORT, presenting
   CERTS/client.crt and verifying nothing. */
int test_redis_tls_cmd(int port, const char *certs, char *out, size_t outlen,
                       const char *fmt, ...);

/* The reply of one command over TLS (as above); NULL with the reason in
   err. The caller frees it with freeReplyObject(). */
redisReply *test_redis_tls_vcommand(int port, const char *certs, char *err,
                                    size_t errlen, const char *fmt, va_list ap);

/*
 * test_cluster_start() with TLS-only nodes (CERTS/server.crt,
 * --tls-cluster yes: the cluster bus speaks TLS too) joined by
 * `redis-cli --tls --cacert CERTS/ca.crt --cert CERTS/client.crt --key
 * CERTS/client.key --cluster create ...`; CLUSTER SLOTS names the TLS
 * ports.
 */
int test_cluster_start_tls(test_redis_t nodes[3], const char *certs,
                           const char *module_path);

/* -------------------------------------------------------- Sentinel */

#define TEST_SENTINEL_MASTER "mymaster"
#define TEST_SENTINEL_MAX 3

/*
 * A Sentinel setup: data[0] (the primary at start) and data[1] (its
 * replica), and n Sentinels monitoring them as TEST_SENTINEL_MASTER with
 * quorum 1, down-after-milliseconds 1000, failover-timeout 5000 and
 * parallel-syncs 1. primary_port is the primary the Sentinels last agreed
 * on (test_sentinel_wait, test_sentinel_failover).
 */
typedef struct test_sentinel_s {
    test_redis_t data[2];
    test_redis_t sentinels[TEST_SENTINEL_MAX];
    int nsentinels;
    int primary_port;
} test_sentinel_t;

/*
 * Starts the primary (module loaded when module_path is not NULL), the
 * replica (--replicaof the primary, waits until its link is up) and
 * nsentinels (1..3) `redis-server CONF --sentinel` on free loopback
 * ports, then waits (test_sentinel_wait, 20 s) until every Sentinel names
 * the primary, knows the replica and knows the other Sentinels. With
 * certs, every server is TLS-only (Sentinels included, tls-replication
 * yes, so Sentinels reach the data nodes over TLS). Returns 0, or -1 with
 * the reason on stderr and everything stopped.
 */
int test_sentinel_start(test_sentinel_t *s, int nsentinels,
                        const char *module_path, const char *certs);

/*
 * Waits up to timeout_ms until every Sentinel answers SENTINEL
 * GET-MASTER-ADDR-BY-NAME with 127.0.0.1 and primary_port, counts one
 * replica and nsentinels - 1 other Sentinels, and the server on that port
 * says ROLE master. Sets s->primary_port. Returns 0, or -1 with what the
 * Sentinels said on stderr.
 */
int test_sentinel_wait(test_sentinel_t *s, int primary_port, int timeout_ms);

/*
 * SENTINEL FAILOVER on the first Sentinel, then waits (timeout_ms) until
 * every Sentinel names the other data node and it says ROLE master.
 * Returns the new primary's port (also in s->primary_port), or -1 with the
 * reason on stderr.
 */
int test_sentinel_failover(test_sentinel_t *s, int timeout_ms);

/* The data node on primary_port (data[0] or data[1]), or NULL. */
test_redis_t *test_sentinel_primary(test_sentinel_t *s);

/* Frees the Sentinels and the data nodes (test_redis_free). */
void test_sentinel_free(test_sentinel_t *s);

/*
 * Kills (SIGKILL) and reaps every server this process started and did not
 * free, stops the fake servers, frees the argv strings and removes the
 * root directory with everything in it; test_redis_t structs still around
 * are dead afterwards. Idempotent; in a child forked by the test it
 * touches only the child's own servers. A later start makes a new root.
 */
void test_servers_cleanup(void);

/*
 * The root directory of this process' servers ("" before the first start
 * and after cleanup). Owned by the library.
 */
const char *test_servers_root(void);

/* The root directory, made if missing; NULL with the reason on stderr. */
const char *test_servers_root_make(void);

/*
 * A random loopback TCP port in 10000..21999 on which nothing listens,
 * nor on port + 10000 (the cluster bus port): both can be bound, with
 * SO_REUSEADDR as redis-server binds them. Ports of servers this process
 * started and has not freed, running or not, are never returned, so a
 * killed server can be restarted on its port. Returns -1 after 1000 tries.
 */
int test_free_port(void);

/*
 * Fake servers on free loopback ports, each served by a thread, to test a
 * client against something that is not a working Redis:
 *
 * test_not_redis_start(): answers every connection, as soon as it sends
 * anything or after 100 ms of silence, with "HTTP/1.1 400 Bad Request\r\n
 * Content-Length: 0\r\nConnection: close\r\n\r\n" and closes its side (like
 * an nginx port); what the client sends is read and discarded.
 *
 * test_silent_start(): accepts connections, reads and discards what comes,
 * never answers (for timeout tests).
 *
 * Both return the port, or -1 with the reason on stderr. Up to 16 fake
 * servers at once, 128 connections each (more are closed on accept).
 * test_fake_server_stop() stops one by its port, test_fake_servers_stop()
 * all: their ports then refuse connections.
 */
int test_not_redis_start(void);
int test_silent_start(void);
void test_fake_server_stop(int port);
void test_fake_servers_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* RATEL_TEST_SERVERS_H */
