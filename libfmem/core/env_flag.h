/* env_flag.h - an on/off setting read once from the environment (tests
 * and benchmarks switch paths of the protocol with it). */
#ifndef FMEM_CORE_ENV_FLAG_H
#define FMEM_CORE_ENV_FLAG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

/* `name` unset or empty: `dflt`; otherwise on by default means anything
 * but a leading '0' keeps it on, off by default means only a leading '1'
 * turns it on. *cache starts at -1 and keeps the answer. */
static inline bool env_flag(_Atomic int *cache, const char *name, bool dflt)
{
    int x = atomic_load_explicit(cache, memory_order_relaxed);
    if (x < 0) {
        const char *e = getenv(name);
        x = !e || !*e ? dflt : dflt ? *e != '0' : *e == '1';
        atomic_store_explicit(cache, x, memory_order_relaxed);
    }
    return x == 1;
}

#endif
