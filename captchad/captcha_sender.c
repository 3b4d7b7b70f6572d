/*
 * captcha_sender.c - delivering codes without making the HTTP answer wait
 * for an SMS gateway: /captcha/send queues a job and answers at once; one
 * worker thread takes jobs in order, hands each to the configured sender,
 * and records the provider's answer on the notice row.
 *
 * A crash (kill -9, power loss) leaves the notices of queued jobs in INIT:
 * at the next start captcha_sender_recover() re-sends the young ones and
 * fails and refunds the others, so none stays INIT forever.
 *
 * The queue is a fixed ring of queue_size jobs: when the gateway is slow
 * and the ring is full, a send is refused with 503 (and its permits
 * refunded) instead of memory growing without bound. When a sender fails,
 * the notice becomes FAILED, the code is dropped and the send permits are
 * refunded, so a user is not locked out for 60 s by our failure.
 *
 * Senders:
 *   log      appends "TIMESTAMP<TAB>TELEPHONE<TAB>MESSAGE" to a file
 *   webhook  POSTs {"telephone", "message", "code"} as JSON with libcurl
 *            (Debian's libcurl4-openssl-dev): 2xx is success; any other
 *            status, a refused connection or the timeout is failure
 */
#include "captchad/captcha.h"

#include "app/file.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct captcha_sender_s {
    captcha_t *app;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t ready;
    captcha_job_t *ring;
    unsigned cap, head, count;
    int stopping;
};

void captcha_message(const captcha_config_t *c, const char *code, char *buf,
                     size_t len)
{
    char masked[CAPTCHA_CODE_MAX];
    int64_t ttl = c->code_ttl_ms;

    if (!code) {
        memset(masked, '*', c->code_length);
        masked[c->code_length] = '\0';
        code = masked;
    }
    if (ttl >= 60000 && ttl % 60000 == 0)
        snprintf(buf, len, "Your code is %s, valid %lld minute%s", code,
                 (long long)(ttl / 60000), ttl == 60000 ? "" : "s");
    else
        snprintf(buf, len, "Your code is %s, valid %lld second%s", code,
                 (long long)((ttl + 999) / 1000), ttl <= 1000 ? "" : "s");
}

/* ---------------------------------------------------------------- senders */

static int send_log(captcha_t *app, const captcha_job_t *job, char *result,
                    size_t len)
{
    char msg[160], when[40], why[512];
    struct timespec ts;
    struct tm tm;
    FILE *f;
    int bad, fd;

    captcha_message(app->config, job->code, msg, sizeof msg);
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    /* The file holds live codes: created 0600, never through a link. */
    fd = ratel__file_open_private(app->config->log_file, O_WRONLY | O_APPEND,
                                  "the SMS log", why, sizeof why);
    f = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        else
            ratel__log("error", "cannot open the SMS log", "reason=\"%s\"",
                       why);
        snprintf(result, len, "log: cannot open %.200s", app->config->log_file);
        return 0;
    }
    fprintf(f, "%s.%03ldZ\t%s\t%s\n", when, ts.tv_nsec / 1000000, job->phone,
            msg);
    bad = ferror(f);
    bad |= fclose(f) != 0;
    snprintf(result, len, bad ? "log: write failed" : "log: written");
    return !bad;
}

/* libcurl hands the gateway's answer here; it is not kept. */
static size_t discard_body(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

static int send_webhook(captcha_t *app, const captcha_job_t *job, char *result,
                        size_t len)
{
    char msg[160];
    struct curl_slist *headers = NULL;
    cJSON *o = cJSON_CreateObject();
    char *body = NULL;
    long status = 0;
    CURLcode rc = CURLE_OUT_OF_MEMORY;
    CURL *curl = curl_easy_init();

    captcha_message(app->config, job->code, msg, sizeof msg);
    if (o && cJSON_AddStringToObject(o, "telephone", job->phone) &&
        cJSON_AddStringToObject(o, "message", msg) &&
        cJSON_AddStringToObject(o, "code", job->code))
        body = cJSON_PrintUnformatted(o);
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (curl && body && headers) {
        curl_easy_setopt(curl, CURLOPT_URL, app->config->webhook_url);
        curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                         (long)app->config->webhook_timeout_ms);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_body);
        rc = curl_easy_perform(curl);
        if (rc == CURLE_OK)
            curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    }
    if (rc != CURLE_OK)
        snprintf(result, len, "webhook: %s", curl_easy_strerror(rc));
    else
        snprintf(result, len, "webhook: HTTP %ld", status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    free(body);
    cJSON_Delete(o);
    return rc == CURLE_OK && status >= 200 && status < 300;
}

/* Delivers one job and records what happened. */
static void deliver(captcha_t *app, const captcha_job_t *job)
{
    char result[300];
    int64_t start = ratel_clock_now_us();
    int ok = app->config->sender == CAPTCHA_SENDER_WEBHOOK
                 ? send_webhook(app, job, result, sizeof result)
                 : send_log(app, job, result, sizeof result);
    int64_t end = ratel_clock_now_us();

    if (!ok) {
        /* Our failure, not the user's: the code goes, the permits come
           back, before the row says FAILED (whoever sees FAILED can send
           again). */
        captcha_codes_discard(app->codes, job->phone, job->code);
        captcha_refund_send(app, job->phone, job->ip);
    }
    captcha_notices_finish(app->notices, job->notice_id, ok, result,
                           end / 1000);
    atomic_fetch_add(&app->sender_results[ok ? SENDER_SUCCESS : SENDER_FAILURE],
                     1);
    if (ok) {
        ratel__log("info", "sent", "notice=%lld ms=%lld result=\"%s\"",
                   (long long)job->notice_id, (long long)(end - start) / 1000,
                   result);
        return;
    }
    ratel__log("warn", "send failed, permits refunded",
               "notice=%lld ms=%lld result=\"%s\"", (long long)job->notice_id,
               (long long)(end - start) / 1000, result);
}

