/*
 * fuzz_captcha_config.c - captchad's configuration parser
 * (captchad/captcha_config.c) on arbitrary bytes.
 *
 * Two views of one input:
 *
 *   1. the whole input as a file (captcha_config_parse with its length, so
 *      NULs and invalid UTF-8 reach libyaml);
 *   2. its bytes as choices among line fragments (fields, values, near
 *      misses) assembled into a file, so that loaded configurations, which
 *      byte mutations of YAML rarely produce, are checked often.
 *
 * Invariants (a violation aborts):
 *
 *   - the parse returns 0 or -1, the same on a second parse;
 *   - on -1, *out is NULL and the message is "fuzz.yaml:LINE: ..." with
 *     LINE >= 1, identical on the second parse;
 *   - on 0, every field is in its documented range: code length 4..10,
 *     TTL, attempts, entries, queue size, threads, the resend age, the
 *     HTTP limits, 1..8 rules per policy that ratel_policy_init accepts
 *     again, a webhook URL exactly when the
 *     sender is a webhook, a Redis URL exactly when the store is Redis.
 *
 * The parser is compiled in (it is one file of the example, not a library)
 * so that this target links like the others, here and under
 * tests/fuzz/libfuzzer.sh.
 */
#include "captchad/captcha_config.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.yaml"

#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr,                                                    \
                    "fuzz_captcha_config: %s:%d: invariant broken: %s\n",      \
                    __FILE__, __LINE__, #cond);                                \
            abort();                                                           \
        }                                                                      \
    } while (0)

static void check_loaded(const captcha_config_t *c)
{
    char err[512];
    ratel_http_listen_t listen;

    ASSERT(memchr(c->listen, '\0', sizeof c->listen));
    ASSERT(ratel_http_listen_parse(c->listen, &listen, err, sizeof err) == 0);
    ASSERT(c->threads >= 1 && c->threads <= 256);
    ASSERT(c->code_length >= CAPTCHA_CODE_MIN_LEN &&
           c->code_length <= CAPTCHA_CODE_MAX_LEN);
    ASSERT(c->code_ttl_ms >= 100 && c->code_ttl_ms <= 86400000);
    ASSERT(c->code_max_attempts >= 1 && c->code_max_attempts <= 100);
    ASSERT(c->code_max_entries >= 16);
    ASSERT(c->queue_size >= 1 && c->queue_size <= 1000000);
    ASSERT(c->webhook_timeout_ms >= 1);
    ASSERT(c->trusted.n <= RATEL__TRUSTED_MAX);
    ASSERT(c->sqlite_path[0] && c->log_file[0]);
    ASSERT(!strchr(c->admin_token, ' '));
    ASSERT(c->resend_max_age_ms >= 0 && c->resend_max_age_ms <= 86400000);
    ASSERT(c->limits.max_body_bytes <= 16777216);
    ASSERT(c->limits.max_pipeline <= 1024);
    for (int i = 0; i < CAPTCHA_POLICIES; i++) {
        ratel_policy_t again;
        ASSERT(c->policies[i].nrules >= 1 &&
               c->policies[i].nrules <= RATEL_MAX_RULES);
        ASSERT(ratel_policy_init(&again, c->policies[i].rules,
                                 c->policies[i].nrules, err, sizeof err) == 0);
    }
    ASSERT((c->sender == CAPTCHA_SENDER_WEBHOOK) ==
           (c->webhook_url[0] != '\0'));
    ASSERT(c->store_redis == 0 || c->store_redis == 1);
    ASSERT(c->store_redis == !strncmp(c->redis_url, "redis://", 8));
    /* Redis options exist for a Redis store only (as rateld's). */
    ASSERT(c->store_redis ? c->redis.url == c->redis_url
                          : c->redis.url == NULL);
}

static void parse_twice(const char *text, size_t len)
{
    captcha_config_t *a = NULL, *b = NULL;
    char e1[600], e2[600];
    int r1, r2;

    e1[0] = e2[0] = '\0';
    r1 = captcha_config_parse(text, len, NAME, &a, e1, sizeof e1);
    r2 = captcha_config_parse(text, len, NAME, &b, e2, sizeof e2);
    ASSERT(r1 == 0 || r1 == -1);
    ASSERT(r1 == r2);
    if (r1 == 0) {
        ASSERT(a && b);
        check_loaded(a);
    } else {
        ASSERT(!a && !b);
        ASSERT(!strncmp(e1, NAME ":", sizeof NAME));
        ASSERT(atoi(e1 + sizeof NAME) >= 1);
        ASSERT(!strcmp(e1, e2));
    }
    captcha_config_free(a);
    captcha_config_free(b);
}

/* Lines a file is assembled from; indented ones belong to the section
   before them, or make near misses where they land elsewhere. */
static const char *const fragments[] = {
    "listen: 127.0.0.1:8090\n",
    "listen: nowhere\n",
    "threads: 4\n",
    "threads: 0\n",
    "admin_token: \"tok\"\n",
    "admin_token: \"tok-tok-tok-tok-tok-tok-tok-tok-tok\"\n",
    "admin_token: \"a b\"\n",
    "trusted_proxies: [127.0.0.1, 10.0.0.0/8]\n",
    "trusted_proxies: [10.0.0.1/8]\n",
    "limits:\n  max_body_bytes: 4KiB\n",
    "limits:\n  max_body_bytes: 0\n  max_pipeline: 8\n",
    "http:\n  max_body_bytes: 4KiB\n",
    "store:\n  type: memory\n  max_bytes: 1MiB\n",
    "store:\n  type: redis\n  url: redis://127.0.0.1:6379\n",
    "store:\n  type: redis\n",
    "  on_failure: local\n",
    "  timeout_ms: 100\n",
    "code_length: 6\n",
    "code_length: 11\n",
    "code_ttl_ms: 1000\n",
    "code_max_attempts: 5\n",
    "code_max_entries: 16\n",
    "code_max_entries: 15\n",
    "policies:\n",
    "limits:\n",
    "  send_phone: [1/60s, 5/1h, 10/1d]\n",
    "  send_ip: 20/1h\n",
    "  verify_phone: []\n",
    "  verify_ip: [50/1h, 50/1h]\n",
    "  login_user: [\"3/1m:gcra,burst=3\"]\n",
    "  nope: [1/1s]\n",
    "sender:\n  type: log\n  log_file: x.log\n",
    "sender:\n  type: webhook\n  url: http://127.0.0.1:9/sms\n",
    "sender:\n  type: webhook\n  url: ftp://x\n",
    "  queue_size: 8\n",
    "  resend_max_age_ms: 0\n",
    "  timeout_ms: 50\n",
    "sqlite_path: n.db\n",
    "sqlite_path: \"\"\n",
    "unknown: 1\n",
    "- item\n",
    "&a x: *a\n",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t nf = sizeof fragments / sizeof fragments[0], len = 0;
    char *text;

    parse_twice((const char *)data, size);
    text = malloc(size * 64 + 1);
    if (!text)
        return 0;
    for (size_t i = 0; i < size && i < 64; i++) {
        const char *f = fragments[data[i] % nf];
        size_t n = strlen(f);
        memcpy(text + len, f, n);
        len += n;
    }
    parse_twice(text, len);
    free(text);
    return 0;
}
