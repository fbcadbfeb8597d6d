/* heap_internal.h - the object allocator behind fmem_heap.
 *
 * Memory: 64 KiB slabs for small objects (36 size classes, 16 B..16 KiB)
 * and whole spans for large objects, both taken from a backend: pool
 * allocations mapped with fmem_map, or 64 KiB-aligned ranges of a region.
 * Slab descriptors live in local memory; objects hold only the intrusive
 * free-list link (word 0) and, while free, the double-free key (word 1).
 *
 * Threads: each thread gets a thread heap (theap) per heap and owns the
 * slabs it created, like mimalloc: it allocates from its slabs' `free`
 * lists and frees its own objects onto `local_free` without atomics.
 * Other threads push frees onto the slab's atomic `thread_free` stack; the
 * owner collects them when a slab runs dry. A full slab is parked on the
 * owner's full list; the first remote free into it moves it onto the
 * owner's `delayed` stack (FULL -> NOTIFIED) so the owner sees it again.
 * When a thread exits, its theap (with its slabs) waits for adoption by the
 * next new thread; fmem_heap_collect() tidies such theaps.
 *
 * Lifetimes: theaps and slab descriptors are type-stable (reused, freed
 * only by fmem_heap_destroy), so a late remote freer touching a recycled
 * descriptor at worst sends a spurious notification. */
#ifndef FMEM_FAR_HEAP_INTERNAL_H
#define FMEM_FAR_HEAP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fmem.h"
#include "fmem_far.h"

#define HEAP_PAGE ((size_t)4096)
#define SLAB_SIZE FMEM_HEAP_SLAB_SIZE
#define SMALL_MAX FMEM_HEAP_SMALL_MAX
#define NCLASSES 36
/* Largest object: keeps size arithmetic far from overflow. */
#define HEAP_MAX_OBJECT ((size_t)1 << 46)

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

extern const uint32_t heap_class_size[NCLASSES];

/* Size class of a small request (size <= SMALL_MAX; 0 counts as 1). */
static inline unsigned size_class(size_t size)
{
    if (size <= 128)
        return size ? (unsigned)((size + 15) >> 4) - 1 : 0;
    unsigned b = 63u - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
    unsigned q = (unsigned)((size - 1) >> (b - 2)); /* 4..7 */
    return 8 + (b - 7) * 4 + (q - 4);
}

/* ---- backend spans ------------------------------------------------------ */
struct lobj;
struct slab_pages;
struct span {
    char *ptr;
    size_t len;
    fmem_handle h;  /* pool backend */
    struct lobj *lo; /* pool backend, large objects: their blocks (lobj.h) */
    size_t first;   /* region backend: first 64 KiB block */
    char *src;      /* compactable heaps: the chunk in the pool's mapping
                     * (ptr is the slab's own address, mapped onto it) */
    int zeroed;     /* known to read as zeros */
    struct slab_pages *pb; /* compactable heaps: the slab is backed page by
                            * page (heap_compact.h), not by one chunk */
};

enum heap_kind { HEAP_POOL, HEAP_REGION };

/* ---- slabs -------------------------------------------------------------- */
/* Large objects (above SMALL_MAX, or aligned above a page): on a pool, a
 * few blocks mapped side by side (lobj.h: the size rounded to 4 KiB plus
 * less than 1/32); in a region, a run of 4 KiB pages. */
/* SLAB_ALIAS: the address range of a slab merged into another by
 * compaction (heap_compact.h); its descriptor forwards to the survivor. */
enum slab_kind { SLAB_SMALL, SLAB_LARGE, SLAB_ALIAS };
enum slab_list { LIST_NONE, LIST_AVAIL, LIST_FULL };
enum full_state { NOT_FULL, FULL, NOTIFIED };

struct theap;

