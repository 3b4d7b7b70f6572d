/*
 * mem_transport.c - the in-memory transport of the engine's tests
 * (mem_transport.h says how a test plays the network with it).
 */
#include "mem_transport.h"

#include "store/redis_url.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *mem_open(void *tud, ratel__link_t *link, const char *host,
                      int port, const ratel__tls_target_t *tls, char *why,
                      size_t whylen)
{
    mem_t *m = tud;
    mem_conn_t *c;

    (void)tls;
    if (m->refuse_open || m->nconns == MEM_MAX_CONNS) {
        snprintf(why, whylen, "refused by the test");
        return NULL;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    c->link = link;
    snprintf(c->host, sizeof c->host, "%s", host);
    c->port = port;
    m->conns[m->nconns++] = c;
    m->opens++;
    return c;
}

static void mem_send(void *tud, void *handle, const char *p, size_t n)
{
    mem_t *m = tud;
    mem_conn_t *c = handle;

    m->sends++;
    if (c->outlen + n > c->outcap) {
        size_t cap = c->outcap ? c->outcap : 256;
        char *out;
        while (cap < c->outlen + n)
            cap *= 2;
        out = realloc(c->out, cap);
        if (!out)
            abort(); /* a test's own failure, not the engine's */
        c->out = out;
        c->outcap = cap;
    }
    memcpy(c->out + c->outlen, p, n);
    c->outlen += n;
}

static void mem_close(void *tud, void *handle)
{
    mem_t *m = tud;
    mem_conn_t *c = handle;
    size_t i;

    for (i = 0; i < m->nconns && m->conns[i] != c; i++)
        ;
    if (i == m->nconns || c->closed) {
        m->bad_close++;
        return;
    }
    c->closed = 1;
    c->link = NULL;
    m->closes++;
}

static void mem_timer(void *tud, int64_t at_us)
{
    ((mem_t *)tud)->timer_at = at_us;
}

static void mem_defer(void *tud)
{
    ((mem_t *)tud)->deferred = 1;
}

static int64_t mem_now(void *tud)
{
    return ((mem_t *)tud)->now_us;
}

static char *errors_buf;
static size_t errors_len;

static void record_error(void *ud, const char *message)
{
    (void)ud;
    if (errors_buf)
        snprintf(errors_buf, errors_len, "%s", message);
}

int mem_shared_init(ratel__redis_shared_t *sh, ratel_health_t *health,
                    const char *url, ratel_redis_mode_t mode, char *errors,
                    size_t errlen)
{
    static const char library[] = "#!lua name=ratel\nreturn 1\n";
    static const char script[] = "return 1";

    memset(sh, 0, sizeof *sh);
    if (ratel__redis_url_parse(url, &sh->url, NULL, 0) != 0)
        return -1;
    ratel__health_init(health);
    pthread_mutex_init(&sh->sources_lock, NULL);
    sh->connect_timeout_ms = 1000;
    sh->command_timeout_ms = 200;
    sh->pool_size = 1;
    sh->mode = mode;
    sh->breaker_us = 500000;
    sh->username = sh->url.username;
    sh->password = sh->url.has_password ? sh->url.password : NULL;
    sh->db = sh->url.db;
    sh->library = library;
    sh->library_len = sizeof library - 1;
    sh->library_version = "1";
    sh->script = script;
    sh->script_len = sizeof script - 1;
    memset(sh->script_sha, 'a', 40);
    sh->error = record_error;
    sh->health = health;
    errors_buf = errors;
    errors_len = errlen;
    if (errors && errlen)
        errors[0] = '\0';
    return 0;
}

void mem_shared_free(ratel__redis_shared_t *sh, ratel_health_t *health)
{
    ratel__redis_health_sources_free(sh);
    pthread_mutex_destroy(&sh->sources_lock);
    ratel__health_destroy(health);
    errors_buf = NULL;
}

int mem_init(mem_t *m, const ratel__redis_shared_t *sh)
{
    memset(m, 0, sizeof *m);
    m->t = (ratel__transport_t){mem_open,  mem_send,  mem_close,
                                mem_timer, mem_defer, mem_now};
    m->timer_at = -1;
    m->now_us = 1000000;
    m->e = ratel__engine_new(sh, &m->hooks);
    if (!m->e)
        return -1;
    ratel__engine_set_transport(m->e, &m->t, m);
    return 0;
}

static int mem_loop_open(void *ctx, const ratel__loop_hooks_t *hooks,
                         void **tud)
{
    mem_t *m = ctx;

    m->hooks = *hooks;
    *tud = m;
    return 0;
}

void mem_init_loop(mem_t *m, ratel__async_loop_t *loop)
{
    memset(m, 0, sizeof *m);
    m->t = (ratel__transport_t){mem_open,  mem_send,  mem_close,
                                mem_timer, mem_defer, mem_now};
    m->timer_at = -1;
    m->now_us = 1000000;
    *loop = (ratel__async_loop_t){
        .transport = &m->t, .open = mem_loop_open, .close = NULL, .ctx = m};
}

void mem_free(mem_t *m)
{
    ratel__engine_free(m->e);
    m->e = NULL;
    for (size_t i = 0; i < m->nconns; i++) {
        free(m->conns[i]->out);
        free(m->conns[i]);
    }
    m->nconns = 0;
}

void mem_flush(mem_t *m)
{
    for (int i = 0; m->deferred && i < 1000; i++) {
        m->deferred = 0;
        m->hooks.flush(m->hooks.ud);
    }
}

void mem_advance(mem_t *m, int64_t us)
{
    m->now_us += us;
    if (m->timer_at >= 0 && m->timer_at <= m->now_us) {
        m->timer_at = -1;
        m->hooks.timer(m->hooks.ud);
    }
    mem_flush(m);
}

mem_conn_t *mem_conn(mem_t *m, size_t i)
{
    return i < m->nconns ? m->conns[i] : NULL;
}

mem_conn_t *mem_open_conn(mem_t *m, int port)
{
    for (size_t i = m->nconns; i-- > 0;)
        if (m->conns[i]->port == port && m->conns[i]->link)
            return m->conns[i];
    return NULL;
}

int mem_up(mem_t *m, mem_conn_t *c)
{
    if (!c || !c->link || c->up)
        return -1;
    c->up = 1;
    c->link->up(c->link);
    mem_flush(m);
    return 0;
}

int mem_data(mem_t *m, mem_conn_t *c, const char *p, size_t n)
{
    if (!c || !c->link || !c->up)
        return -1;
    c->link->data(c->link, p, n);
    mem_flush(m);
    return 0;
}

int mem_send_str(mem_t *m, mem_conn_t *c, const char *s)
{
    return mem_data(m, c, s, strlen(s));
}

int mem_down(mem_t *m, mem_conn_t *c, const char *why, int tls_error)
{
    ratel__link_t *link;

    if (!c || !c->link)
        return -1;
    link = c->link;
    c->link = NULL;
    c->closed = 2;
    link->down(link, why, tls_error);
    mem_flush(m);
    return 0;
}

/* A decimal number ended by CRLF at p[0..n): its value and length. */
static int number(const char *p, size_t n, long *v, size_t *used)
{
    size_t i = 0;

    *v = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9' && i < 12)
        *v = *v * 10 + (p[i++] - '0');
    if (i == 0 || i + 2 > n || p[i] != '\r' || p[i + 1] != '\n')
        return 0;
    *used = i + 2;
    return 1;
}

/* One RESP array of bulk strings at p[0..n): bytes used, 0: none whole. */
static size_t parse_command(const char *p, size_t n, char *buf, size_t len)
{
    size_t at = 1, used, w = 0;
    long argc, l;

    if (n < 1 || p[0] != '*' || !number(p + 1, n - 1, &argc, &used))
        return 0;
    at += used;
    if (len)
        buf[0] = '\0';
    for (long i = 0; i < argc; i++) {
        char word[80];
        if (at >= n || p[at] != '$' ||
            !number(p + at + 1, n - at - 1, &l, &used))
            return 0;
        at += 1 + used;
        if (at + (size_t)l + 2 > n)
            return 0;
        if (l > 60)
            snprintf(word, sizeof word, "<%ld bytes>", l);
        else
            snprintf(word, sizeof word, "%.*s", (int)l, p + at);
        at += (size_t)l + 2;
        if (w < len)
            w += (size_t)snprintf(buf + w, len - w, "%s%s", i ? " " : "", word);
    }
    return at;
}

int mem_next_command(mem_conn_t *c, char *buf, size_t len)
{
    size_t used =
        parse_command(c->out + c->read, c->outlen - c->read, buf, len);

    if (!used)
        return 0;
    c->read += used;
    return 1;
}

int mem_pending_commands(mem_conn_t *c)
{
    size_t at = c->read, used;
    int n = 0;
    char buf[8];

    while ((used = parse_command(c->out + at, c->outlen - at, buf, 0)) != 0) {
        at += used;
        n++;
    }
    return n;
}

int mem_expect(mem_conn_t *c, const char *want)
{
    char cmd[512];

    if (!c || !mem_next_command(c, cmd, sizeof cmd)) {
        fprintf(stderr, "  expected \"%s\", nothing sent\n", want);
        return 0;
    }
    if (strncmp(cmd, want, strlen(want)) != 0) {
        fprintf(stderr, "  expected \"%s\", sent \"%s\"\n", want, cmd);
        return 0;
    }
    return 1;
}

mem_conn_t *mem_ready(mem_t *m, int port)
{
    mem_conn_t *c = mem_open_conn(m, port);

    if (!c || mem_up(m, c) != 0 || !mem_expect(c, "PING") ||
        mem_send_str(m, c, "+PONG\r\n") != 0 ||
        !mem_expect(c, "COMMAND INFO ratel.acquire") ||
        mem_send_str(m, c, "*1\r\n*0\r\n") != 0)
        return NULL;
    return c;
}
