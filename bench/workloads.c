/* workloads.c - what each worker thread does:
 *   churn  allocate and free --size blocks, first in first out, keeping up to
 *          16 live blocks per thread;
 *   paper  FineMem's microbenchmark: fill the pool to --occupancy with random
 *          4 KiB..2 MiB blocks (unmeasured), then repeatedly free a random
 *          half of the thread's blocks and allocate back to the fill level;
 *   mixed  random 4 KiB..1 MiB blocks, a bounded live set per thread, a
 *          random victim freed when the set is full.
 * A step is one allocation or one free. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define LIVE_MAX 16 /* churn, mixed: live blocks per thread */

/* Bytes a thread may hold in churn/mixed: half the pool shared out, so
 * that even many threads never run the pool dry. */
static uint64_t thread_budget(const struct worker *w)
{
    uint64_t b = w->sh->o->pool_bytes / 2 / w->sh->threads;
    return b < CHUNK_BYTES ? CHUNK_BYTES : b;
}

/* ---- churn ------------------------------------------------------------- */
static void churn_setup(struct worker *w)
{
    uint64_t n = thread_budget(w) / w->sh->o->size;
    w->max_live = n < 1 ? 1 : n > LIVE_MAX ? LIVE_MAX : (size_t)n;
    w->live = calloc(w->max_live, sizeof *w->live);
    w->cap = w->live ? w->max_live : 0;
}

static bool churn_step(struct worker *w)
{
    if (!w->cap)
        return false;
    if (w->nlive == w->max_live) { /* free the oldest */
        w_free(w, &w->live[w->head].h);
        w->head = (w->head + 1) % w->max_live;
        w->nlive--;
        return true;
    }
    fmem_handle h;
    if (w_alloc(w, w->sh->o->size, &h) == 0)
        w->live[(w->head + w->nlive++) % w->max_live].h = h;
    return true;
}

/* ---- mixed ------------------------------------------------------------- */
static void mixed_setup(struct worker *w)
{
    w->budget = thread_budget(w);
    w->max_live = LIVE_MAX;
}

static bool mixed_step(struct worker *w)
{
    uint64_t size = CHUNK_BYTES << rng_below(&w->rng, 9); /* 4 KiB .. 1 MiB */
    while (size > w->budget && size > CHUNK_BYTES)
        size >>= 1;
    if (w->nlive && (w->nlive >= w->max_live || w->live_bytes + size > w->budget)) {
        fmem_handle h = live_take(w, rng_below(&w->rng, w->nlive));
        w_free(w, &h);
        return true;
    }
    fmem_handle h;
    if (w_alloc(w, size, &h) == 0 && !live_push(w, &h))
        w_free(w, &h);
    return true;
}

/* ---- paper ------------------------------------------------------------- */
/* Reserve room for a block of about `size` bytes under the pool-wide fill
 * target, shrinking it to fit; 0 when the target is reached. */
static uint64_t reserve(struct worker *w, uint64_t size)
{
    _Atomic uint64_t *used = &w->sh->pool_used;
    uint64_t cur = atomic_load_explicit(used, memory_order_relaxed);
    for (;;) {
        uint64_t room = w->sh->pool_target > cur ? w->sh->pool_target - cur : 0;
        uint64_t s = size;
        while (s > room && s > CHUNK_BYTES)
            s >>= 1;
        if (s > room)
            return 0;
        if (atomic_compare_exchange_weak_explicit(used, &cur, cur + s, memory_order_relaxed,
                                                  memory_order_relaxed))
            return s;
    }
}

static void unreserve(struct worker *w, uint64_t size)
{
    atomic_fetch_sub_explicit(&w->sh->pool_used, size, memory_order_relaxed);
}

static uint64_t paper_size(struct worker *w)
{
    return CHUNK_BYTES << rng_below(&w->rng, 10); /* 4 KiB .. 2 MiB */
}

/* Allocate one block of about `size` under the target. 1: done, 0: target
 * reached, -1: the allocator failed (its error is counted). */
static int paper_alloc(struct worker *w, uint64_t size)
{
    uint64_t s = reserve(w, size);
    if (!s)
        return 0;
    fmem_handle h;
    int rc = w_alloc(w, s, &h);
    if (rc == 0 && live_push(w, &h))
        return 1;
    if (rc == 0)
        w_free(w, &h);
    unreserve(w, s);
    return -1;
}

static void paper_setup(struct worker *w)
{
    uint64_t size = paper_size(w);
    for (;;) {
        int r = paper_alloc(w, size);
        if (r == 0)
            break;
        if (r < 0) { /* fragmented: go on with smaller blocks */
            if (size == CHUNK_BYTES)
                break;
            size >>= 1;
            continue;
        }
        size = paper_size(w);
    }
}

static bool paper_step(struct worker *w)
{
    if (w->to_free && w->nlive) {
        fmem_handle h = live_take(w, rng_below(&w->rng, w->nlive));
        w->to_free--;
        if (w_free(w, &h) == 0)
            unreserve(w, h.length);
        return true;
    }
    if (paper_alloc(w, paper_size(w)) > 0)
        return true;
    /* back at the fill level (or the allocator is full): next round */
    w->to_free = w->nlive / 2;
    return w->to_free > 0;
}

/* ---- registry ---------------------------------------------------------- */
static const struct workload wl_churn = {
    .name = "churn",
    .what = "alloc/free --size blocks, up to 16 live per thread (FIFO)",
    .setup = churn_setup,
    .step = churn_step,
};
static const struct workload wl_paper = {
    .name = "paper",
    .what = "fill to --occupancy with 4K..2M blocks, then free a random half / refill",
    .setup = paper_setup,
    .step = paper_step,
};
static const struct workload wl_mixed = {
    .name = "mixed",
    .what = "random 4K..1M blocks, up to 16 live per thread, random victim",
    .setup = mixed_setup,
    .step = mixed_step,
};

const struct workload *const bench_workloads[] = {&wl_churn, &wl_paper, &wl_mixed, NULL};

const struct workload *workload_by_name(const char *name)
{
    for (unsigned i = 0; bench_workloads[i]; i++)
        if (!strcmp(bench_workloads[i]->name, name))
            return bench_workloads[i];
    return NULL;
}
