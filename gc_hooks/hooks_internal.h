/* hooks_internal.h - the binding behind fmem_hooks, shared by the hook
 * families (generic.c, lua.c, closure.c, python.c, numpy.c). */
#ifndef FMEM_HOOKS_INTERNAL_H
#define FMEM_HOOKS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "fmem_hooks.h"

struct fh_closure; /* closure.c */

struct fmem_hooks {
    fmem_heap *heap;
    int owns_heap;
    _Atomic int active;
    fmem_hooks_allocator fallback;
    pthread_mutex_t lock; /* closures and attachments */
    struct fh_closure *closures[FMEM_HOOKS_KINDS];
    struct fmem_hooks_attached *attached;
    _Atomic uint64_t mallocs, frees, reallocs, foreign_frees, fallback_allocs, spills,
        closures_alive;
};

/* closure.c: free b's closures (at drop) */
void fh_closures_free(fmem_hooks *b);

#define FH_COUNT(b, field) atomic_fetch_add_explicit(&(b)->field, 1, memory_order_relaxed)

#endif
