/* test_region_dropbehind.c - drop-behind on a live region: the units a
 * sequential stream of the policy's went past are evicted before the
 * CLOCK hand's victims (region_policy.c, stream_drop_behind;
 * region_cache.c), so a scan of four times the cache leaves a small hot
 * set cached; with the read-ahead depth fixed (the handler's own stream,
 * no drop-behind) the scan pushes it out, as before. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "region_fixture.h"

#define UNIT FMEM_REGION_DEFAULT_UNIT
#define PAGE 4096u
#define NUNITS 512u /* 8 MiB */
#define CAP 64u     /* a 1 MiB cache */
#define NHOT 6u     /* hot units, scattered past the scanned ones */
#define SCANNED 256u /* units scanned: four times the cache */

TestSuite(region_dropbehind, .init = open_pool, .fini = close_pool, .timeout = 120);

static uint64_t missing(fmem_region *r)
{
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    return st.missing_faults;
}

static uint32_t hot_unit(unsigned i)
{
    return SCANNED + 4 + i * 29; /* far apart: no stream */
}

/* Reads the hot set (a lookup table), scans SCANNED units, and reads the
 * hot set again; returns the missing faults of that second read. */
static uint64_t hot_misses_after_a_scan(fmem_region *r)
{
    char *base = fmem_region_base(r);
    for (uint32_t p = 0; p < NUNITS * (UNIT / PAGE); p++)
        *(uint64_t *)(base + (size_t)p * PAGE) = p + 1;
    cr_assert_eq(fmem_region_flush(r), 0);
    /* the cache emptied of the fill: a scan of another area */
    for (uint32_t u = NUNITS - CAP * 3 / 2; u < NUNITS; u++)
        (void)*(volatile uint64_t *)(base + (size_t)u * UNIT);
    for (unsigned i = 0; i < NHOT; i++)
        (void)*(volatile uint64_t *)(base + (size_t)hot_unit(i) * UNIT);
    for (size_t p = 0; p < (size_t)SCANNED * (UNIT / PAGE); p++)
        cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p + 1, "page %zu", p);
    uint64_t m0 = missing(r);
    for (unsigned i = 0; i < NHOT; i++) {
        size_t p = (size_t)hot_unit(i) * (UNIT / PAGE);
        cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p + 1);
    }
    return missing(r) - m0;
}

/* The fewest hot-set misses of three tries: under load (two CPU hogs on
 * two cores) the writer now and then needs room while the scan's passed
 * units are not listed yet and takes the hand's victims, the hot set
 * among them (about 1 try in 10); without drop-behind every try misses
 * 4 to 6 of the 6. */
Test(region_dropbehind, a_scan_leaves_the_hot_set_cached)
{
    uint64_t best = UINT64_MAX;
    for (int k = 0; k < 3 && best > 1; k++) {
        fmem_region *r = make((size_t)NUNITS * UNIT, (size_t)CAP * UNIT, 0);
        uint64_t hot = hot_misses_after_a_scan(r);
        fmem_region_destroy(r);
        if (hot < best)
            best = hot;
    }
    /* before drop-behind the hand took the hot set with the scan's units,
     * in the order they came in */
    cr_assert_leq(best, 1, "%llu of %u hot units missed after the scan (the best of 3 tries)",
                  (unsigned long long)best, NHOT);
}

Test(region_dropbehind, a_fixed_read_ahead_depth_drops_nothing_behind)
{
    fmem_region *r = make((size_t)NUNITS * UNIT, (size_t)CAP * UNIT, 0);
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_PREFETCH, .prefetch = CAP / 4};
    cr_assert_eq(fmem_region_tune(r, &t), 0);
    uint64_t hot = hot_misses_after_a_scan(r);
    fmem_region_destroy(r);
    cr_assert_geq(hot, NHOT / 2, "%llu of %u hot units missed after the scan",
                  (unsigned long long)hot, NHOT);
}
