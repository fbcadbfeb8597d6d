/* test_policy_fetch.c - the policy's fetch size (libfmem/far/region_policy.c),
 * driven directly: the test plays the fault handler on a region whose
 * memory it never touches (so the real handler stays idle). For each access
 * it checks whether the unit would be mapped by the fetches made so far; if
 * not, it asks the policy for the fetch size (policy_fetch_units), marks the
 * aligned group of that many units around the fault as mapped, and reports
 * the fault (policy_note_fault), as serve_fault does. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "fmem.h"
#include "fmem_far.h"
#include "region_internal.h"
#include "region_policy.h"

#define NUNITS 2048u /* 32 MiB of 16 KiB units */
#define CAP 256u /* cached units: an eighth is 32; over two paths the
                  * staging buffer holds 16: the fetch max */

static fmem_pool *pool;
static fmem_region *reg;
static uint8_t mapped[NUNITS];
static uint64_t faults;

static void make_region(size_t fetch_unit)
{
    cr_assert_eq(fmem_open("mem:?size=64M&nodes=2", &pool), 0);
    fmem_region_config c = {.size = (size_t)NUNITS * FMEM_REGION_DEFAULT_UNIT,
                            .cache_bytes = CAP * FMEM_REGION_DEFAULT_UNIT,
                            .fetch_unit = fetch_unit};
    int rc = fmem_region_create(pool, &c, &reg);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0);
    cr_assert_eq(reg->cap, CAP);
    memset(mapped, 0, sizeof mapped);
    faults = 0;
}

static void setup(void)
{
    make_region(0); /* the default unit: the fetch size is the policy's */
}

static void teardown(void)
{
    fmem_region_destroy(reg);
    fmem_close(pool);
}

static unsigned fetch_now(void)
{
    fmem_region_tuning t;
    cr_assert_eq(fmem_region_tuning_get(reg, &t), 0);
    return t.fetch;
}

/* The program reads unit u. */
static void touch(uint32_t u)
{
    if (mapped[u])
        return;
    unsigned f = policy_fetch_units(reg);
    cr_assert(f >= 1 && (f & (f - 1)) == 0 && f <= policy_fetch_max(reg), "fetch %u", f);
    uint32_t g0 = u & ~(f - 1);
    for (uint32_t v = g0; v < g0 + f && v < NUNITS; v++)
        mapped[v] = 1;
    policy_note_fault(reg, u, 0);
    faults++;
}

static void forget(void)
{
    memset(mapped, 0, sizeof mapped);
}

static uint64_t s = 0x1234567;
static uint32_t rand_u(uint32_t n)
{
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return (uint32_t)(s % n);
}

/* The fetch size set to f, then left to the policy: it goes on from f. */
static void policy_from(unsigned f)
{
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_FETCH, .fetch = f};
    cr_assert_eq(fmem_region_tune(reg, &t), 0);
    t = (fmem_region_tuning){0};
    cr_assert_eq(fmem_region_tune(reg, &t), 0);
    cr_assert_eq(fetch_now(), f);
}

/* Lookups that read all of a random 64 KiB record (4 units) in a scrambled
 * order (never unit after unit: no stream) and then move on: neighbouring
 * faults. A different record each time, and what was mapped is forgotten
 * every few records (evicted). */
static void records(unsigned n, unsigned units)
{
    static const uint32_t order4[4] = {2, 0, 3, 1};
    for (unsigned i = 0; i < n; i++) {
        uint32_t base = rand_u(NUNITS / units) * units;
        for (unsigned k = 0; k < units; k++)
            touch(base + (units == 4 ? order4[k] : units - 1 - k));
        if (i % 8 == 7)
            forget();
    }
}

static void random_reads(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        touch(rand_u(NUNITS));
        if (i % 64 == 63)
            forget();
    }
}

TestSuite(policy_fetch, .init = setup, .fini = teardown, .timeout = 30);

Test(policy_fetch, starts_at_one_unit_and_reports_the_maximum)
{
    fmem_region_tuning t;
    cr_assert_eq(fmem_region_tuning_get(reg, &t), 0);
    cr_assert_eq(t.fetch, 1);
    cr_assert_eq(t.fetch_max, 16, "256 KiB of 16 KiB units");
    cr_assert_eq(t.set & FMEM_REGION_TUNE_FETCH, 0, "fetch_unit 0: the policy's");
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(reg, &st), 0);
    cr_assert_eq(st.fetch_units, 1);
    cr_assert_eq(st.fetch_max, 16);
}

