/*
 * spin.h - waiting for a lock held by another thread, as the memory
 * store's shards and the deny cache's stripes do: spin briefly (a pause
 * instruction: the holder usually lets go within a decision), then yield,
 * so that a preempted holder gets the CPU back instead of the waiters
 * burning their time slices.
 */
#ifndef RATEL_STORE_SPIN_H
#define RATEL_STORE_SPIN_H

#include <sched.h>

/* One wait of a lock's `spins`-th try. */
static inline void ratel__spin_backoff(unsigned spins)
{
    if (spins >= 100) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif /* RATEL_STORE_SPIN_H */
