/* cache.c - freed large objects kept for reuse.
 *
 * Giving an object back to the pool on every free costs dropping its
 * pages and, when the program asks for the same size again, a page fault
 * for every page it touches: most of the price of a large malloc/free
 * pair. Instead a freed object stays mapped and is handed out again for a
 * request of the same size (its planned page count, or more up to the
 * request's limit of slack),
 * the most recently freed first. It is bounded: at most CACHE_PER_CLASS
 * objects per power of two of pages (a server with many clients frees and
 * allocates dozens of buffers of one size at a time), CACHE_MAX_BYTES or a
 * quarter of the pool in all, no object above CACHE_MAX_BLOCK. Kept
 * objects go back to the pool when they were kept longer than
 * CACHE_DELAY_NS (checked on each large malloc or free), when the pool has
 * no room for a request, and at exit. A kept object stays in the table,
 * marked FP_E_CACHED, so a second free of it is still caught. */
#include <fmem.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "preload.h"

#define CACHE_CLASSES 32
#define CACHE_PER_CLASS 64
#define CACHE_MAX_BYTES ((size_t)256 << 20)
#define CACHE_MAX_BLOCK ((size_t)16 << 20)
#define CACHE_DELAY_NS ((uint64_t)1000000000)

struct kept {
    struct fp_obj *o;
    uint64_t since; /* when it was freed (CLOCK_MONOTONIC_COARSE, ns) */
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kept kept[CACHE_CLASSES][CACHE_PER_CLASS];
static unsigned nkept[CACHE_CLASSES];
static size_t kept_bytes;
static uint64_t oldest; /* since of the oldest kept object; 0: none kept */
static struct fp_arena *_Atomic kept_arena; /* all kept objects are in this arena */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned class_of(uint32_t pages) { return 31u - (unsigned)__builtin_clz(pages); }

/* Remove entry i of class c (cache_mu held); give it back if asked. */
static void drop(unsigned c, unsigned i, int give_back)
{
    struct fp_obj *o = kept[c][i].o;
    kept[c][i] = kept[c][--nkept[c]];
    kept_bytes -= fp_obj_len(o);
    atomic_store_explicit(fp_obj_entry(kept_arena, o), 0, memory_order_release);
    if (give_back)
        fp_obj_release(kept_arena, o);
}

static void recompute_oldest(void)
{
    oldest = 0;
    for (unsigned c = 0; c < CACHE_CLASSES; c++)
        for (unsigned i = 0; i < nkept[c]; i++)
            if (!oldest || kept[c][i].since < oldest)
                oldest = kept[c][i].since;
}

/* Give back what was kept too long (or everything); cache_mu held. */
static size_t flush_locked(int all, uint64_t now)
{
    if (!oldest || (!all && now - oldest < CACHE_DELAY_NS))
        return 0;
    size_t freed = 0;
    for (unsigned c = 0; c < CACHE_CLASSES; c++)
        for (unsigned i = nkept[c]; i-- > 0;)
            if (all || now - kept[c][i].since >= CACHE_DELAY_NS) {
                freed += fp_obj_len(kept[c][i].o);
                drop(c, i, 1);
            }
    recompute_oldest();
    return freed;
}

struct fp_obj *fp_cache_take(struct fp_arena *a, uint32_t pages, uint32_t limit, size_t align)
{
    if (!atomic_load_explicit(&kept_arena, memory_order_relaxed))
        return NULL;
    struct fp_obj *o = NULL;
    unsigned c = class_of(pages);
    pthread_mutex_lock(&cache_mu);
    if (kept_arena == a) {
        for (unsigned i = nkept[c]; i-- > 0;) {
            struct fp_obj *k = kept[c][i].o;
            if (k->pages < pages || k->pages > limit ||
                ((uintptr_t)fp_obj_ptr(a, k) & (align - 1)))
                continue;
            o = k;
            kept[c][i] = kept[c][--nkept[c]];
            kept_bytes -= fp_obj_len(o);
            break;
        }
        if (o && !kept_bytes)
            oldest = 0;
        flush_locked(0, now_ns());
    }
    pthread_mutex_unlock(&cache_mu);
    return o;
}

int fp_cache_put(struct fp_arena *a, struct fp_obj *o)
{
    unsigned c = class_of(o->pages);
    size_t len = fp_obj_len(o);
    if (len > CACHE_MAX_BLOCK || a->pool == NULL)
        return 0;
    pthread_mutex_lock(&cache_mu);
    uint64_t now = now_ns();
    flush_locked(0, now);
    if (kept_arena && kept_arena != a)
        flush_locked(1, now);
    size_t max = CACHE_MAX_BYTES < a->cap / 4 ? CACHE_MAX_BYTES : a->cap / 4;
    /* make room: the oldest of the class, then anything, goes back */
    if (nkept[c] == CACHE_PER_CLASS || kept_bytes + len > max) {
        kept_arena = a;
        if (nkept[c] == CACHE_PER_CLASS) {
            unsigned old = 0;
            for (unsigned i = 1; i < nkept[c]; i++)
                if (kept[c][i].since < kept[c][old].since)
                    old = i;
            drop(c, old, 1);
        }
        if (kept_bytes + len > max)
            flush_locked(1, now);
        recompute_oldest();
    }
    int keep = kept_bytes + len <= max;
    if (keep) {
        kept_arena = a;
        kept[c][nkept[c]++] = (struct kept){.o = o, .since = now};
        kept_bytes += len;
        if (!oldest)
            oldest = now;
    }
    pthread_mutex_unlock(&cache_mu);
    return keep;
}

size_t fp_cache_flush(int all)
{
    if (!atomic_load_explicit(&kept_arena, memory_order_relaxed))
        return 0;
    pthread_mutex_lock(&cache_mu);
    size_t freed = kept_arena ? flush_locked(all, now_ns()) : 0;
    pthread_mutex_unlock(&cache_mu);
    return freed;
}

void fp_cache_forget(void (*unmap)(struct fp_arena *, struct fp_obj *))
{
    if (!kept_arena)
        return;
    for (unsigned c = 0; c < CACHE_CLASSES; c++)
        while (nkept[c]) {
            unmap(kept_arena, kept[c][nkept[c] - 1].o);
            drop(c, nkept[c] - 1, 0);
        }
    oldest = 0;
    kept_bytes = 0;
    kept_arena = NULL;
}

void fp_cache_lock_reinit(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&cache_mu, &fresh, sizeof cache_mu);
}
