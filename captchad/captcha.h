/*
 * captcha.h - captchad, the SMS verification-code service built on
 * libratel: the shared state of its parts.
 *
 *   captcha_config.c    the YAML file (server/app's readers, FILE:LINE errors)
 *   captcha_codes.c     the code store: memory (bounded, TTL) or Redis
 *   captcha_notices.c   the notice table in SQLite
 *   captcha_sender.c    the bounded queue, the worker thread, the senders
 *                       (log file, webhook via libcurl)
 *   captcha_handlers.c  the HTTP endpoints: each store call a callback
 *                       on the worker's loop (the worker never waits)
 *   captcha_metrics.c   /metrics
 *   captcha_main.c      arguments, startup, signals, shutdown
 *
 * The rate limits live in a ratel store (memory or Redis): one policy per
 * key kind (phone, client IP, user), each applied all-or-nothing, and a
 * request that touches two keys refunds the first when the second denies.
 * Codes are not rate-limit state: they live in the code store.
 */
#ifndef CAPTCHA_H
#define CAPTCHA_H

#include "app/address.h"
#include "app/log.h"
#include "app/phone.h"
#include "app/watch.h"
#include "http/http.h"
#include "ratel.h"
#include "ratel_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define CAPTCHA_VERSION RATEL_VERSION

/* A number as captchad keys, stores and sends it: its E.164 form
   (app/phone.h), NUL. */
#define CAPTCHA_PHONE_MAX 24
_Static_assert(CAPTCHA_PHONE_MAX == sizeof(((ratel__phone_t *)0)->e164),
               "a number's E.164 form fits CAPTCHA_PHONE_MAX");
/* Code length bounds; the code's text with its NUL fits CAPTCHA_CODE_MAX. */
#define CAPTCHA_CODE_MIN_LEN 4
#define CAPTCHA_CODE_MAX_LEN 10
#define CAPTCHA_CODE_MAX (CAPTCHA_CODE_MAX_LEN + 1)
/* Longest user name the login endpoints accept. */
#define CAPTCHA_USER_MAX 128

/* -------------------------------------------------------------- config */

typedef enum captcha_sender_kind_e {
    CAPTCHA_SENDER_LOG = 0, /* append to a file (trying it out) */
    CAPTCHA_SENDER_WEBHOOK  /* HTTP POST to an SMS gateway */
} captcha_sender_kind_t;

/* The rate-limit policies (`policies:`), each applied to one kind of
   key. */
typedef enum captcha_policy_e {
    CAPTCHA_SEND_PHONE = 0,
    CAPTCHA_SEND_IP,
    CAPTCHA_VERIFY_PHONE,
    CAPTCHA_VERIFY_IP,
    CAPTCHA_LOGIN_USER,
    CAPTCHA_POLICIES
} captcha_policy_t;

typedef struct captcha_config_s {
    char listen[256];           /* default 127.0.0.1:8090 */
    unsigned threads;           /* HTTP workers, default 2 */
    ratel_http_limits_t limits; /* `limits:` HTTP sizes and times, as in
                                   rateld; max_body_bytes default 16 KiB */
    char admin_token[256];      /* "": /notices always 403 */
    ratel__trusted_t trusted;   /* trusted_proxies */
    int store_redis;            /* store.type: 0 memory, 1 redis */
    /* store.max_bytes (default 64 MiB) and the snapshot settings */
    ratel__memory_settings_t memory;
    ratel_redis_options_t redis; /* url points into redis_url */
    char redis_url[1024];
    unsigned code_length;       /* 4..10, default 6 */
    int64_t code_ttl_ms;        /* default 300,000 */
    unsigned code_max_attempts; /* wrong guesses before invalidation, 5 */
    size_t code_max_entries;    /* memory code store bound, 100,000 */
    ratel_policy_t policies[CAPTCHA_POLICIES]; /* `policies:` */
    captcha_sender_kind_t sender;
    char log_file[512];          /* sender.log_file, default captcha-sms.log */
    char webhook_url[1024];      /* sender.url */
    unsigned webhook_timeout_ms; /* sender.timeout_ms, default 5,000 */
    unsigned queue_size;         /* sender.queue_size, default 1,024 */
    int64_t resend_max_age_ms;   /* sender.resend_max_age_ms: notices a
                                    crash left unsent younger than this
                                    are sent at start-up, older ones
                                    FAILED and refunded; default
                                    code_ttl_ms */
    char sqlite_path[512];       /* default captchad.db */
    char phone_region[4];        /* phone_region: the region of numbers
                                    written without a country code,
                                    default CN; "": + numbers only */
} captcha_config_t;

