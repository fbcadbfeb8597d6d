/* binding.c - create and drop a binding, its settings and statistics. */
#include <errno.h>
#include <stdlib.h>

#include "hooks_internal.h"

static void *libc_malloc(void *ctx, size_t n) { (void)ctx; return malloc(n); }
static void *libc_calloc(void *ctx, size_t n, size_t m) { (void)ctx; return calloc(n, m); }
static void *libc_realloc(void *ctx, void *p, size_t n) { (void)ctx; return realloc(p, n); }
static void libc_free(void *ctx, void *p) { (void)ctx; free(p); }

static const fmem_hooks_allocator libc_allocator = {
    .malloc = libc_malloc, .calloc = libc_calloc, .realloc = libc_realloc, .free = libc_free,
};

FMEM_API int fmem_hooks_new(fmem_heap *heap, fmem_hooks **out)
{
    if (!heap || !out)
        return FMEM_EINVAL;
    fmem_hooks *b = calloc(1, sizeof *b);
    if (!b)
        return FMEM_ENOMEM;
    b->heap = heap;
    b->fallback = libc_allocator;
    atomic_init(&b->active, 1);
    pthread_mutex_init(&b->lock, NULL);
    *out = b;
    return 0;
}

FMEM_API int fmem_hooks_new_pool(fmem_pool *pool, fmem_hooks **out)
{
    if (!pool || !out)
        return FMEM_EINVAL;
    fmem_heap *h;
    int rc = fmem_heap_new(pool, &h);
    if (rc)
        return rc;
    rc = fmem_hooks_new(h, out);
    if (rc) {
        fmem_heap_destroy(h);
        return rc;
    }
    (*out)->owns_heap = 1;
    return 0;
}

FMEM_API void fmem_hooks_attach(fmem_hooks *b, struct fmem_hooks_attached *a)
{
    pthread_mutex_lock(&b->lock);
    a->next = b->attached;
    b->attached = a;
    pthread_mutex_unlock(&b->lock);
}

FMEM_API void fmem_hooks_drop(fmem_hooks *b)
{
    if (!b)
        return;
    fh_closures_free(b);
    for (struct fmem_hooks_attached *a = b->attached, *next; a; a = next) {
        next = a->next;
        free(a);
    }
    pthread_mutex_destroy(&b->lock);
    if (b->owns_heap)
        fmem_heap_destroy(b->heap);
    free(b);
}

FMEM_API fmem_heap *fmem_hooks_heap(fmem_hooks *b) { return b ? b->heap : NULL; }

FMEM_API void fmem_hooks_set_fallback(fmem_hooks *b, const fmem_hooks_allocator *fb)
{
    if (b)
        b->fallback = fb ? *fb : libc_allocator;
}

FMEM_API void fmem_hooks_set_active(fmem_hooks *b, int active)
{
    if (b)
        atomic_store(&b->active, active != 0);
}

FMEM_API int fmem_hooks_active(fmem_hooks *b) { return b && atomic_load(&b->active); }

FMEM_API int fmem_hooks_owns(fmem_hooks *b, const void *p)
{
    return b && p && fmem_heap_usable_size(b->heap, p) != 0;
}

FMEM_API int fmem_hooks_stats(fmem_hooks *b, fmem_hooks_stats_t *st)
{
    if (!b || !st)
        return FMEM_EINVAL;
    *st = (fmem_hooks_stats_t){
        .mallocs = atomic_load(&b->mallocs),
        .frees = atomic_load(&b->frees),
        .reallocs = atomic_load(&b->reallocs),
        .foreign_frees = atomic_load(&b->foreign_frees),
        .fallback_allocs = atomic_load(&b->fallback_allocs),
        .spills = atomic_load(&b->spills),
        .closures = atomic_load(&b->closures_alive),
    };
    return 0;
}
