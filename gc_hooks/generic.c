/* generic.c - the routing all hooks share, and the hooks that need nothing
 * more: a malloc/calloc/realloc/free set with a context pointer and zlib's
 * zalloc/zfree. */
#include <errno.h>
#include <string.h>

#include "hooks_internal.h"

FMEM_API void *fmem_hooks_take(fmem_hooks *b, size_t size, int zero)
{
    if (!atomic_load_explicit(&b->active, memory_order_relaxed)) {
        FH_COUNT(b, fallback_allocs);
        return NULL;
    }
    void *p = zero ? fmem_heap_calloc(b->heap, 1, size) : fmem_heap_malloc(b->heap, size);
    if (p)
        FH_COUNT(b, mallocs);
    else
        FH_COUNT(b, spills);
    return p;
}

FMEM_API int fmem_hooks_give(fmem_hooks *b, void *p)
{
    int rc = fmem_heap_free(b->heap, p);
    if (rc == 0)
        FH_COUNT(b, frees);
    else if (rc == FMEM_EINVAL)
        FH_COUNT(b, foreign_frees);
    /* FMEM_EDOUBLEFREE: the heap's object, refused: never the fallback's */
    return rc != FMEM_EINVAL;
}

FMEM_API void *fmem_hooks_malloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, size_t size)
{
    void *p = fmem_hooks_take(b, size, 0);
    return p ? p : fb->malloc(fb->ctx, size);
}

FMEM_API void *fmem_hooks_calloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, size_t n,
                                     size_t size)
{
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = fmem_hooks_take(b, n * size, 1);
    return p ? p : fb->calloc(fb->ctx, n, size);
}

FMEM_API void *fmem_hooks_realloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, void *p,
                                      size_t size)
{
    if (!p)
        return fmem_hooks_malloc_via(b, fb, size);
    size_t old = fmem_heap_usable_size(b->heap, p);
    if (!old) { /* not the heap's: back where it came from */
        FH_COUNT(b, foreign_frees);
        return fb->realloc(fb->ctx, p, size);
    }
    if (size == 0) {
        fmem_hooks_give(b, p);
        return NULL;
    }
    void *q = fmem_heap_realloc(b->heap, p, size);
    if (q) {
        FH_COUNT(b, reallocs);
        return q;
    }
    /* the heap is full: move the object to the fallback */
    q = fb->malloc(fb->ctx, size);
    if (!q)
        return NULL;
    memcpy(q, p, old < size ? old : size);
    fmem_hooks_give(b, p);
    FH_COUNT(b, spills);
    return q;
}

FMEM_API void fmem_hooks_free_via(fmem_hooks *b, const fmem_hooks_allocator *fb, void *p)
{
    if (p && !fmem_hooks_give(b, p))
        fb->free(fb->ctx, p);
}

FMEM_API fmem_hooks_allocator fmem_hooks_allocator_of(fmem_hooks *b)
{
    return (fmem_hooks_allocator){
        .ctx = b,
        .malloc = fmem_hooks_malloc,
        .calloc = fmem_hooks_calloc,
        .realloc = fmem_hooks_realloc,
        .free = fmem_hooks_free,
    };
}

FMEM_API void *fmem_hooks_malloc(void *ctx, size_t size)
{
    fmem_hooks *b = ctx;
    return fmem_hooks_malloc_via(b, &b->fallback, size);
}

FMEM_API void *fmem_hooks_calloc(void *ctx, size_t n, size_t size)
{
    fmem_hooks *b = ctx;
    return fmem_hooks_calloc_via(b, &b->fallback, n, size);
}

FMEM_API void *fmem_hooks_realloc(void *ctx, void *ptr, size_t size)
{
    fmem_hooks *b = ctx;
    return fmem_hooks_realloc_via(b, &b->fallback, ptr, size);
}

FMEM_API void fmem_hooks_free(void *ctx, void *ptr)
{
    fmem_hooks *b = ctx;
    fmem_hooks_free_via(b, &b->fallback, ptr);
}

FMEM_API void *fmem_hooks_zalloc(void *opaque, unsigned items, unsigned size)
{
    return fmem_hooks_malloc(opaque, (size_t)items * size); /* no overflow on LP64 */
}

FMEM_API void fmem_hooks_zfree(void *opaque, void *ptr) { fmem_hooks_free(opaque, ptr); }
