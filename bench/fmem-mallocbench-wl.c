/* fmem-mallocbench-wl.c - the allocation workloads of the FineMem paper,
 * written after their classic versions:
 *  - threadtest: threads repeatedly malloc a batch of fixed-size objects
 *    and free them all (256 B small, 4 KiB large);
 *  - shbench: batches of mixed sizes (8 B..1 KiB small, 256 B..4 KiB
 *    large); half of each batch is freed in LIFO order, the other half in
 *    allocation (reverse) order, and every 16th object survives a while;
 *  - larson: each thread frees a random slot of its array and fills it with
 *    a new random-size object; after a while the thread exits and a new one
 *    takes over the array of its neighbour, so objects are freed by threads
 *    that did not allocate them. */
#include <pthread.h>
#include <stdlib.h>

#include "fmem-mallocbench.h"

static size_t rand_size(struct rng *s, const struct mb_workload *w)
{
    return w->min + rng_below(s, w->max - w->min + 1);
}

static void *xmalloc(const struct mb_alloc *a, size_t n)
{
    char *p = a->malloc(a->ctx, n);
    if (!p)
        abort();
    p[0] = 1; /* touch it, as a program would */
    return p;
}

struct job {
    const struct mb_alloc *a;
    const struct mb_workload *w;
    const struct mb_params *p;
    unsigned id;
    uint64_t ops;
    void **slots; /* larson */
};

static uint64_t run_threads(const struct mb_alloc *a, const struct mb_workload *w,
                            const struct mb_params *p, void *(*fn)(void *))
{
    struct job *jobs = calloc(p->threads, sizeof *jobs);
    pthread_t *th = calloc(p->threads, sizeof *th);
    uint64_t ops = 0;
    for (unsigned i = 0; i < p->threads; i++) {
        jobs[i] = (struct job){a, w, p, i, 0, NULL};
        pthread_create(&th[i], NULL, fn, &jobs[i]);
    }
    for (unsigned i = 0; i < p->threads; i++) {
        pthread_join(th[i], NULL);
        ops += jobs[i].ops;
    }
    free(jobs);
    free(th);
    return ops;
}

/* ---- threadtest ---------------------------------------------------------- */

#define TT_BATCH 1000

static void *threadtest_thread(void *arg)
{
    struct job *j = arg;
    void *v[TT_BATCH];
    /* about the same bytes for both sizes (glibc is slow on 4 KiB ones) */
    double per = 400.0 * 256 / (double)(j->w->min > 256 ? j->w->min : 256);
    unsigned rounds = (unsigned)(per * j->p->scale / j->p->threads) + 1;
    for (unsigned r = 0; r < rounds; r++) {
        for (int i = 0; i < TT_BATCH; i++)
            v[i] = xmalloc(j->a, j->w->min);
        for (int i = 0; i < TT_BATCH; i++)
            j->a->free(j->a->ctx, v[i]);
    }
    j->ops = (uint64_t)rounds * TT_BATCH * 2;
    return NULL;
}

static uint64_t threadtest(const struct mb_alloc *a, const struct mb_workload *w,
                           const struct mb_params *p)
{
    return run_threads(a, w, p, threadtest_thread);
}

/* ---- shbench ------------------------------------------------------------- */

#define SH_BATCH 500
#define SH_KEEP 256

static void *shbench_thread(void *arg)
{
    struct job *j = arg;
    void *v[SH_BATCH], *keep[SH_KEEP] = {0};
    uint64_t ops = 0;
    struct rng seed;
    rng_seed(&seed, 0x1234567 + j->id);
    unsigned iters = (unsigned)(800 * j->p->scale / j->p->threads) + 1, k = 0;
    for (unsigned it = 0; it < iters; it++) {
        for (int i = 0; i < SH_BATCH; i++)
            v[i] = xmalloc(j->a, rand_size(&seed, j->w));
        ops += SH_BATCH;
        for (int i = SH_BATCH - 1; i >= SH_BATCH / 2; i--) { /* LIFO */
            j->a->free(j->a->ctx, v[i]);
            ops++;
        }
        for (int i = 0; i < SH_BATCH / 2; i++) { /* oldest first */
            if (i % 16 == 0) { /* survives a while */
                if (keep[k]) {
                    j->a->free(j->a->ctx, keep[k]);
                    ops++;
                }
                keep[k] = v[i];
                k = (k + 1) % SH_KEEP;
                continue;
            }
            j->a->free(j->a->ctx, v[i]);
            ops++;
        }
    }
    for (int i = 0; i < SH_KEEP; i++)
        if (keep[i]) {
            j->a->free(j->a->ctx, keep[i]);
            ops++;
        }
    j->ops = ops;
    return NULL;
}

static uint64_t shbench(const struct mb_alloc *a, const struct mb_workload *w,
                        const struct mb_params *p)
{
    return run_threads(a, w, p, shbench_thread);
}

/* ---- larson -------------------------------------------------------------- */

#define LA_SLOTS 1000
#define LA_GENERATIONS 8

static void *larson_thread(void *arg)
{
    struct job *j = arg;
    struct rng seed;
    rng_seed(&seed, (uint64_t)j->id * 7919 + j->ops);
    unsigned rounds = (unsigned)(400000 * j->p->scale / j->p->threads / LA_GENERATIONS) + 1;
    uint64_t ops = 0;
    for (unsigned r = 0; r < rounds; r++) {
        size_t i = rng_below(&seed, LA_SLOTS);
        if (j->slots[i]) {
            j->a->free(j->a->ctx, j->slots[i]);
            ops++;
        }
        j->slots[i] = xmalloc(j->a, rand_size(&seed, j->w));
        ops++;
    }
    j->ops = ops;
    return NULL;
}

/* Generation g runs a fresh thread per array, on its neighbour's array. */
static uint64_t larson(const struct mb_alloc *a, const struct mb_workload *w,
                       const struct mb_params *p)
{
    unsigned t = p->threads;
    void **arrays = calloc((size_t)t * LA_SLOTS, sizeof *arrays);
    struct job *jobs = calloc(t, sizeof *jobs);
    pthread_t *th = calloc(t, sizeof *th);
    uint64_t ops = 0;
    for (unsigned g = 0; g < LA_GENERATIONS; g++) {
        for (unsigned i = 0; i < t; i++) {
            jobs[i] = (struct job){a, w, p, i, g, &arrays[(size_t)((i + g) % t) * LA_SLOTS]};
            pthread_create(&th[i], NULL, larson_thread, &jobs[i]);
        }
        for (unsigned i = 0; i < t; i++) {
            pthread_join(th[i], NULL);
            ops += jobs[i].ops;
        }
    }
    for (size_t i = 0; i < (size_t)t * LA_SLOTS; i++)
        if (arrays[i]) {
            a->free(a->ctx, arrays[i]);
            ops++;
        }
    free(arrays);
    free(jobs);
    free(th);
    return ops;
}

const struct mb_workload mb_workloads[] = {
    {"threadtest-small", 256, 256, threadtest},
    {"threadtest-large", 4096, 4096, threadtest},
    {"shbench-small", 8, 1024, shbench},
    {"shbench-large", 256, 4096, shbench},
    {"larson-small", 8, 1024, larson},
    {"larson-large", 256, 4096, larson},
};
const unsigned mb_nworkloads = sizeof mb_workloads / sizeof mb_workloads[0];
