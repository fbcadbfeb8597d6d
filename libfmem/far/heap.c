/* heap.c - the object allocator's public calls and its fast paths. The
 * design is described in heap_internal.h; slabs are in heap_slab.c, large
 * objects in heap_large.c, thread heaps in heap_thread.c, memory sources in
 * heap_backend.c. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "fork.h"
#include "heap_compact.h"
#include "heap_internal.h"

static _Atomic uint64_t next_heap_id = 1;

static uintptr_t random_key(void)
{
    uintptr_t k = 0;
    if (getrandom(&k, sizeof k, GRND_NONBLOCK) != (ssize_t)sizeof k) {
        struct timespec ts; /* weak, but only guards against accidents */
        clock_gettime(CLOCK_MONOTONIC, &ts);
        k = (uintptr_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uintptr_t)&k;
    }
    return k | 1; /* never equal to the NULL a malloc writes */
}

static int heap_create(enum heap_kind kind, fmem_pool *pool, fmem_region *region,
                       fmem_heap **out)
{
    struct fmem_heap *h = calloc(1, sizeof *h);
    if (!h)
        return FMEM_ENOMEM;
    h->id = atomic_fetch_add(&next_heap_id, 1);
    h->key = random_key();
    h->kind = kind;
    h->pool = pool;
    h->region = region;
    int rc = pthread_mutex_init(&h->lock, NULL) ? FMEM_ENOMEM : 0;
    if (rc) {
        free(h);
        return rc;
    }
    if ((rc = pagemap_init(&h->map)) != 0 || (rc = backend_init(h)) != 0 ||
        (rc = heap_register(h)) != 0) {
        backend_destroy(h);
        pagemap_destroy(&h->map);
        pthread_mutex_destroy(&h->lock);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

int fmem_heap_new(fmem_pool *pool, fmem_heap **out)
{
    if (!out)
        return FMEM_EINVAL;
    *out = NULL;
    if (!pool)
        return FMEM_EINVAL;
    fork_objects_lock();
    int rc = heap_create(HEAP_POOL, pool, NULL, out);
    fork_objects_unlock();
    return rc;
}

int fmem_heap_new_region(fmem_region *r, fmem_heap **out)
{
    if (!out)
        return FMEM_EINVAL;
    *out = NULL;
    if (!r)
        return FMEM_EINVAL;
    fork_objects_lock();
    int rc = heap_create(HEAP_REGION, NULL, r, out);
    fork_objects_unlock();
    return rc;
}

int fmem_heap_new_compactable(fmem_pool *pool, const fmem_compact_policy *policy,
                              fmem_heap **out)
{
    int rc = fmem_heap_new(pool, out);
    if (rc)
        return rc;
    if ((rc = compact_init(*out, policy)) != 0) {
        fmem_heap_destroy(*out);
        *out = NULL;
    }
    return rc;
}

void fmem_heap_destroy(fmem_heap *h)
{
    if (!h)
        return;
    fork_objects_lock();
    heap_unregister(h);
    for (struct theap *th = h->theaps, *next; th; th = next) {
        next = th->next;
        theap_free_all(th);
        pthread_mutex_destroy(&th->lock);
        free(th);
    }
    large_free_all(h);
    for (size_t i = 0; i < h->ndesc_blocks; i++)
        free(h->desc_blocks[i]);
    free(h->desc_blocks);
    pagemap_destroy(&h->map);
    compact_destroy(h);
    backend_destroy(h);
    pthread_mutex_destroy(&h->lock);
    free(h);
    fork_objects_unlock();
}

static inline void *small_malloc(struct fmem_heap *h, unsigned cls)
{
    struct theap *th = theap_get(h);
    if (unlikely(!th))
        return NULL;
    struct slab *s = th->avail[cls];
    void **o;
    if (likely(s && (o = s->free) != NULL)) {
        s->free = o[0];
        o[0] = o[1] = NULL; /* no free-list link or double-free key shows */
        s->used++;
    } else if (!(o = small_malloc_slow(th, cls))) {
        return NULL;
    }
    counter_bump(&th->mallocs);
    return o;
}

static void *heap_malloc(fmem_heap *h, size_t size)
{
    if (unlikely(!h)) {
        errno = EINVAL;
        return NULL;
    }
    if (likely(size <= SMALL_MAX)) {
        void *p = small_malloc(h, size_class(size));
        if (unlikely(!p))
            errno = ENOMEM;
        return p;
    }
    return large_malloc(h, size, 0);
}

static int heap_free(fmem_heap *h, void *p)
{
    if (!p)
        return 0;
    if (unlikely(!h))
        return FMEM_EINVAL;
again:;
    struct slab *s = pagemap_get(&h->map, p);
    if (unlikely(!s))
        goto bad;
    if (unlikely(s->kind == SLAB_ALIAS) && /* a merged slab's range */
        unlikely(!(s = compact_resolve(s, &p))))
        goto bad;
    if (unlikely(s->kind != SLAB_SMALL))
        return large_free(h, s, p);
    uint32_t off = (uint32_t)((char *)p - s->start);
    uint32_t idx = (uint32_t)(((uint64_t)off * s->recip) >> 32);
    if (unlikely(idx >= s->capacity || idx * s->obj_size != off))
        goto bad; /* not the start of an object */
    void **o = p;
    uintptr_t key = h->key ^ (uintptr_t)p;
    if (unlikely((uintptr_t)o[1] == key)) {
        atomic_fetch_add(&h->st.double_frees, 1);
        return FMEM_EDOUBLEFREE;
    }
    struct theap *th = theap_peek(h);
    if (likely(atomic_load_explicit(&s->owner, memory_order_relaxed) == th)) {
        if (unlikely(idx >= s->bump))
            goto bad; /* never handed out */
        o[1] = (void *)key;
        o[0] = s->local_free;
        s->local_free = o;
        counter_bump(&th->frees);
        if (unlikely(--s->used == 0))
            slab_emptied(th, s);
        else if (unlikely(s->list == LIST_FULL))
            slab_unfull(th, s);
        return 0;
    }
    void *word1 = o[1];
    o[1] = (void *)key;
    if (slab_remote_free(s, o)) {
        o[1] = word1; /* the retry must not see its own key as a double free */
        goto again;
    }
    if (th)
        counter_bump(&th->frees);
    else
        atomic_fetch_add(&h->st.stray_frees, 1);
    return 0;
bad:
    atomic_fetch_add(&h->st.bad_frees, 1);
    return FMEM_EINVAL;
}

/* Usable size of a live object of h, 0 if p is not one. */
static size_t usable(struct fmem_heap *h, const void *p, int *zeroed)
{
    struct slab *s = pagemap_get(&h->map, p);
    if (!s)
        return 0;
    if (s->kind == SLAB_ALIAS && !(s = compact_resolve(s, (void **)&p)))
        return 0;
    if (s->kind == SLAB_LARGE) {
        if (s->user != p)
            return 0;
        if (zeroed)
            *zeroed = s->span.zeroed;
        return (size_t)(s->span.ptr + s->span.len - s->user);
    }
    uint32_t off = (uint32_t)((const char *)p - s->start);
    uint32_t idx = (uint32_t)(((uint64_t)off * s->recip) >> 32);
    return idx < s->capacity && idx * s->obj_size == off ? s->obj_size : 0;
}

size_t fmem_heap_usable_size(fmem_heap *h, const void *p)
{
    if (!h || !p)
        return 0;
    fork_gate_enter();
    size_t n = usable(h, p, NULL);
    fork_gate_leave();
    return n;
}

static void *heap_calloc(fmem_heap *h, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    size_t total = n * size;
    void *p = heap_malloc(h, total);
    int zeroed = 0;
    if (p && total > SMALL_MAX)
        usable(h, p, &zeroed); /* region spans read as zeros already */
    if (p && !zeroed)
        memset(p, 0, total);
    return p;
}

static void *heap_memalign(fmem_heap *h, size_t align, size_t size)
{
    if (!h || align == 0 || (align & (align - 1))) {
        errno = EINVAL;
        return NULL;
    }
    if (align <= 16)
        return heap_malloc(h, size);
    if (align <= HEAP_PAGE && size <= SMALL_MAX) {
        /* slabs start on a page: a class whose size is a multiple of the
         * alignment has every object aligned (power-of-two classes exist) */
        for (unsigned c = size_class(size); c < NCLASSES; c++)
            if (heap_class_size[c] % align == 0) {
                void *p = small_malloc(h, c);
                if (!p)
                    errno = ENOMEM;
                return p;
            }
    }
    return large_malloc(h, size, align);
}

static void *heap_realloc(fmem_heap *h, void *p, size_t size)
{
    if (!p)
        return heap_malloc(h, size);
    size_t old = usable(h, p, NULL);
    if (old == 0) {
        errno = EINVAL;
        return NULL;
    }
    if (size == 0) {
        heap_free(h, p);
        return heap_malloc(h, 0);
    }
    struct slab *s = pagemap_get(&h->map, p);
    if (s->kind == SLAB_LARGE && size > SMALL_MAX) {
        /* grow or shrink in place (or move the pages without a copy) */
        void *q = large_resize(h, s, size);
        if (q)
            return q;
        p = s->user; /* still there, unchanged */
        old = usable(h, p, NULL);
    } else if (size <= old && size >= old / 2) {
        return p; /* fits and wastes at most half */
    }
    void *q = heap_malloc(h, size);
    if (!q)
        return NULL;
    memcpy(q, p, size < old ? size : old);
    heap_free(h, p);
    return q;
}

static void heap_collect(fmem_heap *h)
{
    large_cache_drain(h);
    struct theap *self = theap_peek(h);
    if (self)
        theap_collect(self, 0);
    pthread_mutex_lock(&h->lock);
    struct theap *first = h->theaps; /* the list only grows at its head */
    pthread_mutex_unlock(&h->lock);
    for (struct theap *th = first; th; th = th->next) {
        if (th == self)
            continue;
        pthread_mutex_lock(&th->lock);
        if (!atomic_load(&th->owned))
            theap_collect(th, 0);
        pthread_mutex_unlock(&th->lock);
    }
    backend_release_held(h); /* after the slabs: theirs may be held too */
}

static int heap_stats(fmem_heap *h, fmem_heap_stats_t *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->lock);
    for (struct theap *th = h->theaps; th; th = th->next) {
        out->mallocs += atomic_load_explicit(&th->mallocs, memory_order_relaxed);
        out->frees += atomic_load_explicit(&th->frees, memory_order_relaxed);
    }
    pthread_mutex_unlock(&h->lock);
    const struct heap_counters *c = &h->st;
    out->mallocs += atomic_load(&c->large_mallocs);
    out->frees += atomic_load(&c->stray_frees) + atomic_load(&c->large_frees);
    out->slabs = atomic_load(&c->slabs);
    out->large = atomic_load(&c->large);
    out->remote_bytes = atomic_load(&c->remote_bytes);
    out->remote_peak = atomic_load(&c->remote_peak);
    out->slab_allocs = atomic_load(&c->slab_allocs);
    out->slab_frees = atomic_load(&c->slab_frees);
    out->double_frees = atomic_load(&c->double_frees);
    out->bad_frees = atomic_load(&c->bad_frees);
    out->merges = atomic_load(&c->merges);
    out->compact_bytes = atomic_load(&c->compact_bytes);
    return 0;
}

/* ---- the public calls: each inside the fork gate (fork.h) --------------
 * The two hottest paths - a small object from the calling thread's slab,
 * and its free back there - use a cheaper gate of their own: the thread
 * heap's busy flag, which the fork's prepare handler waits on as it waits
 * on the gate (heap_thread.c). They never wait inside it: anything that
 * may (a new slab, an emptied one) leaves it and goes through the gate. */

static inline bool fast_enter(struct theap *th)
{
    atomic_store_explicit(&th->busy, 1, memory_order_relaxed);
    if (unlikely(fork_gate_fence))
        atomic_thread_fence(memory_order_seq_cst);
    else
        atomic_signal_fence(memory_order_seq_cst); /* the forker fences */
    if (likely(!atomic_load_explicit(&fork_gate_closed, memory_order_relaxed)))
        return true;
    atomic_store_explicit(&th->busy, 0, memory_order_release);
    return false;
}

static inline void fast_leave(struct theap *th)
{
    atomic_store_explicit(&th->busy, 0, memory_order_release);
}

void *fmem_heap_malloc(fmem_heap *h, size_t size)
{
    if (likely(h && size <= SMALL_MAX && heap_tls.id == h->id)) {
        struct theap *th = heap_tls.th;
        if (likely(fast_enter(th))) {
            struct slab *s = th->avail[size_class(size)];
            void **o;
            if (likely(s && (o = s->free) != NULL)) {
                s->free = o[0];
                o[0] = o[1] = NULL; /* no free-list link or double-free key shows */
                s->used++;
                counter_bump(&th->mallocs);
                fast_leave(th);
                return o;
            }
            fast_leave(th);
        }
    }
    fork_gate_enter();
    void *p = heap_malloc(h, size);
    fork_gate_leave();
    return p;
}

int fmem_heap_free(fmem_heap *h, void *p)
{
    if (!p)
        return 0;
    if (likely(h && heap_tls.id == h->id)) {
        struct theap *th = heap_tls.th;
        struct slab *s = pagemap_get(&h->map, p);
        if (likely(s && s->kind == SLAB_SMALL &&
                   atomic_load_explicit(&s->owner, memory_order_relaxed) == th)) {
            uint32_t off = (uint32_t)((char *)p - s->start);
            uint32_t idx = (uint32_t)(((uint64_t)off * s->recip) >> 32);
            void **o = p;
            uintptr_t key = h->key ^ (uintptr_t)p;
            /* the checks of heap_free's own-slab path, then its free */
            if (likely(idx < s->bump && idx * s->obj_size == off && (uintptr_t)o[1] != key &&
                       fast_enter(th))) {
                o[1] = (void *)key;
                o[0] = s->local_free;
                s->local_free = o;
                counter_bump(&th->frees);
                bool emptied = --s->used == 0, unfull = s->list == LIST_FULL;
                fast_leave(th);
                if (unlikely(emptied || unfull)) {
                    fork_gate_enter();
                    if (s->used == 0)
                        slab_emptied(th, s);
                    else if (s->list == LIST_FULL)
                        slab_unfull(th, s);
                    fork_gate_leave();
                }
                return 0;
            }
        }
    }
    fork_gate_enter();
    int rc = heap_free(h, p);
    fork_gate_leave();
    return rc;
}

void *fmem_heap_calloc(fmem_heap *h, size_t n, size_t size)
{
    fork_gate_enter();
    void *p = heap_calloc(h, n, size);
    fork_gate_leave();
    return p;
}

void *fmem_heap_memalign(fmem_heap *h, size_t align, size_t size)
{
    fork_gate_enter();
    void *p = heap_memalign(h, align, size);
    fork_gate_leave();
    return p;
}

void *fmem_heap_realloc(fmem_heap *h, void *p, size_t size)
{
    if (!h)
        return fmem_heap_malloc(h, size);
    fork_gate_enter();
    void *q = heap_realloc(h, p, size);
    fork_gate_leave();
    return q;
}

void fmem_heap_collect(fmem_heap *h)
{
    if (!h)
        return;
    fork_gate_enter();
    heap_collect(h);
    fork_gate_leave();
}

int fmem_heap_stats(fmem_heap *h, fmem_heap_stats_t *out)
{
    if (!h || !out)
        return FMEM_EINVAL;
    fork_gate_enter();
    int rc = heap_stats(h, out);
    fork_gate_leave();
    return rc;
}
