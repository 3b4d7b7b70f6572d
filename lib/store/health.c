/*
 * health.c - a store's health: sources down, the state they make, and the
 * function told when it changes (health.h).
 */
#include "store/health.h"

#include <stdio.h>
#include <string.h>

void ratel__health_init(ratel_health_t *h)
{
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    h->view.up = 1;
}

void ratel__health_destroy(ratel_health_t *h)
{
    pthread_mutex_destroy(&h->lock);
}

static void set_cause(ratel_health_t *h, const char *cause)
{
    snprintf(h->view.cause, sizeof h->view.cause, "%s",
             cause && cause[0] ? cause : "unknown failure");
}

int ratel__health_set(ratel_health_t *h, int *flag, int down, const char *cause,
                      int64_t now_us)
{
    int changed = 0;

    down = down != 0;
    pthread_mutex_lock(&h->lock);
    if (*flag == down) {
        /* No change for this source; a down one may have a newer reason. */
        if (down)
            set_cause(h, cause);
        pthread_mutex_unlock(&h->lock);
        return 0;
    }
    *flag = down;
    if (down) {
        h->down++;
        set_cause(h, cause);
        if (h->down == 1) {
            h->view.up = 0;
            h->view.since_us = now_us;
            h->view.transitions++;
            changed = 1;
        }
    } else if (h->down > 0) {
        h->down--;
        if (h->down == 0) {
            int64_t lasted = h->view.since_us > 0 && now_us > h->view.since_us
                                 ? now_us - h->view.since_us
                                 : 0;
            h->view.up = 1;
            h->view.since_us = now_us;
            h->view.transitions++;
            h->view.last_outage_ms = lasted / 1000;
            changed = 1;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return changed;
}

int ratel__health_warn(ratel_health_t *h, int *flag, int on, const char *text)
{
    int changed = 0;

    on = on != 0;
    pthread_mutex_lock(&h->lock);
    if (on)
        snprintf(h->view.warning, sizeof h->view.warning, "%s",
                 text && text[0] ? text : "unknown failure");
    if (*flag != on) {
        *flag = on;
        if (on && h->warning++ == 0) {
            h->view.warnings++;
            changed = 1;
        } else if (!on && h->warning > 0 && --h->warning == 0) {
            h->view.warning[0] = '\0';
            changed = 1;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return changed;
}

void ratel__health_get(ratel_health_t *h, ratel_store_health_t *out)
{
    pthread_mutex_lock(&h->lock);
    *out = h->view;
    pthread_mutex_unlock(&h->lock);
}

void ratel__health_watch(ratel_health_t *h, ratel_store_health_fn fn, void *ud)
{
    pthread_mutex_lock(&h->lock);
    h->fn = fn;
    h->ud = ud;
    pthread_mutex_unlock(&h->lock);
}

void ratel__health_notify(ratel_health_t *h)
{
    ratel_store_health_fn fn;
    void *ud;

    pthread_mutex_lock(&h->lock);
    fn = h->fn;
    ud = h->ud;
    pthread_mutex_unlock(&h->lock);
    if (fn)
        fn(ud);
}
