/* test_region_spin.c - the fault handler's wait (region_handler_wait.c):
 * faults that follow each other closely are picked up while the handler
 * spins, without it sleeping in between; it stops spinning when faults
 * stop (an idle region burns no CPU); FMEM_REGION_HANDLER_SPIN_US=0 turns
 * spinning off. The data read is checked throughout. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "region_fixture.h"

#define UNIT (16u << 10)
#define PAGE 4096u

TestSuite(region_spin, .init = open_pool, .fini = close_pool, .timeout = 120);

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A region 8 times its cache, filled and written back; then `reads`
 * random 4 KiB reads, checked. Returns the region (stats before the
 * reads in *a, after in *b). */
static fmem_region *random_reads(int reads, fmem_region_stats_t *a, fmem_region_stats_t *b)
{
    size_t size = 32u << 20, cache = 4u << 20;
    fmem_region *r = make(size, cache, UNIT);
    char *base = fmem_region_base(r);
    for (size_t p = 0; p < size / PAGE; p++)
        *(uint64_t *)(base + p * PAGE) = p * 7 + 1;
    cr_assert_eq(fmem_region_flush(r), 0);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    cr_assert_eq(fmem_region_stats(r, a), 0);
    for (int i = 0; i < reads; i++) {
        size_t p = rnd(&s) % (size / PAGE);
        cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p * 7 + 1, "page %zu", p);
    }
    cr_assert_eq(fmem_region_stats(r, b), 0);
    return r;
}

/* A generous spin time, so that a loaded machine that delays the reading
 * thread between two faults does not make the handler sleep each time. */
Test(region_spin, close_faults_are_served_without_the_handler_sleeping)
{
    setenv("FMEM_REGION_HANDLER_SPIN_US", "2000", 1);
    fmem_region_stats_t a, b;
    fmem_region *r = random_reads(4000, &a, &b);
    unsetenv("FMEM_REGION_HANDLER_SPIN_US");
    uint64_t faults = b.missing_faults - a.missing_faults;
    uint64_t spun = b.spin_wakes - a.spin_wakes, slept = b.handler_sleeps - a.handler_sleeps;
    cr_assert_gt(faults, 1000, "only %llu faults", (unsigned long long)faults);
    /* without spinning, every fault the handler waits for is a sleep */
    cr_assert_geq(spun, faults / 2, "%llu of %llu faults picked up while spinning",
                  (unsigned long long)spun, (unsigned long long)faults);
    cr_assert_lt(slept, faults / 2, "the handler slept %llu times for %llu faults",
                 (unsigned long long)slept, (unsigned long long)faults);

    /* idle: the handler stops spinning and sleeps (the writer and the
     * handler together use a small part of the idle time) */
    struct timespec pause = {0, 20 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double c0 = cpu_s();
    struct timespec idle = {0, 300 * 1000 * 1000};
    nanosleep(&idle, NULL);
    double used = cpu_s() - c0;
    cr_assert_lt(used, 0.06, "an idle region used %.3f s of CPU in 0.3 s", used);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

Test(region_spin, zero_spin_time_never_spins)
{
    setenv("FMEM_REGION_HANDLER_SPIN_US", "0", 1);
    fmem_region_stats_t a, b;
    fmem_region *r = random_reads(2000, &a, &b);
    unsetenv("FMEM_REGION_HANDLER_SPIN_US");
    cr_assert_eq(b.spin_wakes, 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
}
