/*
 * server.c - an HTTP server's set-up and lifetime (new, run, stop, free)
 * and its door: accepting connections and counting them against
 * max_connections and max_connections_per_client (peers.c), refusing
 * past either with a 503. Each worker owns an event_base, a listening
 * socket per address bound with SO_REUSEPORT, an eventfd for stop() and
 * its connections; nothing is shared between workers but the connection
 * counts. worker.c runs a worker's loop; conn.c and h2.c are the
 * protocols it drives.
 */
#include "http/server_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_PAUSE_MS 100 /* out of descriptors: retry after */
/* The kernel keeps at most this much unsent per socket (TCP_NOTSENT_LOWAT:
   send() says EAGAIN past it). Without it a client that does not read
   lets the send buffer grow to megabytes, all answers generated for
   nobody. */
#define NOTSENT_LOWAT (16 << 10)

/* ------------------------------------------------------------- accept */

/* What each limit's 503 says ({"error": ...}); NULL: the status's usual
   text ("server busy: too many connections (limits.max_connections)"). */
static const char *const refusal_text[RATEL_HTTP_REFUSALS] = {
    [RATEL_HTTP_REFUSED_MAX_CONNECTIONS] = NULL,
    [RATEL_HTTP_REFUSED_PER_CLIENT] =
        "too many connections from this client address "
        "(limits.max_connections_per_client)",
};

static const char *const refusal_name[RATEL_HTTP_REFUSALS] = {
    [RATEL_HTTP_REFUSED_MAX_CONNECTIONS] = "max_connections",
    [RATEL_HTTP_REFUSED_PER_CLIENT] = "max_connections_per_client",
};

const char *ratel_http_refusal_name(ratel_http_refusal_t why)
{
    return (unsigned)why < RATEL_HTTP_REFUSALS ? refusal_name[why] : "unknown";
}

/*
 * Past max_connections (or the client's share): a 503 and close, without
 * a state machine; then the refused hook, on this worker's thread, so
 * that the program counts it and logs it (within its log budget: a
 * client opening connections in a loop must not flood the log).
 */
static void refuse(worker_t *w, int fd, ratel_http_refusal_t why,
                   const struct sockaddr_storage *ss)
{
    const ratel_http_options_t *o = &w->server->options;
    char buf[512], sink[1024], client[RATEL_HTTP_ADDR_MAX];
    size_t n =
        ratel__http_error_response(503, refusal_text[why], buf, sizeof buf);

    /* Read what already came, so that close() sends FIN, not RST. */
    for (int i = 0; i < 4 && recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0; i++)
        ;
    (void)!send(fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
    close(fd);
    if (o->refused) {
        ratel__address_host(ss, client, sizeof client);
        o->refused(o->ud, w->index, why, client);
    }
}

/*
 * Counts an accepted connection against max_connections and its
 * client's share. Returns 1, or 0 after refusing it (503 and close).
 */
static int admit(worker_t *w, int fd, const struct sockaddr_storage *ss,
                 socklen_t len, ratel__http_peer_key_t *key)
{
    ratel_http_server_t *server = w->server;

    key->counted = 0;
    if (atomic_fetch_add(&server->nconns, 1) >=
        server->options.limits.max_connections) {
        atomic_fetch_sub(&server->nconns, 1);
        refuse(w, fd, RATEL_HTTP_REFUSED_MAX_CONNECTIONS, ss);
        return 0;
    }
    if (server->peers &&
        !ratel__http_peers_acquire(server->peers, (const struct sockaddr *)ss,
                                   len, key)) {
        atomic_fetch_sub(&server->nconns, 1);
        refuse(w, fd, RATEL_HTTP_REFUSED_PER_CLIENT, ss);
        return 0;
    }
    return 1;
}

void ratel__http_on_accept(evutil_socket_t lfd, short what, void *arg)
{
    listener_t *l = arg;
    worker_t *w = l->w;
    ratel_http_server_t *server = w->server;
    int64_t now = ratel__http_now_ms();

    (void)what;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int one = 1, lowat = NOTSENT_LOWAT;
        ratel__http_peer_key_t key;
        sock_t *s;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                errno == ENOMEM) {
                /* Level-triggered: stop asking until the sweep. */
                for (unsigned i = 0; i < server->naddresses; i++)
                    if (w->listeners[i].fd >= 0)
                        event_del(&w->listeners[i].ev);
                w->accept_paused = 1;
                w->accept_resume_ms = now + ACCEPT_PAUSE_MS;
            }
            return;
        }
        if (!admit(w, fd, &ss, len, &key))
            continue;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof lowat);
        s = ratel__http_sock_new(w, l->addr->proto, fd, (struct sockaddr *)&ss,
                                 len, now);
        if (s) {
            s->peer = key;
        } else {
            atomic_fetch_sub(&server->nconns, 1);
            ratel__http_peers_release(server->peers, &key);
            close(fd);
        }
    }
}

