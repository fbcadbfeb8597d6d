/* heap_backend.c - where a heap's slabs and large objects come from.
 *
 * Pool heaps: one pool allocation per slab (64 KiB) or large object
 * (rounded by the pool to 4 KiB x 2^k), mapped with fmem_map; giving it
 * back is fmem_free. Region heaps: the region's address space is cut into
 * 64 KiB blocks, handed out first-fit from a rover; giving a range back
 * releases it in the region (its pool chunks are freed, it reads as zeros
 * afterwards). Called with no heap lock held; takes h->lock for the region
 * block map only. */
#include <stdlib.h>
#include <string.h>

#include "heap_internal.h"

#define BLOCK SLAB_SIZE

void heap_account(struct fmem_heap *h, int64_t delta)
{
    uint64_t now = atomic_fetch_add(&h->st.remote_bytes, (uint64_t)delta) + (uint64_t)delta;
    if (delta > 0) {
        uint64_t peak = atomic_load(&h->st.remote_peak);
        while (now > peak && !atomic_compare_exchange_weak(&h->st.remote_peak, &peak, now))
            ;
    }
}

int backend_init(struct fmem_heap *h)
{
    if (h->kind == HEAP_POOL) {
        fmem_handle t; /* can this transport map? */
        void *p;
        int rc = fmem_alloc(h->pool, FMEM_CHUNK_SIZE, &t);
        if (rc)
            return rc;
        rc = fmem_map(h->pool, &t, &p);
        fmem_free(h->pool, &t);
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

/* First fit for n free blocks, starting at the rover (h->lock held). */
static int blocks_find(struct fmem_heap *h, size_t n, size_t *first)
{
    for (int pass = 0; pass < 2; pass++) {
        size_t b = pass ? 0 : h->rover, end = pass ? h->rover + n : h->nblocks;
        if (end > h->nblocks)
            end = h->nblocks;
        size_t run = 0;
        for (; b < end; b++) {
            if (!(b % 64) && h->blocks[b / 64] == ~(uint64_t)0) { /* full word */
                run = 0;
                b += 63;
                continue;
            }
            run = block_used(h, b) ? 0 : run + 1;
            if (run == n) {
                *first = b + 1 - n;
                h->rover = b + 1 == h->nblocks ? 0 : b + 1;
                return 0;
            }
        }
    }
    return FMEM_ENOMEM;
}

int backend_get(struct fmem_heap *h, size_t len, struct span *out)
{
    memset(out, 0, sizeof *out);
    if (h->kind == HEAP_POOL) {
        int rc = fmem_alloc(h->pool, len, &out->h);
        if (rc)
            return rc;
        rc = fmem_map(h->pool, &out->h, (void **)&out->ptr);
        if (rc) {
            fmem_free(h->pool, &out->h);
            return rc;
        }
        out->len = out->h.length;
    } else {
        size_t n = (len + BLOCK - 1) / BLOCK;
        pthread_mutex_lock(&h->lock);
        int rc = n <= h->nblocks ? blocks_find(h, n, &out->first) : FMEM_ENOMEM;
        if (rc == 0)
            blocks_mark(h, out->first, n, 1);
        pthread_mutex_unlock(&h->lock);
        if (rc)
            return rc;
        out->len = n * BLOCK;
        out->ptr = (char *)fmem_region_base(h->region) + out->first * BLOCK;
        out->zeroed = 1; /* fresh or released ranges read as zeros */
    }
    heap_account(h, (int64_t)out->len);
    return 0;
}

void backend_put(struct fmem_heap *h, struct span *sp)
{
    heap_account(h, -(int64_t)sp->len);
    if (h->kind == HEAP_POOL) {
        fmem_free(h->pool, &sp->h);
        return;
    }
    fmem_region_release(h->region, sp->first * BLOCK, sp->len);
    pthread_mutex_lock(&h->lock);
    blocks_mark(h, sp->first, sp->len / BLOCK, 0);
    pthread_mutex_unlock(&h->lock);
}