struct slab {
    /* owner thread only */
    char *start;
    uint32_t obj_size, capacity, used, bump;
    uint32_t recip; /* floor(2^32 / obj_size) + 1: exact division by it */
    uint8_t cls, kind, list;
    uint8_t random; /* place objects at random (compactable heaps) */
    void *free;       /* allocate from here */
    void *local_free; /* the owner's frees */
    struct slab *next, *prev;
    /* shared */
    _Atomic(struct theap *) owner;
    _Atomic(void *) thread_free; /* other threads' frees */
    _Atomic int full_state;
    struct slab *delayed_next;
    struct span span;
    /* large objects */
    char *user;
    /* compaction: a survivor's merged ranges (alias descriptors, chained
     * through `merged`), and an alias's survivor */
    struct slab *merged, *into;
    /* page merging (heap_compact.c): a page alias's survivor per 4 KiB
     * page (NULL: the page maps a read-only zero page) and the survivor's
     * page it maps, the next page alias of the heap; a slab's count of
     * alias pages mapped onto its chunk */
    struct slab *page_into[SLAB_SIZE / HEAP_PAGE];
    uint8_t page_at[SLAB_SIZE / HEAP_PAGE];
    struct slab *pnext;
    uint32_t hosting;
    uint8_t paged; /* SLAB_ALIAS merged page by page: page_into[] */
};

/* thread_free values other than a free list (heap_compact.h) */
#define TF_LOCKED ((void *)1)  /* the slab is being merged: wait */
#define TF_FORWARD ((void *)2) /* an alias now: look the pointer up again */

/* ---- thread heaps ------------------------------------------------------- */
struct theap {
    struct fmem_heap *heap;
    struct slab *avail[NCLASSES]; /* head: the slab allocated from */
    struct slab *full[NCLASSES];
    _Atomic(struct slab *) delayed; /* full slabs that got remote frees */
    _Atomic int owned;              /* a live thread uses it */
    _Atomic int busy;               /* its thread is in a fast path (fork.h's
                                     * gate for the two hottest paths) */
    pthread_mutex_t lock;           /* adoption vs. collection */
    _Atomic uint64_t mallocs, frees; /* written by the owner only */
    struct slab *spare; /* empty slabs kept for reuse, any class */
    unsigned nspare;
    struct theap *next, *next_free;
};

/* Empty slabs a thread keeps before giving them back to the pool: a thread
 * whose live objects hover around a slab boundary would otherwise take and
 * free a pool chunk again and again. At most 256 KiB per thread;
 * fmem_heap_collect and thread exit give them back. */
#define SPARE_MAX 4

/* ---- page map: 4 KiB page -> slab or large descriptor -------------------- */
#define PM_LEAF_BITS 18
#define PM_TOP_BITS (48 - 12 - PM_LEAF_BITS)
struct pagemap {
    _Atomic(_Atomic(struct slab *) *) *top;
    _Atomic uint64_t *made; /* bit per top entry that has a leaf */
};
int pagemap_init(struct pagemap *pm);
void pagemap_destroy(struct pagemap *pm);
int pagemap_set(struct pagemap *pm, const void *start, size_t len, struct slab *s);
static inline struct slab *pagemap_get(const struct pagemap *pm, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if (unlikely(a >> 48))
        return NULL;
    _Atomic(struct slab *) *leaf =
        atomic_load_explicit(&pm->top[a >> (12 + PM_LEAF_BITS)], memory_order_acquire);
    if (unlikely(!leaf))
        return NULL;
    return atomic_load_explicit(&leaf[(a >> 12) & ((1u << PM_LEAF_BITS) - 1)],
                                memory_order_acquire);
}

/* ---- the heap ----------------------------------------------------------- */
/* Freed large objects kept mapped for reuse: at most this many, each of at
 * most LCACHE_OBJ bytes, LCACHE_BYTES in all (counted in remote_bytes; their
 * pages stay resident, so this is also what a program's RSS may keep). */
