/* heap_backend.c - where a heap's slabs and large objects come from.
 *
 * Pool heaps: one pool allocation per slab (64 KiB), mapped with fmem_map,
 * given back with fmem_free (large objects: heap_large.c, lobj.c). Region
 * heaps: the region's address space is cut into 4 KiB pages, handed out
 * first-fit from a rover (slabs as 64 KiB-aligned runs, large objects as
 * runs of their size rounded to 4 KiB); giving a range back releases it in
 * the region (its pool chunks are freed, it reads as zeros afterwards).
 * Freed ranges up to HELD_FRACTION of the region's cache are kept mapped
 * instead ("held"), as malloc keeps freed memory: the next allocation of
 * about their size reuses them (best fit among the last HELD_RUNS freed)
 * without a fault, a zap and a release round trip each; the oldest go back
 * to the region beyond that budget, and all of them on fmem_heap_collect
 * and when the heap is destroyed. A held page is marked dirty (it may hold
 * old data), so an allocation over it is not taken as zeroed. The region
 * is told (region_hint.h): its writer evicts held units first and drops
 * them without writing them back, and a held page handed out again is
 * marked in use before anyone writes it.
 * Called with no heap lock held; takes h->lock for the page map of the
 * region only. */
#include <stdlib.h>
#include <string.h>

#include "heap_compact.h"
#include "heap_internal.h"
#include "region_hint.h"

#define BLOCK HEAP_PAGE
#define SLAB_PAGES (SLAB_SIZE / BLOCK)
/* held freed pages: at most 1/HELD_FRACTION of the cache, HELD_MAX_BYTES */
#define HELD_FRACTION 8
#define HELD_MAX_BYTES ((uint64_t)256 << 20)

void heap_account(struct fmem_heap *h, int64_t delta)
{
    uint64_t now = atomic_fetch_add(&h->st.remote_bytes, (uint64_t)delta) + (uint64_t)delta;
    if (delta > 0) {
        uint64_t peak = atomic_load(&h->st.remote_peak);
        while (now > peak && !atomic_compare_exchange_weak(&h->st.remote_peak, &peak, now))
            ;
    }
}

/* A pool may mix nodes whose blocks cannot be mapped (ssd:, zmem:): the
 * next allocation goes to the next node, so try a few. */
#define MAP_TRIES 64

int backend_init(struct fmem_heap *h)
{
    if (h->kind == HEAP_POOL) {
        fmem_handle t; /* can this transport map? (some node of the pool) */
        void *p;
        int rc;
        for (int tries = 0; tries < MAP_TRIES; tries++) {
            if ((rc = fmem_alloc(h->pool, FMEM_CHUNK_SIZE, &t)) != 0)
                return rc;
            rc = fmem_map(h->pool, &t, &p);
            fmem_free(h->pool, &t);
            if (rc != FMEM_ENOTSUP)
                break;
        }
        return rc;
    }
    h->nblocks = fmem_region_size(h->region) / BLOCK;
    if (h->nblocks == 0)
        return FMEM_ESIZE;
    h->blocks = calloc((h->nblocks + 63) / 64, sizeof *h->blocks);
    h->dirty = calloc((h->nblocks + 63) / 64, sizeof *h->dirty);
    if (!h->blocks || !h->dirty)
        return FMEM_ENOMEM;
    fmem_region_stats_t st;
    if (fmem_region_stats(h->region, &st) == 0) {
        uint64_t most = st.cache_bytes / HELD_FRACTION;
        h->held_max = (size_t)((most < HELD_MAX_BYTES ? most : HELD_MAX_BYTES) / BLOCK);
    }
    return 0;
}

static void held_release_all(struct fmem_heap *h);

void backend_destroy(struct fmem_heap *h)
{
    if (h->kind == HEAP_REGION && h->blocks && h->dirty)
        held_release_all(h);
    free(h->blocks);
    free(h->dirty);
    h->blocks = h->dirty = NULL;
}

static int block_used(const struct fmem_heap *h, size_t b)
{
    return (int)(h->blocks[b / 64] >> (b % 64) & 1);
}