/* Reads of whole 64 KiB records: the fetch size grows to the record (4
 * units) and the faults per record fall from 4 to about 1. */
Test(policy_fetch, neighbouring_faults_grow_it)
{
    records(2000, 4);
    cr_assert_geq(fetch_now(), 4, "fetch %u after record reads", fetch_now());
    uint64_t f0 = faults;
    records(500, 4);
    cr_assert_lt(faults - f0, 500 * 3 / 2, "%llu faults for 500 records",
                 (unsigned long long)(faults - f0));
}

/* Random single-unit reads from a grown fetch size: the neighbours it
 * brings go unused and it shrinks back to one unit. */
Test(policy_fetch, random_faults_shrink_it)
{
    records(2000, 4);
    cr_assert_geq(fetch_now(), 4);
    random_reads(6000);
    cr_assert_eq(fetch_now(), 1, "fetch %u after random reads", fetch_now());
}

/* A random gather that inherited a fetch size of 4 units (from record
 * reads, a scan): a probe every 4th fault, decided per 8 probes, halves
 * it per 32 faults and it is back at one unit within 100 faults (with a
 * probe every 8th fault decided per 16 it took 256). */
Test(policy_fetch, a_random_gather_sheds_an_inherited_fetch_size_soon)
{
    policy_from(4);
    uint64_t f0 = faults;
    while (fetch_now() > 1 && faults - f0 < 1000)
        touch(rand_u(NUNITS));
    cr_assert_eq(fetch_now(), 1);
    cr_assert_leq(faults - f0, 100, "%llu random faults to shed fetch 4",
                  (unsigned long long)(faults - f0));
}

/* Records of 2 units read from a fetch size of 16: half or more of every
 * fetch is wasted; it comes down to 2 and stays there (not 1: the other
 * unit of the pair is used). */
Test(policy_fetch, wasted_fetches_shrink_it_to_what_is_used)
{
    policy_from(16);
    records(6000, 2);
    cr_assert_eq(fetch_now(), 2, "fetch %u after pair reads", fetch_now());
}

/* A fetch size set with fmem_region_tune stays whatever the faults say,
 * also when other fields are set later with it. */
Test(policy_fetch, an_explicit_setting_wins_and_survives)
{
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_FETCH, .fetch = 8};
    cr_assert_eq(fmem_region_tune(reg, &t), 0);
    random_reads(4000);
    cr_assert_eq(fetch_now(), 8);
    t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_FETCH | FMEM_REGION_TUNE_IO_WIDTH,
                             .fetch = 1, .io_width = 2};
    cr_assert_eq(fmem_region_tune(reg, &t), 0);
    records(2000, 4);
    cr_assert_eq(fetch_now(), 1);
    fmem_region_tuning g;
    cr_assert_eq(fmem_region_tuning_get(reg, &g), 0);
    cr_assert(g.set & FMEM_REGION_TUNE_FETCH);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(reg, &st), 0);
    cr_assert_eq(st.fetch_units, 1);
}

Test(policy_fetch, bad_values_are_refused)
{
    unsigned bad[] = {0, 3, 6, 12, 32, 64, 1u << 31, (unsigned)-1};
    for (unsigned i = 0; i < sizeof bad / sizeof *bad; i++) {
        fmem_region_tuning t = {.set = FMEM_REGION_TUNE_FETCH, .fetch = bad[i]};
        cr_assert_eq(fmem_region_tune(reg, &t), FMEM_EINVAL, "fetch %u", bad[i]);
    }
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_FETCH << 1};
    cr_assert_eq(fmem_region_tune(reg, &t), FMEM_EINVAL, "no such field");
    cr_assert_eq(fetch_now(), 1, "a refused setting changes nothing");
    for (unsigned f = 1; f <= 16; f *= 2) {
        t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_FETCH, .fetch = f};
        cr_assert_eq(fmem_region_tune(reg, &t), 0, "fetch %u", f);
        cr_assert_eq(fetch_now(), f);
    }
}

/* An explicit fetch_unit is what a fault brings in: the fetch size is
 * fixed at one unit. */
Test(policy_fetch_explicit_unit, an_explicit_unit_fixes_the_fetch_size, .timeout = 30)
{
    make_region(FMEM_REGION_DEFAULT_UNIT);
    fmem_region_tuning g;
    cr_assert_eq(fmem_region_tuning_get(reg, &g), 0);
    cr_assert(g.set & FMEM_REGION_TUNE_FETCH);
    records(2000, 4);
    cr_assert_eq(fetch_now(), 1);
    teardown();
}
