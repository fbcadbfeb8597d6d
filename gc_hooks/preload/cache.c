/* cache.c - freed large blocks kept for reuse.
 *
 * Giving a block back to the pool on every free costs a page punch and,
 * when the program asks for the same size again, a page fault for every
 * page it touches: most of the price of a large malloc/free pair. Instead
 * a freed block stays mapped and is handed out again for a request of the
 * same size class (4 KiB << k chunks), the most recently freed first. It is
 * bounded: at most CACHE_PER_CLASS blocks of a class (a server with many
 * clients frees and allocates dozens of buffers of one size at a time),
 * CACHE_MAX_BYTES or a quarter of the pool in all, no block above
 * CACHE_MAX_BLOCK. Kept blocks go back to the pool
 * when they were kept longer than CACHE_DELAY_NS (checked on each large
 * malloc or free), when the pool has no room for a request, and at exit.
 * A kept block stays in the block table, marked FP_E_CACHED, so a second
 * free of it is still caught. */
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
    char *p;
    uint64_t e;     /* its table entry */
    uint64_t since; /* when it was freed (CLOCK_MONOTONIC_COARSE, ns) */
};

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct kept kept[CACHE_CLASSES][CACHE_PER_CLASS];
static unsigned nkept[CACHE_CLASSES];
static size_t kept_bytes;
static uint64_t oldest; /* since of the oldest kept block; 0: none kept */
static struct fp_arena *_Atomic kept_arena; /* all kept blocks are in this arena */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static _Atomic uint64_t *slot(struct fp_arena *a, const char *p)
{
    return &a->table[(size_t)(p - a->base) >> FP_CHUNK_SHIFT];
}

/* Remove entry i of class c (cache_mu held); give it back if asked. */
static void drop(unsigned c, unsigned i, int give_back)
{
    struct kept k = kept[c][i];
    kept[c][i] = kept[c][--nkept[c]];
    kept_bytes -= (size_t)FMEM_CHUNK_SIZE << c;
    atomic_store_explicit(slot(kept_arena, k.p), 0, memory_order_release);
    if (give_back)
        fp_block_release(kept_arena, k.p, k.e);
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
                freed += (size_t)FMEM_CHUNK_SIZE << c;
                drop(c, i, 1);
            }
    recompute_oldest();
    return freed;
}

void *fp_cache_take(struct fp_arena *a, unsigned log2, size_t align)
{
    if (log2 >= CACHE_CLASSES || !atomic_load_explicit(&kept_arena, memory_order_relaxed))
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&cache_mu);
    if (kept_arena == a) {
        for (unsigned i = nkept[log2]; i-- > 0;) {
            struct kept *k = &kept[log2][i];
            if (align && ((uintptr_t)k->p & (align - 1)))
                continue;
            p = k->p;
            uint64_t e = k->e;
            kept[log2][i] = kept[log2][--nkept[log2]];
            kept_bytes -= (size_t)FMEM_CHUNK_SIZE << log2;
            atomic_store_explicit(slot(a, p), e, memory_order_release);
            break;
        }
        if (p && !kept_bytes)
            oldest = 0;
        flush_locked(0, now_ns());
    }
    pthread_mutex_unlock(&cache_mu);
    return p;
}

int fp_cache_put(struct fp_arena *a, void *p, uint64_t e)
{
    unsigned c = FP_E_LOG2(e);
    size_t len = (size_t)FMEM_CHUNK_SIZE << c;
    if (c >= CACHE_CLASSES || len > CACHE_MAX_BLOCK || (e & FP_E_PRIVATE) || a->pool == NULL)
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
            unsigned o = 0;
            for (unsigned i = 1; i < nkept[c]; i++)
                if (kept[c][i].since < kept[c][o].since)
                    o = i;
            drop(c, o, 1);
        }
        if (kept_bytes + len > max)
            flush_locked(1, now);
        recompute_oldest();
    }
    int keep = kept_bytes + len <= max;
    if (keep) {
        kept_arena = a;
        kept[c][nkept[c]++] = (struct kept){.p = p, .e = e, .since = now};
        kept_bytes += len;
        if (!oldest)
            oldest = now;
        atomic_store_explicit(slot(a, p), e | FP_E_CACHED, memory_order_release);
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

void fp_cache_forget(void)
{
    if (!kept_arena)
        return;
    for (unsigned c = 0; c < CACHE_CLASSES; c++)
        while (nkept[c])
            drop(c, nkept[c] - 1, 0);
    oldest = 0;
    kept_arena = NULL;
}

void fp_cache_lock_reinit(void)
{
    static const pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&cache_mu, &fresh, sizeof cache_mu);
}