/* ------------------------------------------------------------ set-up */

/* Lets another server have the addresses (safe from any thread). */
void ratel__http_release_claim(ratel_http_server_t *server)
{
    for (unsigned i = 0; i < server->naddresses; i++) {
        int fd = atomic_exchange(&server->addresses[i].claim_fd, -1);
        if (fd >= 0)
            close(fd);
    }
}

/* Adds an address to serve with `proto`: parsed and claimed. */
static int address_add(ratel_http_server_t *server, const char *text,
                       const ratel__http_proto_t *proto, char *err,
                       size_t errlen)
{
    address_t *a = &server->addresses[server->naddresses];

    atomic_store(&a->claim_fd, -1);
    if (ratel__parse_listen(text, &a->ss, &a->len, err, errlen) != 0)
        return -1;
    a->text = strdup(text);
    if (!a->text) {
        snprintf(err, errlen, "http server: out of memory");
        return -1;
    }
    a->proto = proto;
    server->naddresses++;
    if (ratel__port_of(&a->ss) != 0 &&
        ratel__claim_address(a, err, errlen) != 0)
        return -1;
    return 0;
}

/* Opens worker w's socket on address a; the first one learns the port
   the kernel chose for port 0, which the other workers then bind. */
static int listener_open(worker_t *w, listener_t *l, address_t *a, char *err,
                         size_t errlen)
{
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;

    l->w = w;
    l->addr = a;
    l->fd = ratel__open_listener(a->text, &a->ss, a->len, err, errlen);
    if (l->fd < 0)
        return -1;
    atomic_fetch_add(&w->server->listening, 1);
    if (a->port)
        return 0;
    getsockname(l->fd, (struct sockaddr *)&bound, &blen);
    if (bound.ss_family == AF_INET6) {
        uint16_t port = ((struct sockaddr_in6 *)&bound)->sin6_port;
        ((struct sockaddr_in6 *)&a->ss)->sin6_port = port;
        a->port = ntohs(port);
    } else {
        uint16_t port = ((struct sockaddr_in *)&bound)->sin_port;
        ((struct sockaddr_in *)&a->ss)->sin_port = port;
        a->port = ntohs(port);
    }
    return 0;
}

/* Whether ss is a wildcard address (0.0.0.0 or ::): every address of a
   port, so it overlaps any other of that port. */
static int wildcard(const struct sockaddr_storage *ss)
{
    static const struct in6_addr any6 = IN6ADDR_ANY_INIT;

    if (ss->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)ss)->sin6_addr, &any6,
                      sizeof any6) == 0;
    return ((const struct sockaddr_in *)ss)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
}

/* Whether a and b are one address or overlap (the same port on the same
   or a wildcard host): the second bind would fail. Port 0 never does. */
static int overlap(const struct sockaddr_storage *a,
                   const struct sockaddr_storage *b)
{
    char ta[INET6_ADDRSTRLEN + 8], tb[INET6_ADDRSTRLEN + 8];

    if (ratel__port_of(a) == 0 || ratel__port_of(a) != ratel__port_of(b))
        return 0;
    if (wildcard(a) || wildcard(b))
        return 1;
    ratel__address_text(a, ta, sizeof ta);
    ratel__address_text(b, tb, sizeof tb);
    return strcmp(ta, tb) == 0;
}

int ratel_http_server_check(const char *listen, const char *grpc_listen,
                            char *err, size_t errlen)
{
    struct sockaddr_storage a, b;
    socklen_t alen, blen;

    if (ratel__parse_listen(listen, &a, &alen, err, errlen) != 0)
        return -1;
    if (!grpc_listen)
        return 0;
    if (ratel__parse_listen(grpc_listen, &b, &blen, err, errlen) != 0)
        return -1;
    if (overlap(&a, &b)) {
        snprintf(err, errlen,
                 "listen %s and the gRPC address %s are one address; give "
                 "each a port of its own",
                 listen, grpc_listen);
        return -1;
    }
    return 0;
}

