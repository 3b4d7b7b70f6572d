/*
 * keys.c - the keys of a replayed trace, in first-seen order, and the ones
 * denied most.
 *
 * Only `--summary` and `--svg` need per-key records; a plain replay keeps
 * none, so its memory is the store's alone. The table is open addressing
 * (linear probing, FNV-1a hash) over an array of record pointers, grown
 * at half load, so a lookup is one hash and a short probe.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_key(const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Doubles the slot array (or creates it) and re-inserts every record. */
static void grow_slots(key_table_t *table)
{
    size_t nslots = table->nslots ? table->nslots * 2 : 64;
    uint32_t *slots = cli_check_alloc(calloc(nslots, sizeof *slots));

    for (size_t r = 0; r < table->nrecords; r++) {
        const key_record_t *rec = table->records[r];
        size_t s = (size_t)hash_key(rec->key, rec->keylen) & (nslots - 1);
        while (slots[s])
            s = (s + 1) & (nslots - 1);
        slots[s] = (uint32_t)(r + 1);
    }
    free(table->slots);
    table->slots = slots;
    table->nslots = nslots;
}

key_record_t *keys_get(key_table_t *table, const char *key, size_t keylen)
{
    size_t s;
    key_record_t *rec;

    if (table->nrecords * 2 >= table->nslots) {
        if (table->nrecords >= UINT32_MAX - 1) {
            cli_error(NULL, "more than %u distinct keys", UINT32_MAX - 1);
            exit(CLI_EXIT_FAIL);
        }
        grow_slots(table);
    }
    s = (size_t)hash_key(key, keylen) & (table->nslots - 1);
    while (table->slots[s]) {
        rec = table->records[table->slots[s] - 1];
        if (rec->keylen == keylen && memcmp(rec->key, key, keylen) == 0)
            return rec;
        s = (s + 1) & (table->nslots - 1);
    }
    if (table->nrecords == table->cap_records) {
        size_t cap = table->cap_records ? table->cap_records * 2 : 64;
        table->records = cli_check_alloc(
            realloc(table->records, cap * sizeof *table->records));
        table->cap_records = cap;
    }
    rec = cli_check_alloc(calloc(1, sizeof *rec));
    rec->key = cli_check_alloc(malloc(keylen + 1));
    memcpy(rec->key, key, keylen);
    rec->key[keylen] = '\0';
    rec->keylen = keylen;
    table->records[table->nrecords++] = rec;
    table->slots[s] = (uint32_t)table->nrecords;
    return rec;
}

void keys_free(key_table_t *table)
{
    for (size_t r = 0; r < table->nrecords; r++) {
        chart_free_windows(table->records[r]);
        free(table->records[r]->key);
        free(table->records[r]);
    }
    free(table->records);
    free(table->slots);
    memset(table, 0, sizeof *table);
}

size_t keys_most_denied(const key_table_t *table, const key_record_t **out,
                        size_t max)
{
    size_t n = 0;

    /* Insertion into a short sorted list: records come in first-seen
       order, so a later key goes after earlier ones it ties with. */
    for (size_t r = 0; r < table->nrecords && max > 0; r++) {
        const key_record_t *rec = table->records[r];
        size_t i;
        if (rec->denied == 0 || (n == max && out[n - 1]->denied >= rec->denied))
            continue;
        if (n < max)
            n++;
        for (i = n - 1; i > 0 && out[i - 1]->denied < rec->denied; i--)
            out[i] = out[i - 1];
        out[i] = rec;
    }
    return n;
}
