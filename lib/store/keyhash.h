/*
 * keyhash.h - the keyed hash the embedded store and the deny cache spread
 * keys with, and its secret: an attacker who does not know the seed cannot
 * aim keys at one bucket or one set.
 */
#ifndef RATEL_KEYHASH_H
#define RATEL_KEYHASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static inline uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/*
 * The 0..8 bytes at p as one word, reading no byte outside them: two
 * overlapping 4-byte loads, or for 1..3 bytes the first, middle and last
 * byte (which together are all of them). Different contents of the same
 * length give different words; the length itself is hashed separately.
 */
static inline uint64_t load_upto8(const uint8_t *p, size_t len)
{
    if (len >= 4)
        return (uint64_t)load32(p) | (uint64_t)load32(p + len - 4) << 32;
    if (len > 0)
        return (uint64_t)p[0] << 16 | (uint64_t)p[len >> 1] << 8 | p[len - 1];
    return 0;
}

/* Full 64x64->128 multiply, halves folded together: the mixing step. */
static inline uint64_t fold_multiply(uint64_t a, uint64_t b)
{
    __uint128_t m = (__uint128_t)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}

/*
 * Hashes `len` key bytes under the store's secrets. Each 16-byte block is
 * folded into the running value with one wide multiply; both operands carry
 * a secret, so an attacker who does not know the seed cannot aim keys at one
 * bucket (or zero an operand to make keys collide). The last 1..16 bytes
 * are read as two possibly overlapping words, so short keys - the common
 * case - cost two multiplies and no loop. The low bits pick the bucket,
 * bits 48.. the shard.
 */
static inline uint64_t key_hash(const uint64_t seed[3], const void *key,
                                size_t len)
{
    const uint8_t *p = key;
    uint64_t h = seed[0] ^ ((uint64_t)len * 0x9fb21c651e98df25ull);
    uint64_t a, b;

    if (len > 16) {
        size_t left = len;
        do {
            h = fold_multiply(load64(p) ^ seed[1], load64(p + 8) ^ h);
            p += 16;
            left -= 16;
        } while (left > 16);
        a = load64(p + left - 16);
        b = load64(p + left - 8);
    } else if (len > 8) {
        a = load64(p);
        b = load64(p + len - 8);
    } else {
        a = load_upto8(p, len);
        b = 0;
    }
    h = fold_multiply(a ^ seed[1], b ^ h ^ seed[2]);
    return fold_multiply(h ^ seed[0], h ^ seed[2] ^ 0xc3a5c85c97cb3127ull);
}

/*
 * Fills seed[3] from the kernel; if getrandom is unavailable, from the
 * clock and the addresses of `salt` and the stack (weaker, but still not
 * known in advance to a remote client).
 */
static inline void ratel__keyhash_seed(uint64_t seed[3], const void *salt)
{
    struct timespec ts;

    if (getrandom(seed, 3 * sizeof seed[0], GRND_NONBLOCK) ==
        (ssize_t)(3 * sizeof seed[0]))
        return;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    seed[0] = fold_multiply((uint64_t)ts.tv_nsec ^ 0x2545f4914f6cdd1dull,
                            (uint64_t)ts.tv_sec ^ (uintptr_t)salt);
    seed[1] =
        fold_multiply(seed[0] ^ 0x8bb84b93962eacc9ull, (uintptr_t)&ts | 1);
    seed[2] = fold_multiply(seed[1] ^ 0x4b33a62ed433d4a3ull, seed[0] | 1);
}

#endif /* RATEL_KEYHASH_H */