static int server_setup(ratel_http_server_t *server,
                        const ratel_http_options_t *options, char *err,
                        size_t errlen)
{
    if (ratel_http_server_check(options->listen, options->grpc_listen, err,
                                errlen) != 0)
        return -1;
    if (address_add(server, options->listen, &ratel__http1_proto, err,
                    errlen) != 0)
        return -1;
    if (options->grpc_listen && address_add(server, options->grpc_listen,
                                            &ratel__h2_proto, err, errlen) != 0)
        return -1;
    for (unsigned i = 0; i < server->nworkers; i++) {
        worker_t *w = &server->workers[i];
        w->server = server;
        for (unsigned j = 0; j < server->naddresses; j++)
            if (listener_open(w, &w->listeners[j], &server->addresses[j], err,
                              errlen) != 0)
                return -1;
        if (ratel__http_worker_init(w, server, i, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int ratel_http_server_new(ratel_http_server_t **out,
                          const ratel_http_options_t *options, char *err,
                          size_t errlen)
{
    ratel_http_server_t *server;
    char dummy[8];

    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    *out = NULL;
    if (!options || !options->handler ||
        (options->grpc_listen && !options->grpc_handler)) {
        snprintf(err, errlen, "http server: a handler is required");
        return -1;
    }
    server = calloc(1, sizeof *server);
    if (!server) {
        snprintf(err, errlen, "http server: out of memory");
        return -1;
    }
    server->options = *options;
    ratel__http_limits_fill(&server->options.limits, &options->limits);
    server->nworkers = options->threads ? options->threads : 1;
    if (server->options.limits.max_connections_per_client) {
        server->peers = ratel__http_peers_new(
            server->options.limits.max_connections,
            server->options.limits.max_connections_per_client);
        if (!server->peers) {
            snprintf(err, errlen, "http server: out of memory");
            ratel_http_server_free(server);
            return -1;
        }
    }
    server->workers = calloc(server->nworkers, sizeof *server->workers);
    if (!server->workers) {
        snprintf(err, errlen, "http server: out of memory");
        ratel_http_server_free(server);
        return -1;
    }
    for (unsigned i = 0; i < server->nworkers; i++) {
        server->workers[i].stop_fd = -1;
        for (unsigned j = 0; j < MAX_ADDRESSES; j++)
            server->workers[i].listeners[j].fd = -1;
    }
    if (server_setup(server, options, err, errlen) != 0) {
        ratel_http_server_free(server);
        return -1;
    }
    server->options.listen = server->addresses[0].text;
    server->options.grpc_listen =
        server->naddresses > 1 ? server->addresses[1].text : NULL;
    *out = server;
    return 0;
}

int ratel_http_server_port(const ratel_http_server_t *server)
{
    return server->addresses[0].port;
}

struct event_base *ratel_http_server_base(ratel_http_server_t *server,
                                          unsigned thread)
{
    return thread < server->nworkers ? server->workers[thread].base : NULL;
}

int ratel_http_server_grpc_port(const ratel_http_server_t *server)
{
    return server->naddresses > 1 ? server->addresses[1].port : 0;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;

    event_base_dispatch(w->base);
    return NULL;
}

int ratel_http_server_run(ratel_http_server_t *server)
{
    sigset_t all, old;
    int rc = 0;

    if (server->running)
        return -1;
    server->running = 1;
    /* Signals go to the caller's thread, not to the workers. */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    for (unsigned i = 1; i < server->nworkers; i++) {
        worker_t *w = &server->workers[i];
        if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            rc = -1;
            break;
        }
        w->started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        ratel_http_server_stop(server, 0);
    worker_main(&server->workers[0]);
    for (unsigned i = 1; i < server->nworkers; i++) {
        if (server->workers[i].started)
            pthread_join(server->workers[i].tid, NULL);
        server->workers[i].started = 0;
    }
    return rc;
}

void ratel_http_server_stop(ratel_http_server_t *server, unsigned drain_ms)
{
    uint64_t one = 1;

    atomic_store(&server->drain_ms, drain_ms);
    for (unsigned i = 0; i < server->nworkers; i++)
        if (server->workers[i].stop_fd >= 0)
            (void)!write(server->workers[i].stop_fd, &one, sizeof one);
}

void ratel_http_server_free(ratel_http_server_t *server)
{
    if (!server)
        return;
    for (unsigned i = 0; server->workers && i < server->nworkers; i++)
        ratel__http_worker_free(&server->workers[i]);
    free(server->workers);
    ratel__http_peers_free(server->peers);
    ratel__http_release_claim(server);
    for (unsigned i = 0; i < server->naddresses; i++)
        free(server->addresses[i].text);
    free(server);
}