static void blocks_mark(struct fmem_heap *h, size_t first, size_t n, int used)
{
    for (size_t b = first; b < first + n; b++) {
        uint64_t bit = (uint64_t)1 << (b % 64);
        h->blocks[b / 64] = used ? h->blocks[b / 64] | bit : h->blocks[b / 64] & ~bit;
    }
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static int block_dirty(const struct fmem_heap *h, size_t b)
{
    return (int)(h->dirty[b / 64] >> (b % 64) & 1);
}

/* Clear the dirty marks of [first, first + n) (h->lock held); returns
 * whether there were any. Only free pages are dirty, so each mark cleared
 * is a held page less. */
static int dirty_clear(struct fmem_heap *h, size_t first, size_t n)
{
    size_t cleared = 0;
    for (size_t b = first; b < first + n; b++) {
        uint64_t bit = (uint64_t)1 << (b % 64);
        if (h->dirty[b / 64] & bit) {
            h->dirty[b / 64] &= ~bit;
            cleared++;
        }
    }
    h->held_pages -= cleared;
    return cleared != 0;
}

/* The best fit for n pages aligned to `align` pages within the held runs
 * (h->lock held): the smallest run it fits in, its pages free. */
static int held_find(struct fmem_heap *h, size_t n, size_t align, size_t *first)
{
    size_t best = SIZE_MAX;
    for (unsigned i = 0; i < h->nheld; i++) {
        const struct held_run *hr = &h->held[i];
        size_t s = round_up(hr->first, align);
        if (hr->n >= best || s + n > hr->first + hr->n)
            continue;
        size_t b = s;
        while (b < s + n && !block_used(h, b))
            b++;
        if (b == s + n) {
            best = hr->n;
            *first = s;
        }
    }
    return best == SIZE_MAX ? FMEM_ENOMEM : 0;
}

/* First fit for n free pages starting at a multiple of `align` pages,
 * from the rover on, then from the start (h->lock held). */
static int blocks_find(struct fmem_heap *h, size_t n, size_t align, size_t *first)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t lo = pass ? 0 : h->rover, end = pass ? h->rover + n + align : h->nblocks;
        if (end > h->nblocks)
            end = h->nblocks;
        size_t start = round_up(lo, align);
        for (size_t b = start; b < end; b++) {
            if (!(b % 64) && h->blocks[b / 64] == ~(uint64_t)0) { /* full word */
                start = round_up(b + 64, align);
                b = start - 1;
                continue;
            }
            if (block_used(h, b)) {
                start = round_up(b + 1, align);
                b = start - 1;
                continue;
            }
            if (b + 1 - start == n) {
                *first = start;
                h->rover = b + 1 == h->nblocks ? 0 : b + 1;
                return 0;
            }
        }
    }
    return FMEM_ENOMEM;
}

static int region_take(struct fmem_heap *h, size_t n, size_t align, struct span *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&h->lock);
    int rc = n > h->nblocks || align > h->nblocks ? FMEM_ENOMEM
             : held_find(h, n, align, &out->first) == 0 ? 0
                                                        : blocks_find(h, n, align, &out->first);
    int dirty = 0;
    if (rc == 0) {
        blocks_mark(h, out->first, n, 1);
        dirty = dirty_clear(h, out->first, n);
        if (dirty) /* held pages: in use again before anyone writes them */
            region_undiscard(h->region, out->first * BLOCK, n * BLOCK);
    }
    pthread_mutex_unlock(&h->lock);
    if (rc)
        return rc;
    out->len = n * BLOCK;
    out->ptr = (char *)fmem_region_base(h->region) + out->first * BLOCK;
    out->zeroed = !dirty; /* fresh or released ranges read as zeros */
    heap_account(h, (int64_t)out->len);
    return 0;
}

/* Release the fetch unit of pages [u0, u0 + unit) whole if all its pages
 * are free now (no lock held). */
static void unit_give_back_if_free(struct fmem_heap *h, size_t u0, size_t unit)
{
    size_t u1 = u0 + unit > h->nblocks ? h->nblocks : u0 + unit;
    pthread_mutex_lock(&h->lock);
    for (size_t b = u0; b < u1; b++)
        if (block_used(h, b)) {
            pthread_mutex_unlock(&h->lock);
            return;
        }
    blocks_mark(h, u0, u1 - u0, 1); /* claimed while it is released */
    pthread_mutex_unlock(&h->lock);
    fmem_region_release(h->region, u0 * BLOCK, (u1 - u0) * BLOCK);
    pthread_mutex_lock(&h->lock);
    blocks_mark(h, u0, u1 - u0, 0);
    pthread_mutex_unlock(&h->lock);
}

