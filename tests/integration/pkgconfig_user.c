/*
 * A user's program outside the tree, built with nothing but
 * `pkg-config --cflags --libs ratel` against an installed libratel
 * (test_install.sh: make install; test_deb.sh: the packages). It prints
 * "ALLOWED ALLOWED RETRY_AFTER_MS VERSION" for two SMS sends a second
 * apart under 1/60s and 10/1h: "1 0 59000 0.1.0".
 */
#include <ratel.h>
#include <stdio.h>

int main(void)
{
    const char *rules[] = {"1/60s", "10/1h"};
    ratel_policy_t policy;
    ratel_store_t *store;
    ratel_request_t req = RATEL_REQUEST_INIT;
    ratel_decision_t d1, d2;
    char err[256];

    if (ratel_policy_parse(&policy, rules, 2, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (ratel_store_memory_new(&store, NULL) != 0)
        return 1;
    if (ratel_store_acquire(store, "sms:1", 5, &policy, 1000000, &req, &d1) !=
            0 ||
        ratel_store_acquire(store, "sms:1", 5, &policy, 2000000, &req, &d2) !=
            0)
        return 1;
    printf("%d %d %lld %s\n", d1.allowed, d2.allowed,
           (long long)d2.retry_after_ms, RATEL_VERSION);
    ratel_store_free(store);
    return 0;
}
