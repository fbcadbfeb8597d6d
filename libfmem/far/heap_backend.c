/* heap_backend.c - where a heap's slabs and large objects come from.
 *
 * Pool heaps: one pool allocation per slab (64 KiB), mapped with fmem_map,
 * given back with fmem_free (large objects: heap_large.c, lobj.c). Region
 * heaps: the region's address space is cut into 4 KiB pages, handed out
 * first-fit from a rover (slabs as 64 KiB-aligned runs, large objects as
 * runs of their size rounded to 4 KiB); giving a range back releases it in
 * the region (its pool chunks are freed, it reads as zeros afterwards).
 * Called with no heap lock held; takes h->lock for the page map of the
 * region only. */
#include <stdlib.h>
#include <string.h>

#include "heap_compact.h"
#include "heap_internal.h"

#define BLOCK HEAP_PAGE
#define SLAB_PAGES (SLAB_SIZE / BLOCK)

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
    return h->blocks ? 0 : FMEM_ENOMEM;
}

void backend_destroy(struct fmem_heap *h)
{
    free(h->blocks);
    h->blocks = NULL;
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
    int rc = n <= h->nblocks && align <= h->nblocks ? blocks_find(h, n, align, &out->first)
                                                    : FMEM_ENOMEM;
    if (rc == 0)
        blocks_mark(h, out->first, n, 1);
    pthread_mutex_unlock(&h->lock);
    if (rc)
        return rc;
    out->len = n * BLOCK;
    out->ptr = (char *)fmem_region_base(h->region) + out->first * BLOCK;
    out->zeroed = 1; /* fresh or released ranges read as zeros */
    heap_account(h, (int64_t)out->len);
    return 0;
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
        if (rc == 0)
            blocks_mark(h, sp->first + cur, n - cur, 1);
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
    if (sp->src) {
        compact_slot_put(h, sp);
        return;
    }
    heap_account(h, -(int64_t)sp->len);
    if (h->kind == HEAP_POOL) {
        fmem_free(h->pool, &sp->h);
        return;
    }
    region_give_back(h, sp->first, sp->len / BLOCK);
}