/*
 * Reads and checks the YAML file at `path`. Returns 0 with *out (free with
 * captcha_config_free), or -1 with "PATH:LINE: reason" in err.
 */
int captcha_config_load(const char *path, captcha_config_t **out, char *err,
                        size_t errlen);
/* The same from `len` bytes of text; `name` names the file in messages. */
int captcha_config_parse(const char *text, size_t len, const char *name,
                         captcha_config_t **out, char *err, size_t errlen);
void captcha_config_free(captcha_config_t *config);

/* Names of the policies as the config spells them ("send_phone", ...);
   also the policy names of the RateLimit fields and of the store's keys. */
extern const char *const captcha_policy_names[CAPTCHA_POLICIES];

/* ---------------------------------------------------------- code store */

typedef struct captcha_codes_s captcha_codes_t;

typedef struct captcha_codes_stats_s {
    uint64_t entries;     /* codes held now (memory; Redis: not counted) */
    uint64_t max_entries; /* the bound (memory) */
    uint64_t expirations; /* codes dropped at their TTL */
    uint64_t evictions;   /* live codes dropped to stay within the bound */
    uint64_t errors;      /* Redis calls that failed */
} captcha_codes_stats_t;

/* Verification results. */
#define CAPTCHA_CODE_OK 1      /* the code matched and is now used up */
#define CAPTCHA_CODE_INVALID 0 /* wrong, expired, never sent, used up */

/*
 * A memory code store of at most `max_entries` codes: when full, expired
 * codes go first, then the oldest. Thread-safe. 0 or RATEL_ENOMEM.
 */
int captcha_codes_memory_new(captcha_codes_t **out, size_t max_entries,
                             unsigned max_attempts);

/*
 * A Redis code store at `url` (redis:// or rediss://, one primary, TLS
 * settings in its query as for the rate limits): a hash per phone
 * `captcha:code:{PHONE}` with fields code and attempts, PEXPIRE = TTL.
 * Connects lazily; 0, RATEL_ENOMEM, or RATEL_EINVAL with a message in
 * err.
 */
int captcha_codes_redis_new(captcha_codes_t **out, const char *url,
                            int timeout_ms, unsigned max_attempts, char *err,
                            size_t errlen);

/* HTTP worker `thread`'s own Redis connection, on its loop (`base`), for
   the _async calls; nothing for a memory store. 0 or RATEL_ENOMEM. */
int captcha_codes_attach(captcha_codes_t *c, unsigned thread,
                         struct event_base *base);
/* Frees the workers' connections, their pending calls told (RATEL_EIO),
   once the loops have stopped. */
void captcha_codes_detach(captcha_codes_t *c);

/* Stores `code` for `phone` until now_ms + ttl_ms, replacing an earlier
   code and its attempts. 0, RATEL_ENOMEM or RATEL_EIO. */
int captcha_codes_put(captcha_codes_t *c, const char *phone, const char *code,
                      int64_t now_ms, int64_t ttl_ms);

/*
 * Checks `code` (constant time) against the code held for `phone`: on a
 * match the code is consumed (exactly one of concurrent verifiers wins);
 * a wrong guess counts an attempt, and the max_attempts-th wrong guess
 * invalidates the code. CAPTCHA_CODE_OK, CAPTCHA_CODE_INVALID or
 * RATEL_EIO.
 */
int captcha_codes_verify(captcha_codes_t *c, const char *phone,
                         const char *code, int64_t now_ms);

/* Drops `phone`'s code if it is still `code` (a send that failed). */
int captcha_codes_discard(captcha_codes_t *c, const char *phone,
                          const char *code);

