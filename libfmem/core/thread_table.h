/* thread_table.h - a per-thread table on the heap, zeroed, made on a
 * thread's first use and freed when the thread exits (a pthread key whose
 * destructor is free). Static TLS this large may not fit where libfmem.so
 * is loaded with dlopen, so the thread keeps only a pointer:
 *
 *     static struct thread_table snaps = THREAD_TABLE(SNAP_SLOTS, sizeof(struct span_snap));
 *     static _Thread_local struct span_snap *tl_snaps;
 *     if (!tl_snaps) tl_snaps = thread_table_new(&snaps);   (NULL: no memory or no key)
 */
#ifndef FMEM_THREAD_TABLE_H
#define FMEM_THREAD_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "cpu_relax.h"

struct thread_table {
    size_t n, size;     /* entries, and the size of one */
    _Atomic int state;  /* 0 no key yet, 1 being made, 2 made, 3 failed */
    pthread_key_t key;
};

#define THREAD_TABLE(n_, size_) {.n = (n_), .size = (size_)}

/* A new zeroed table for the calling thread, freed at its exit. */
static inline void *thread_table_new(struct thread_table *t)
{
    int s = atomic_load_explicit(&t->state, memory_order_acquire);
    if (s == 0) {
        int want = 0;
        if (atomic_compare_exchange_strong(&t->state, &want, 1)) {
            s = pthread_key_create(&t->key, free) == 0 ? 2 : 3;
            atomic_store_explicit(&t->state, s, memory_order_release);
        }
    }
    while ((s = atomic_load_explicit(&t->state, memory_order_acquire)) == 1)
        cpu_relax(); /* another thread is making the key */
    if (s != 2)
        return NULL;
    void *p = calloc(t->n, t->size);
    if (p && pthread_setspecific(t->key, p) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

#endif
