/* wl_region.h - shared by the region scan benchmark (wl_region.c) and its
 * kernel-swap anchor (wl_swap.c). */
#ifndef FMEM_BENCH_WL_REGION_H
#define FMEM_BENCH_WL_REGION_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "clock_rng.h"

struct rb_opts {
    size_t size, unit;
    double seconds;
    int pcts[8], npcts;
    int seq, rand, json, vs_swap;
    const char *pool;
};

void rb_fill(char *mem, size_t size);
/* Scan 4 KiB blocks of mem in `order` (NULL: sequential) for `seconds`;
 * returns GB/s. */
double rb_scan(const char *mem, size_t nblocks, const uint32_t *order, double seconds);

/* Run the scans over plain memory in a memory cgroup limited to pct % of
 * the data, swapping to zram; prints them next to local (`local`) and to
 * the region's figures (`fmem`). 0, also when skipped (not root, zram busy). */
int rb_swap_run(const struct rb_opts *o, int pct, const uint32_t *order, const double local[2],
                const double fmem[2]);
/* Take down the swap device rb_swap_run set up. */
void rb_swap_done(void);

#endif
