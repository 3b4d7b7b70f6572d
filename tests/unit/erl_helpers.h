/*
 * erl_helpers.h - shorthands for the tests of envoyproxy/ratelimit's
 * configuration (rateld/erl.h): a request descriptor written as
 * key, value, key, value, ... and matched in one call, and a file put in
 * a test's directory.
 */
#ifndef RATEL_TEST_ERL_HELPERS_H
#define RATEL_TEST_ERL_HELPERS_H

#include "rateld/erl.h"

#include <stdio.h>
#include <string.h>

/* A descriptor's entries as a NULL-terminated list of key, value, ... */
#define D(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The limit for a descriptor given as key, value, key, value, ..., NULL. */
static inline const rateld_erl_limit_t *
match(const rateld_erl_t *erl, const char *domain, const char *const *kv)
{
    rateld_erl_entry_t e[16];
    size_t n = 0;

    for (; kv[2 * n] && n < sizeof e / sizeof e[0]; n++) {
        e[n].key = kv[2 * n];
        e[n].keylen = strlen(kv[2 * n]);
        e[n].value = kv[2 * n + 1];
        e[n].valuelen = strlen(kv[2 * n + 1]);
    }
    return rateld_erl_match(erl, domain, strlen(domain), e, n);
}

/* Writes `text` to dir/name; 0, or -1. */
static inline int put_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

#endif /* RATEL_TEST_ERL_HELPERS_H */
