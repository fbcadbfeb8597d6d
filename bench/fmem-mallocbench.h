/* fmem-mallocbench.h - allocator adapters and workloads of
 * fmem-mallocbench (the object allocator against glibc and mimalloc). */
#ifndef FMEM_MALLOCBENCH_H
#define FMEM_MALLOCBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "clock_rng.h"

struct mb_alloc {
    const char *name;
    void *(*malloc)(void *ctx, size_t n);
    void (*free)(void *ctx, void *p);
    void *ctx;
};

struct mb_params {
    unsigned threads;
    double scale; /* multiplies the iteration counts */
};

struct mb_workload {
    const char *name;
    size_t min, max; /* object sizes */
    /* Runs the workload; returns the number of malloc + free calls. Every
     * object is freed when it returns. */
    uint64_t (*run)(const struct mb_alloc *a, const struct mb_workload *w,
                    const struct mb_params *p);
};

extern const struct mb_workload mb_workloads[];
extern const unsigned mb_nworkloads;

#endif