static void *worker(void *arg)
{
    captcha_sender_t *s = arg;
    captcha_job_t job;

    for (;;) {
        pthread_mutex_lock(&s->lock);
        while (s->count == 0 && !s->stopping)
            pthread_cond_wait(&s->ready, &s->lock);
        if (s->count == 0) { /* stopping, and the queue is drained */
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        job = s->ring[s->head];
        s->head = (s->head + 1) % s->cap;
        s->count--;
        pthread_mutex_unlock(&s->lock);
        deliver(s->app, &job);
        memset(&job, 0, sizeof job); /* no code left on the stack */
    }
}

/*
 * One notice a previous process left in INIT. A young one gets a new code
 * (its old one never reached the user, and a memory code store died with
 * that process) and goes back on the queue, keeping the permits it was
 * charged. An old one, or a young one that cannot be queued, has its send
 * permits refunded and becomes FAILED. Returns RECOVER_RESENT or
 * RECOVER_FAILED; *refunded says whether the store took the refund.
 */
static int recover_one(captcha_t *app, const captcha_stranded_t *st,
                       int64_t now_ms, int *refunded)
{
    const captcha_config_t *c = app->config;
    const char *why = "not sent: captchad stopped before sending; failed "
                      "at the next start, permits refunded";
    const char *phone = st->target;
    captcha_job_t job;
    ratel__phone_t p;

    *refunded = 0;
    /* A row from before numbers were kept in E.164 (a mainland number as
       its 11 digits) is sent to and refunded as a send now keys it. */
    if (ratel__phone_parse(phone, strlen(phone), c->phone_region, &p) == 0)
        phone = p.e164;
    if (now_ms - st->created_ms < c->resend_max_age_ms) {
        memset(&job, 0, sizeof job);
        job.notice_id = st->id;
        snprintf(job.phone, sizeof job.phone, "%s", phone);
        snprintf(job.ip, sizeof job.ip, "%s", st->ip);
        if (captcha_code_new(c->code_length, job.code) == 0 &&
            captcha_codes_put(app->codes, job.phone, job.code, now_ms,
                              c->code_ttl_ms) == 0 &&
            captcha_sender_enqueue(app->sender, &job) == 0) {
            memset(&job, 0, sizeof job);
            return RECOVER_RESENT;
        }
        captcha_codes_discard(app->codes, job.phone, job.code);
        memset(&job, 0, sizeof job);
        why = "not sent: captchad stopped before sending, and it could not "
              "be queued again at the next start; permits refunded";
    }
    /* As in deliver(): the permits come back before the row says FAILED. */
    *refunded = captcha_refund_send(app, phone, st->ip) == 0;
    captcha_notices_finish(app->notices, st->id, 0, why, now_ms);
    return RECOVER_FAILED;
}

int captcha_sender_recover(captcha_t *app)
{
    captcha_stranded_t *list = NULL;
    unsigned long long count[RECOVER_ACTIONS] = {0}, refunded = 0;
    int64_t now_ms = ratel_clock_now_us() / 1000;
    size_t n = 0;

    if (captcha_notices_stranded(app->notices, &list, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int ok, action = recover_one(app, &list[i], now_ms, &ok);
        count[action]++;
        refunded += (unsigned long long)ok;
        atomic_fetch_add(&app->recovered[action], 1);
    }
    free(list);
    ratel__log(n ? "warn" : "info", "recovered stranded notices",
               "stranded=%zu resent=%llu failed=%llu refunded=%llu "
               "resend_max_age_ms=%lld",
               n, count[RECOVER_RESENT], count[RECOVER_FAILED], refunded,
               (long long)app->config->resend_max_age_ms);
    return 0;
}

int captcha_sender_start(captcha_sender_t **out, captcha_t *app, char *err,
                         size_t errlen)
{
    captcha_sender_t *s;

    *out = NULL;
    /* The log sender's file, made (0600) or checked now: a symbolic link
       or a directory it cannot write stops the start, not every send. */
    if (app->config->sender == CAPTCHA_SENDER_LOG) {
        int fd =
            ratel__file_open_private(app->config->log_file, O_WRONLY | O_APPEND,
                                     "the SMS log", err, errlen);
        if (fd < 0)
            return -1;
        ratel__file_warn_readable(fd, app->config->log_file, "the SMS log");
        close(fd);
    }
    s = calloc(1, sizeof *s);
    if (s)
        s->ring = calloc(app->config->queue_size, sizeof *s->ring);
    if (!s || !s->ring) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->app = app;
    s->cap = app->config->queue_size;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->ready, NULL);
    if (pthread_create(&s->thread, NULL, worker, s) != 0) {
        snprintf(err, errlen, "cannot start the sender thread");
        free(s->ring);
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

int captcha_sender_enqueue(captcha_sender_t *s, const captcha_job_t *job)
{
    int rc = -1;

    pthread_mutex_lock(&s->lock);
    if (s->count < s->cap && !s->stopping) {
        s->ring[(s->head + s->count) % s->cap] = *job;
        s->count++;
        rc = 0;
        pthread_cond_signal(&s->ready);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

unsigned captcha_sender_depth(captcha_sender_t *s)
{
    unsigned n;

    pthread_mutex_lock(&s->lock);
    n = s->count;
    pthread_mutex_unlock(&s->lock);
    return n;
}

void captcha_sender_stop(captcha_sender_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->ready);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->ready);
    pthread_mutex_destroy(&s->lock);
    free(s->ring);
    free(s);
}
