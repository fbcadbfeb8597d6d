/* test_region_hot.c - eviction keeps units in constant use: a program that
 * keeps coming back to a few units spread over many eviction windows (a
 * sort, a hash join) while it streams through the rest must not lose them
 * every second turn of the CLOCK hand, nor with the cold neighbours the
 * writer drops along with a victim. The data of every unit is checked on
 * each read. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "region_fixture.h"

TestSuite(region_hot, .init = open_pool, .fini = close_pool, .timeout = 120);

#define UNIT ((size_t)16 << 10)
#define WINDOW_UNITS 128 /* 2 MiB eviction windows */
#define WINDOWS 16
#define HOT 8 /* one unit in every other window */

static uint64_t word(size_t u, size_t i)
{
    return (uint64_t)u * 0x9e3779b97f4a7c15ull + i;
}

Test(region_hot, referenced_units_stay_when_their_window_is_evicted)
{
    size_t size = (size_t)WINDOWS * WINDOW_UNITS * UNIT;
    /* no read-ahead: every cold unit costs exactly one fault */
    fmem_region_config c = {.size = size, .cache_bytes = 128 * UNIT, .fetch_unit = UNIT,
                            .prefetch = FMEM_REGION_NO_PREFETCH};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    (void)make; /* the fixture's helper cannot turn read-ahead off */
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "create: %s", fmem_strerror(rc));
    uint64_t *m = fmem_region_base(r);
    size_t words = UNIT / 8, nunits = size / UNIT;
    for (size_t u = 0; u < nunits; u++) /* every unit gets pool data */
        for (size_t i = 0; i < words; i += 512)
            m[u * words + i] = word(u, i);
    size_t hot[HOT];
    for (size_t h = 0; h < HOT; h++)
        hot[h] = (2 * h + 1) * WINDOW_UNITS + 7;

    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    size_t cold = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t u = 0; u < nunits; u++) {
            int is_hot = 0;
            for (size_t h = 0; h < HOT; h++)
                is_hot |= u == hot[h];
            if (is_hot)
                continue;
            volatile uint64_t *p = &m[u * words];
            cr_assert_eq(p[512], word(u, 512), "cold unit %zu", u);
            cold++;
            for (size_t h = 0; h < HOT; h++) {
                volatile uint64_t *q = &m[hot[h] * words];
                cr_assert_eq(q[1024], word(hot[h], 1024), "hot unit %zu", hot[h]);
            }
        }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t faults = b.missing_faults - a.missing_faults;
    cr_assert_geq(faults, cold, "%llu faults for %zu cold units", (unsigned long long)faults, cold);
    uint64_t hot_faults = faults - cold;
    /* CLOCK alone (no accessed bits in user space) drops a hot unit every
     * second turn of the hand, i.e. every ~256 cold faults here; a unit
     * faulted back soon after its eviction must last longer than that */
    cr_log_info("%llu faults on hot units, %zu cold units read", (unsigned long long)hot_faults,
                cold);
    cr_expect_lt(hot_faults, (uint64_t)cold * HOT / 256, "%llu faults on %d hot units for %zu cold reads",
                 (unsigned long long)hot_faults, HOT, cold);
    fmem_region_destroy(r);
}