/* Give pages [first, first + n) back to the region. The release is
 * widened to whole fetch units where the rest of the unit is free too: a
 * unit released piece by piece would keep its pool chunk for good (the
 * region frees a chunk only for a unit released whole). The widened part
 * is claimed while it is released, so no one allocates it meanwhile. */
static void region_give_back(struct fmem_heap *h, size_t first, size_t n)
{
    size_t unit = fmem_region_unit(h->region) / BLOCK, lo = first, hi = first + n;
    pthread_mutex_lock(&h->lock);
    blocks_mark(h, first, n, 0);
    if (unit > 1) {
        size_t ulo = lo / unit * unit, uhi = round_up(hi, unit);
        if (uhi > h->nblocks)
            uhi = h->nblocks;
        while (lo > ulo && !block_used(h, lo - 1))
            lo--;
        if (lo != ulo)
            lo = first;
        while (hi < uhi && !block_used(h, hi))
            hi++;
        if (hi != uhi)
            hi = first + n;
    }
    blocks_mark(h, lo, hi - lo, 1);
    pthread_mutex_unlock(&h->lock);
    fmem_region_release(h->region, lo * BLOCK, (hi - lo) * BLOCK);
    pthread_mutex_lock(&h->lock);
    blocks_mark(h, lo, hi - lo, 0);
    pthread_mutex_unlock(&h->lock);
    /* An edge unit released only in part: if another thread was releasing
     * the rest of it meanwhile (claimed, so neither widened), whoever
     * finishes last finds it all free and releases it whole, or its pool
     * chunk would stay allocated for good. */
    int left = unit > 1 && lo % unit != 0;
    if (left)
        unit_give_back_if_free(h, lo / unit * unit, unit);
    if (unit > 1 && hi % unit != 0 && !(left && (hi - 1) / unit == lo / unit))
        unit_give_back_if_free(h, (hi - 1) / unit * unit, unit);
}

/* Release the held pages within [first, first + n) (no lock held). Pages
 * someone took meanwhile are not held any more: skipped. */
static void held_release(struct fmem_heap *h, size_t first, size_t n)
{
    for (size_t b = first, end = first + n;;) {
        pthread_mutex_lock(&h->lock);
        while (b < end && !block_dirty(h, b))
            b++;
        size_t s = b;
        while (b < end && block_dirty(h, b))
            b++;
        if (s < b) { /* claimed while it is released */
            blocks_mark(h, s, b - s, 1);
            dirty_clear(h, s, b - s);
        }
        pthread_mutex_unlock(&h->lock);
        if (s == b)
            return;
        region_give_back(h, s, b - s);
    }
}

static size_t held_count(const struct fmem_heap *h, const struct held_run *hr)
{
    size_t c = 0;
    for (size_t b = hr->first; b < hr->first + hr->n; b++)
        c += (size_t)block_dirty(h, b);
    return c;
}

/* Keep the freed pages [first, first + n) mapped for reuse; the oldest
 * held runs go back to the region beyond the budget. Returns 0 when the
 * pages are too many to hold (the caller releases them). */
static int held_add(struct fmem_heap *h, size_t first, size_t n)
{
    if (n > h->held_max)
        return 0;
    struct held_run out[HELD_RUNS];
    unsigned nout = 0;
    pthread_mutex_lock(&h->lock);
    blocks_mark(h, first, n, 0);
    for (size_t b = first; b < first + n; b++)
        h->dirty[b / 64] |= (uint64_t)1 << (b % 64);
    h->held_pages += n; /* they were in use: none was dirty */
    /* under h->lock, so that no region_take of these pages (which takes
     * the mark off) comes before it */
    region_discard(h->region, first * BLOCK, n * BLOCK);
    size_t going = 0;   /* held pages in the runs taken out */
    if (h->nheld == HELD_RUNS) {
        out[nout++] = h->held[0];
        going += held_count(h, &h->held[0]);
        memmove(h->held, h->held + 1, --h->nheld * sizeof h->held[0]);
    }
    h->held[h->nheld++] = (struct held_run){first, n};
    while (h->nheld > 1 && h->held_pages - going > h->held_max) {
        out[nout++] = h->held[0];
        going += held_count(h, &h->held[0]);
        memmove(h->held, h->held + 1, --h->nheld * sizeof h->held[0]);
    }
    pthread_mutex_unlock(&h->lock);
    for (unsigned i = 0; i < nout; i++)
        held_release(h, out[i].first, out[i].n);
    return 1;
}

