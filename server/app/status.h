/*
 * status.h - a set of HTTP response statuses, as `charge_on` names them
 * (the nginx module's `charge_on=401,403`, rateld's policy field
 * `charge_on: [401, 403]`): one reader and one message for both, so a
 * status means the same wherever it is written.
 */
#ifndef RATEL_APP_STATUS_H
#define RATEL_APP_STATUS_H

#include <stddef.h>
#include <stdint.h>

#define RATEL__STATUS_MIN 100
#define RATEL__STATUS_MAX 599

/* The longest list ratel__status_format() writes: 500 statuses of 3
   digits and a comma each. */
#define RATEL__STATUS_LIST_MAX 2000

/* Statuses 100..599, one bit each. Zeroed: empty. */
typedef struct ratel__status_set_s {
    uint64_t bits[(RATEL__STATUS_MAX - RATEL__STATUS_MIN) / 64 + 1];
} ratel__status_set_t;

/*
 * The status written in the `n` bytes at `text` (three digits, 100 to
 * 599), or -1 with why ("\"4O1\" is not a status: expected a number from
 * 100 to 599, e.g. 401").
 */
long ratel__status_read(const char *text, size_t n, char *why, size_t whylen);

/*
 * Adds the status written in the `n` bytes at `text` (three digits, 100
 * to 599) to `set`: 0, or -1 with why ("charge_on: \"4O1\" is not a
 * status: expected a number from 100 to 599, e.g. 401").
 */
int ratel__status_add(ratel__status_set_t *set, const char *text, size_t n,
                      char *why, size_t whylen);

/* Adds each status of a comma-separated list ("401,403"): 0, or -1 with
   why naming the first one that is not a status. */
int ratel__status_add_list(ratel__status_set_t *set, const char *text, size_t n,
                           char *why, size_t whylen);

/* Whether `status` is in `set` (0 for any number outside 100..599). */
int ratel__status_has(const ratel__status_set_t *set, long status);

/* Adds every status of `from` to `set`. */
void ratel__status_join(ratel__status_set_t *set,
                        const ratel__status_set_t *from);

/* "401,403": the set's statuses in order, as snprintf (the length it
   needs; the text cut to fit). */
size_t ratel__status_format(const ratel__status_set_t *set, char *buf,
                            size_t len);

#endif /* RATEL_APP_STATUS_H */