/*
 * The same calls from HTTP worker `thread`, never waiting for Redis: `fn`
 * gets what the call returns (for a memory store, at once), on the
 * worker's loop; a Redis that does not answer within timeout_ms gets
 * RATEL_EIO. The strings are copied.
 */
typedef void captcha_codes_fn(void *ud, int rc);
void captcha_codes_put_async(captcha_codes_t *c, unsigned thread,
                             const char *phone, const char *code,
                             int64_t now_ms, int64_t ttl_ms,
                             captcha_codes_fn *fn, void *ud);
void captcha_codes_verify_async(captcha_codes_t *c, unsigned thread,
                                const char *phone, const char *code,
                                int64_t now_ms, captcha_codes_fn *fn, void *ud);
void captcha_codes_discard_async(captcha_codes_t *c, unsigned thread,
                                 const char *phone, const char *code);

void captcha_codes_stats(captcha_codes_t *c, captcha_codes_stats_t *out);
void captcha_codes_free(captcha_codes_t *c);

/* A code of `len` digits from getrandom() into out (len + 1 bytes), with
   no modulo bias. 0, or -1 when getrandom fails. */
int captcha_code_new(unsigned len, char *out);

/* Constant-time equality of two NUL-terminated codes (length leaks only
   whether the lengths differ). */
int captcha_code_equal(const char *a, const char *b);

/* ------------------------------------------------------------- notices */

typedef struct captcha_notices_s captcha_notices_t;

/* Opens (creating if needed) the SQLite database at `path`. 0 or -1. */
int captcha_notices_open(captcha_notices_t **out, const char *path, char *err,
                         size_t errlen);
/* Records a notice in state INIT for `target`, asked for by client
   address `ip`; its id into *id. 0 or -1. */
int captcha_notices_add(captcha_notices_t *n, const char *target,
                        const char *ip, const char *content, int64_t now_ms,
                        int64_t *id);

/* A notice a previous process left in INIT (never SUCCESS or FAILED). */
typedef struct captcha_stranded_s {
    int64_t id;
    int64_t created_ms;
    char target[CAPTCHA_PHONE_MAX];
    char ip[RATEL__ADDR_MAX]; /* "" for rows written before ip existed */
} captcha_stranded_t;

/* Every notice in INIT, oldest first, into a malloc'd *out (free());
   their number in *count. 0 or -1. */
int captcha_notices_stranded(captcha_notices_t *n, captcha_stranded_t **out,
                             size_t *count);
/* The provider's answer: SUCCESS (ok) or FAILED, with its text. */
int captcha_notices_finish(captcha_notices_t *n, int64_t id, int ok,
                           const char *result, int64_t now_ms);
/* The newest `max` notices of `target` as a JSON array (malloc'd). */
char *captcha_notices_json(captcha_notices_t *n, const char *target,
                           unsigned max);
void captcha_notices_close(captcha_notices_t *n);

/* -------------------------------------------------------------- sender */

typedef struct captcha_s captcha_t;
typedef struct captcha_sender_s captcha_sender_t;

/* One message for the worker. */
typedef struct captcha_job_s {
    int64_t notice_id;
    char phone[CAPTCHA_PHONE_MAX];
    char code[CAPTCHA_CODE_MAX];
    char ip[RATEL__ADDR_MAX];
} captcha_job_t;

/* Starts the worker thread. 0 or -1 with a message. */
int captcha_sender_start(captcha_sender_t **out, captcha_t *app, char *err,
                         size_t errlen);
/* Queues a copy of `job`; -1 when the queue is full. */
int captcha_sender_enqueue(captcha_sender_t *s, const captcha_job_t *job);
/* Jobs waiting. */
unsigned captcha_sender_depth(captcha_sender_t *s);
/* Sends what is queued, stops the worker and frees. NULL is a no-op. */
void captcha_sender_stop(captcha_sender_t *s);

/* The text of the SMS ("Your code is 123456, valid 5 minutes"); `code`
   NULL writes the masked text. */
void captcha_message(const captcha_config_t *c, const char *code, char *buf,
                     size_t len);

/* ------------------------------------------------------------- the app */