static void held_release_all(struct fmem_heap *h)
{
    struct held_run out[HELD_RUNS];
    pthread_mutex_lock(&h->lock);
    unsigned nout = h->nheld;
    memcpy(out, h->held, nout * sizeof out[0]);
    h->nheld = 0;
    pthread_mutex_unlock(&h->lock);
    for (unsigned i = 0; i < nout; i++)
        held_release(h, out[i].first, out[i].n);
}

void backend_release_held(struct fmem_heap *h)
{
    if (h->kind == HEAP_REGION)
        held_release_all(h);
}

int backend_get_pages(struct fmem_heap *h, size_t size, size_t align, struct span *out)
{
    size_t n = (size + BLOCK - 1) / BLOCK, a = align > BLOCK ? align / BLOCK : 1;
    return region_take(h, n ? n : 1, a, out);
}

int backend_resize_pages(struct fmem_heap *h, struct span *sp, size_t size)
{
    size_t n = (size + BLOCK - 1) / BLOCK, cur = sp->len / BLOCK;
    if (n == 0)
        n = 1;
    if (n < cur) { /* give the tail back */
        region_give_back(h, sp->first + n, cur - n);
    } else if (n > cur) { /* take the pages after it, if free */
        int rc = 0;
        pthread_mutex_lock(&h->lock);
        if (n > h->nblocks - sp->first)
            rc = FMEM_ENOMEM;
        for (size_t b = sp->first + cur; rc == 0 && b < sp->first + n; b++)
            if (block_used(h, b))
                rc = FMEM_ENOMEM;
        if (rc == 0) {
            blocks_mark(h, sp->first + cur, n - cur, 1);
            if (dirty_clear(h, sp->first + cur, n - cur)) {
                sp->zeroed = 0;
                region_undiscard(h->region, (sp->first + cur) * BLOCK, (n - cur) * BLOCK);
            }
        }
        pthread_mutex_unlock(&h->lock);
        if (rc)
            return rc;
    }
    heap_account(h, ((int64_t)n - (int64_t)cur) * (int64_t)BLOCK);
    sp->len = n * BLOCK;
    return 0;
}

int backend_get(struct fmem_heap *h, size_t len, struct span *out)
{
    if (h->compact && len == SLAB_SIZE) /* a slab at an address of its own */
        return compact_slot_get(h, out);
    memset(out, 0, sizeof *out);
    if (h->kind == HEAP_POOL) {
        int rc;
        for (int tries = 0;; tries++) {
            if ((rc = fmem_alloc(h->pool, len, &out->h)) != 0)
                return rc;
            if ((rc = fmem_map(h->pool, &out->h, (void **)&out->ptr)) == 0)
                break;
            fmem_free(h->pool, &out->h);
            if (rc != FMEM_ENOTSUP || tries + 1 >= MAP_TRIES)
                return rc;
        }
        out->len = out->h.length;
        heap_account(h, (int64_t)out->len);
        return 0;
    }
    /* region: slabs are 64 KiB aligned runs */
    return region_take(h, (len + BLOCK - 1) / BLOCK, len >= SLAB_SIZE ? SLAB_PAGES : 1, out);
}

void backend_put(struct fmem_heap *h, struct span *sp)
{
    if (sp->src || sp->pb) { /* a compactable heap's slab (one chunk, or pages) */
        compact_slot_put(h, sp);
        return;
    }
    heap_account(h, -(int64_t)sp->len);
    if (h->kind == HEAP_POOL) {
        fmem_free(h->pool, &sp->h);
        return;
    }
    if (!held_add(h, sp->first, sp->len / BLOCK))
        region_give_back(h, sp->first, sp->len / BLOCK);
}
