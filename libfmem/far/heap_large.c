/* heap_large.c - objects above FMEM_HEAP_SMALL_MAX (and alignments above
 * 4 KiB), found again through the page map entry of the object's first
 * page. On a pool each is a lobj (lobj.h: a few blocks mapped side by
 * side, no power-of-two rounding); in a region a run of pages of the
 * heap's range (heap_backend.c). Freeing gives the memory back at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap_internal.h"
#include "lobj.h"

static void unlink_large(struct fmem_heap *h, struct slab *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        h->large = d->next;
    if (d->next)
        d->next->prev = d->prev;
    d->next = d->prev = NULL;
}

/* A cached object fit for `size`: at least that large, and holding no
 * more than a fresh one may (the size in 4 KiB pages plus 1/32). */
static struct lobj *cache_take(struct fmem_heap *h, size_t size, size_t align)
{
    if (align > HEAP_PAGE || size > LCACHE_OBJ)
        return NULL;
    size_t need = (size + HEAP_PAGE - 1) & ~(HEAP_PAGE - 1);
    struct lobj *lo = NULL;
    pthread_mutex_lock(&h->lock);
    for (unsigned i = h->nlcache; i-- > 0;) { /* newest first */
        struct lobj *c = h->lcache[i];
        if (c->len >= need && c->held <= need + need / 32) {
            lo = c;
            h->lcache[i] = h->lcache[--h->nlcache];
            h->lcache_bytes -= c->held;
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return lo;
}

/* Keep a freed object for reuse; 0 if it was not taken. */
static int cache_put(struct fmem_heap *h, struct lobj *lo)
{
    if (lo->mode == LOBJ_SINGLE || lo->held > LCACHE_OBJ)
        return 0;
    struct lobj *out = NULL;
    pthread_mutex_lock(&h->lock);
    if (h->nlcache == LCACHE_MAX || h->lcache_bytes + lo->held > LCACHE_BYTES) {
        out = h->lcache[0]; /* the oldest makes room */
        if (out) {
            h->lcache_bytes -= out->held;
            memmove(h->lcache, h->lcache + 1, --h->nlcache * sizeof *h->lcache);
        }
    }
    int taken = h->lcache_bytes + lo->held <= LCACHE_BYTES && h->nlcache < LCACHE_MAX;
    if (taken) {
        h->lcache[h->nlcache++] = lo;
        h->lcache_bytes += lo->held;
    }
    pthread_mutex_unlock(&h->lock);
    if (out) {
        heap_account(h, -(int64_t)out->held);
        lobj_free(h->pool, out);
        free(out);
    }
    return taken;
}

void large_cache_drain(struct fmem_heap *h)
{
    for (;;) {
        pthread_mutex_lock(&h->lock);
        struct lobj *lo = h->nlcache ? h->lcache[--h->nlcache] : NULL;
        if (lo)
            h->lcache_bytes -= lo->held;
        pthread_mutex_unlock(&h->lock);
        if (!lo)
            return;
        heap_account(h, -(int64_t)lo->held);
        lobj_free(h->pool, lo);
        free(lo);
    }
}

/* A pool heap's large object: its blocks, mapped. */
static int pool_get(struct fmem_heap *h, size_t size, size_t align, struct span *sp)
{
    memset(sp, 0, sizeof *sp);
    struct lobj *lo = cache_take(h, size, align);
    if (lo) { /* already counted */
        sp->lo = lo;
        sp->ptr = lo->ptr;
        sp->len = lo->len;
        return 0;
    }
    lo = malloc(sizeof *lo);
    if (!lo)
        return FMEM_ENOMEM;
    int rc = lobj_alloc(h->pool, size, align, lo);
    if (rc) {
        free(lo);
        return rc;
    }
    sp->lo = lo;
    sp->ptr = lo->ptr;
    sp->len = lo->len;
    heap_account(h, (int64_t)lo->held);
    return 0;
}

static void large_put(struct fmem_heap *h, struct span *sp, int may_cache)
{
    if (!sp->lo) {
        backend_put(h, sp);
        return;
    }
    if (may_cache && cache_put(h, sp->lo)) {
        sp->lo = NULL;
        return;
    }
    heap_account(h, -(int64_t)sp->lo->held);
    lobj_free(h->pool, sp->lo);
    free(sp->lo);
    sp->lo = NULL;
}

void *large_malloc(struct fmem_heap *h, size_t size, size_t align)
{
    if (size > HEAP_MAX_OBJECT || align > HEAP_MAX_OBJECT) {
        errno = ENOMEM;
        return NULL;
    }
    struct slab *d = desc_alloc(h);
    if (!d) {
        errno = ENOMEM;
        return NULL;
    }
    struct span sp;
    int rc = h->kind == HEAP_POOL ? pool_get(h, size, align, &sp)
                                  : backend_get_pages(h, size, align, &sp);
    if (rc) {
        desc_free(h, d);
        errno = ENOMEM;
        return NULL;
    }
    memset(d, 0, sizeof *d);
    d->kind = SLAB_LARGE;
    d->span = sp;
    d->user = sp.ptr;
    if (pagemap_set(&h->map, d->user, 1, d)) {
        large_put(h, &d->span, 0);
        desc_free(h, d);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&h->lock);
    d->next = h->large;
    if (h->large)
        h->large->prev = d;
    h->large = d;
    pthread_mutex_unlock(&h->lock);
    atomic_fetch_add(&h->st.large, 1);
    atomic_fetch_add(&h->st.large_mallocs, 1);
    return d->user;
}

void *large_resize(struct fmem_heap *h, struct slab *d, size_t size)
{
    if (size > HEAP_MAX_OBJECT)
        return NULL;
    char *old = d->user;
    if (!d->span.lo) { /* a region's pages */
        if (backend_resize_pages(h, &d->span, size))
            return NULL;
        return d->user;
    }
    struct lobj *lo = d->span.lo;
    size_t held = lo->held;
    int rc = lobj_resize(h->pool, lo, size, 1);
    heap_account(h, (int64_t)lo->held - (int64_t)held);
    if (lo->ptr != old) { /* moved (pages only, no copy) */
        if (pagemap_set(&h->map, lo->ptr, 1, d))
            abort(); /* no memory for a page-map leaf: the object could
                      * never be found again */
        pagemap_set(&h->map, old, 1, NULL);
        d->user = lo->ptr;
    }
    d->span.ptr = lo->ptr;
    d->span.len = lo->len;
    return rc ? NULL : d->user;
}

int large_free(struct fmem_heap *h, struct slab *d, void *p)
{
    pthread_mutex_lock(&h->lock);
    /* checked under the lock: two threads freeing the same object */
    if (pagemap_get(&h->map, p) != d || d->kind != SLAB_LARGE || d->user != p) {
        pthread_mutex_unlock(&h->lock);
        atomic_fetch_add(&h->st.bad_frees, 1);
        return FMEM_EINVAL;
    }
    pagemap_set(&h->map, p, 1, NULL);
    unlink_large(h, d);
    pthread_mutex_unlock(&h->lock);
    large_put(h, &d->span, 1);
    atomic_fetch_sub(&h->st.large, 1);
    atomic_fetch_add(&h->st.large_frees, 1);
    desc_free(h, d);
    return 0;
}

void large_free_all(struct fmem_heap *h)
{
    for (struct slab *d = h->large; d; d = d->next)
        large_put(h, &d->span, 0);
    h->large = NULL;
    large_cache_drain(h);
}

void large_fork_child(struct fmem_heap *h)
{
    int rc = 0;
    for (struct slab *d = h->large; d; d = d->next)
        if (d->span.lo)
            rc |= lobj_fork_child(d->span.lo);
    for (unsigned i = 0; i < h->nlcache; i++)
        rc |= lobj_fork_child(h->lcache[i]);
    if (rc)
        fprintf(stderr, "fmem: heap: fork: a large object stays shared with the parent\n");
}