enum {
    SEND_ACCEPTED,
    SEND_LIMITED,
    SEND_INVALID,
    SEND_QUEUE_FULL,
    SEND_ERROR,
    SEND_OUTCOMES
};
enum {
    VERIFY_SUCCESS,
    VERIFY_INVALID,
    VERIFY_LIMITED,
    VERIFY_BAD_REQUEST,
    VERIFY_ERROR,
    VERIFY_OUTCOMES
};
enum { SENDER_SUCCESS, SENDER_FAILURE, SENDER_RESULTS };
/* Why a telephone number was refused (captcha_phone_refused_total). */
enum { PHONE_UNPARSABLE, PHONE_INVALID, PHONE_PREMIUM, PHONE_REFUSALS };
/* Log lines any client can cause at will, each kind through a log budget
   (app/log.h: one line per kind per 10 s on each HTTP thread, with how
   many were not written): a send refused by each policy, a wrong code,
   a send or a verify the store failed (every request, while it is down). */
enum {
    QUIET_SEND_LIMITED = 0,
    QUIET_VERIFY_REFUSED = CAPTCHA_POLICIES,
    QUIET_SEND_FAILED,
    QUIET_VERIFY_FAILED,
    QUIET_REFUSED, /* + ratel_http_refusal_t: a connection refused */
    QUIET_KINDS = QUIET_REFUSED + RATEL_HTTP_REFUSALS
};
enum { RECOVER_RESENT, RECOVER_FAILED, RECOVER_ACTIONS };

struct captcha_s {
    captcha_config_t *config;
    ratel_store_t *store;
    ratel__watch_t *watch; /* logs the store's outages and warnings */
    captcha_codes_t *codes;
    captcha_notices_t *notices;
    captcha_sender_t *sender;
    ratel_http_server_t *http;
    _Atomic uint64_t sends[SEND_OUTCOMES];
    _Atomic uint64_t verifies[VERIFY_OUTCOMES];
    _Atomic uint64_t sender_results[SENDER_RESULTS];
    _Atomic uint64_t refunds, refund_errors;
    _Atomic uint64_t recovered[RECOVER_ACTIONS];
    _Atomic uint64_t login_failures, login_limited;
    _Atomic uint64_t phone_refused[PHONE_REFUSALS]; /* send and verify */
    _Atomic uint64_t refused[RATEL_HTTP_REFUSALS];  /* connections, by limit */
    /* Per HTTP thread (config->threads of them): the budgets of the lines
       a client causes, indexed QUIET_SEND_LIMITED + policy or another
       QUIET_ kind. NULL: every line is written. */
    ratel__log_budget_t (*log_budgets)[QUIET_KINDS];
    /* Per HTTP thread: the store's calls on that worker's loop. */
    ratel_async_t **asyncs;
    /* Set once the HTTP server has stopped: a store call still pending
       is told, and nothing is answered any more. */
    _Atomic int stopping;
};

/* The HTTP server's refused hook (ud is captcha_t): counts the
   connection and logs it within the budget. */
void captcha_refused(void *ud, unsigned thread, ratel_http_refusal_t why,
                     const char *client);

/* /metrics: Prometheus text of the counters. */
void captcha_metrics(captcha_t *app, ratel_http_exchange_t *ex);

/* The HTTP handler (ud is captcha_t). */
void captcha_handle(void *ud, ratel_http_exchange_t *ex,
                    const ratel_http_request_t *req);

/*
 * Gives back the send permits of `phone` and `ip` (the provider failed
 * or a crash stranded it: the sender thread and start-up, which may wait
 * for the store; a worker gives back through its loop), so that our
 * failure does not lock a user out; `ip` "" gives back the phone's only.
 * Returns 0, or -1 when the store did not take a refund (logged and
 * counted).
 */
int captcha_refund_send(captcha_t *app, const char *phone, const char *ip);

/*
 * Start-up reconciliation, before the HTTP server takes requests: every
 * notice a previous process left in INIT (answered 202, never delivered
 * or failed: the process died) is re-sent with a new code when younger
 * than sender.resend_max_age_ms, else marked FAILED with its send permits
 * refunded. Counts each action (captcha_recovered_notices_total) and logs
 * one summary line. 0, or -1 when the notices cannot be read.
 */
int captcha_sender_recover(captcha_t *app);

#endif /* CAPTCHA_H */