#define LCACHE_MAX 8
#define LCACHE_OBJ ((size_t)1 << 20)
#define LCACHE_BYTES ((size_t)2 << 20)
#define HELD_RUNS 32
struct fmem_heap {
    uint64_t id;  /* unique for the process's lifetime */
    uintptr_t key; /* double-free key, XORed with the object address */
    enum heap_kind kind;
    fmem_pool *pool;
    fmem_region *region;
    struct pagemap map;
    pthread_mutex_t lock; /* theap lists, descriptors, large list, region space */
    struct theap *theaps, *free_theaps;
    struct slab *desc_free;
    void **desc_blocks;
    size_t ndesc_blocks;
    struct slab *large; /* live large objects (next/prev) */
    /* pool heaps: large objects freed lately, still mapped, for the next
     * malloc of about their size (a new one costs a few system calls) */
    struct lobj *lcache[LCACHE_MAX];
    unsigned nlcache;
    size_t lcache_bytes;
    /* region backend: one bit per 4 KiB page, set = in use */
    uint64_t *blocks;
    size_t nblocks, rover;
    /* freed pages kept mapped, not released (heap_backend.c): a bit per
     * page whose content may be non-zero, the runs they were freed in
     * (every such free page lies in one), their number and the most kept */
    uint64_t *dirty;
    struct held_run {
        size_t first, n;
    } held[HELD_RUNS];
    unsigned nheld;
    size_t held_pages, held_max;
    struct heap_counters {
        _Atomic uint64_t remote_bytes, remote_peak, slabs, large, slab_allocs, slab_frees,
            double_frees, bad_frees, stray_frees, large_mallocs, large_frees, merges,
            compact_bytes, page_merges, page_backs;
    } st;
    struct heap_compact *compact; /* compactable heaps only (heap_compact.h) */
    struct fmem_heap *next_live;
};

/* heap_backend.c */
int backend_init(struct fmem_heap *h);
void backend_destroy(struct fmem_heap *h);
int backend_get(struct fmem_heap *h, size_t len, struct span *out);
void backend_put(struct fmem_heap *h, struct span *sp);
/* Region heaps: give the freed pages kept for reuse back to the region. */
void backend_release_held(struct fmem_heap *h);
/* Region heaps' large objects: a run of 4 KiB pages, `align`-aligned;
 * resizing in place takes or gives back pages after the run. */
int backend_get_pages(struct fmem_heap *h, size_t size, size_t align, struct span *out);
int backend_resize_pages(struct fmem_heap *h, struct span *sp, size_t size);

/* heap_thread.c */
struct heap_tls {
    uint64_t id;
    struct theap *th;
};
extern __thread struct heap_tls heap_tls __attribute__((tls_model("initial-exec")));
struct theap *theap_get_slow(struct fmem_heap *h, int create);
static inline struct theap *theap_get(struct fmem_heap *h)
{
    if (likely(heap_tls.id == h->id))
        return heap_tls.th;
    return theap_get_slow(h, 1);
}
/* The calling thread's theap, without creating one. */
static inline struct theap *theap_peek(struct fmem_heap *h)
{
    if (likely(heap_tls.id == h->id))
        return heap_tls.th;
    return theap_get_slow(h, 0);
}
int heap_register(struct fmem_heap *h);
void heap_unregister(struct fmem_heap *h);

/* heap_slab.c */
struct slab *desc_alloc(struct fmem_heap *h);
void desc_free(struct fmem_heap *h, struct slab *s);
void *small_malloc_slow(struct theap *th, unsigned cls);
void slab_emptied(struct theap *th, struct slab *s);
void slab_unfull(struct theap *th, struct slab *s);
void slab_unlink(struct theap *th, struct slab *s); /* off its list */
/* Compaction: a slab of th over a span made by the caller (no chunk: a
 * slab backed page by page), second on th's available list, not in the
 * page map; and a slab of th back to the pool at once. */
struct slab *slab_new_over(struct theap *th, unsigned cls, const struct span *sp);
void slab_drop(struct theap *th, struct slab *s);
/* 1: the slab was merged meanwhile, free the pointer again from the top */
int slab_remote_free(struct slab *s, void **o);
/* Collect every slab of th and give empty ones back (exclusive access). */
void theap_collect(struct theap *th, int keep_current);
void theap_free_all(struct theap *th);

/* heap_large.c */
void *large_malloc(struct fmem_heap *h, size_t size, size_t align);
int large_free(struct fmem_heap *h, struct slab *d, void *p);
void large_free_all(struct fmem_heap *h);
void large_cache_drain(struct fmem_heap *h); /* fmem_heap_collect */
/* realloc of a large object without copying: its new address, or NULL
 * (the object is unchanged and still at d->user). */
void *large_resize(struct fmem_heap *h, struct slab *d, size_t size);
/* fork child: large objects on a shared pool become private copies */
void large_fork_child(struct fmem_heap *h);

static inline void counter_bump(_Atomic uint64_t *c)
{ /* single writer: no locked instruction */
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

void heap_account(struct fmem_heap *h, int64_t delta); /* remote bytes */

#endif
