/* test_region_spin.c - the cost of one fault: the handler's wait
 * (region_handler_wait.c): faults that follow each other closely are
 * picked up while the handler spins, without it sleeping in between; it
 * stops spinning when faults stop (an idle region burns no CPU);
 * FMEM_REGION_HANDLER_SPIN_US=0 turns spinning off. And the install of an
 * isolated read fault's page before the rest of its unit
 * (region_fault.c, install_hot_first), checked against a shadow copy by
 * two threads through evictions, releases and flushes. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "region_fixture.h"
#include "region_shadow.h"

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
static fmem_region *random_reads(int reads, fmem_region_stats_t *a, fmem_region_stats_t *b,
                                 fmem_region_fault_stats_t *fa, fmem_region_fault_stats_t *fb)
{
    size_t size = 32u << 20, cache = 4u << 20;
    fmem_region *r = make(size, cache, UNIT);
    char *base = fmem_region_base(r);
    for (size_t p = 0; p < size / PAGE; p++)
        *(uint64_t *)(base + p * PAGE) = p * 7 + 1;
    cr_assert_eq(fmem_region_flush(r), 0);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    cr_assert_eq(fmem_region_stats(r, a), 0);
    cr_assert_eq(fmem_region_fault_stats(r, fa, sizeof *fa), 0);
    for (int i = 0; i < reads; i++) {
        size_t p = rnd(&s) % (size / PAGE);
        cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p * 7 + 1, "page %zu", p);
    }
    cr_assert_eq(fmem_region_stats(r, b), 0);
    cr_assert_eq(fmem_region_fault_stats(r, fb, sizeof *fb), 0);
    return r;
}

/* A generous spin time, so that a loaded machine that delays the reading
 * thread between two faults does not make the handler sleep each time. */
Test(region_spin, close_faults_are_served_without_the_handler_sleeping)
{
    setenv("FMEM_REGION_HANDLER_SPIN_US", "2000", 1);
    fmem_region_stats_t a, b;
    fmem_region_fault_stats_t fa, fb;
    fmem_region *r = random_reads(4000, &a, &b, &fa, &fb);
    unsetenv("FMEM_REGION_HANDLER_SPIN_US");
    uint64_t faults = b.missing_faults - a.missing_faults;
    uint64_t spun = fb.spin_wakes - fa.spin_wakes, slept = fb.handler_sleeps - fa.handler_sleeps;
    uint64_t cut = fb.spin_preempted - fa.spin_preempted;
    cr_assert_gt(faults, 1000, "only %llu faults", (unsigned long long)faults);
    cr_assert_gt(spun, 0, "no fault picked up while spinning");
    /* without spinning, every fault the handler waits for is a sleep; on
     * a busy machine (spins cut short by preemption) it spins only now
     * and then */
    if (cut == 0) {
        cr_assert_geq(spun, faults / 2, "%llu of %llu faults picked up while spinning",
                      (unsigned long long)spun, (unsigned long long)faults);
        cr_assert_lt(slept, faults / 2, "the handler slept %llu times for %llu faults",
                     (unsigned long long)slept, (unsigned long long)faults);
    } else {
        cr_log_info("busy machine: %llu spins cut short, %llu of %llu faults picked up "
                    "spinning", (unsigned long long)cut, (unsigned long long)spun,
                    (unsigned long long)faults);
    }

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
    fmem_region_fault_stats_t fa, fb;
    fmem_region *r = random_reads(2000, &a, &b, &fa, &fb);
    unsetenv("FMEM_REGION_HANDLER_SPIN_US");
    cr_assert_eq(fb.spin_wakes, 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* ---- integrity: pages mapped before the rest of their unit ---- */

#define ISIZE ((size_t)8 << 20)
#define NPAGES (ISIZE / PAGE)
#define PPU (UNIT / PAGE)


/* Thread `id` owns its half of the region: random single-page reads (the
 * page goes in first), a read of a page then at once of the other pages
 * of its unit (racing with the copy of the rest), writes right after a
 * read (a write-protect fault on a unit just mapped), releases of a unit
 * or of single pages, flushes. */
static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct ictx *c = wk->c;
    size_t lo = wk->id * (NPAGES / 2), n = NPAGES / 2;
    uint64_t s = 4242 + wk->id, stamp = (uint64_t)(wk->id + 1) << 40;
    for (int i = 0; i < 20000 && !atomic_load(&c->bad); i++) {
        uint64_t op = rnd(&s) % 100;
        size_t p = lo + rnd(&s) % n, u0 = p & ~(size_t)(PPU - 1);
        if (op < 40) {
            check_page(c, p, "page read");
        } else if (op < 60) {
            check_page(c, p, "first page read");
            for (size_t q = 0; q < PPU; q++)
                check_page(c, u0 + (p - u0 + q) % PPU, "unit read");
        } else if (op < 85) {
            check_page(c, p, "read before a write");
            uint64_t v = ++stamp;
            volatile uint64_t *w = (volatile uint64_t *)(c->base + p * PAGE);
            w[0] = v;
            w[PAGE / 8 - 1] = ~v;
            c->shadow[p] = v;
        } else if (op < 92) {
            size_t first = op & 1 ? u0 : p, len = op & 1 ? PPU : 1;
            int rc = fmem_region_release(c->r, first * PAGE, len * PAGE);
            if (rc)
                fail(c, "release", first, (uint64_t)rc, 0);
            for (size_t q = 0; q < len; q++)
                c->shadow[first + q] = 0;
        } else if (op < 93) {
            int rc = fmem_region_flush(c->r);
            if (rc)
                fail(c, "flush", 0, (uint64_t)rc, 0);
        } else {
            uint64_t v = ++stamp;
            volatile uint64_t *w = (volatile uint64_t *)(c->base + p * PAGE);
            w[0] = v;
            w[PAGE / 8 - 1] = ~v;
            c->shadow[p] = v;
        }
    }
    return NULL;
}

Test(region_spin, pages_mapped_before_their_unit_keep_their_data)
{
    fmem_region *r = make(ISIZE, ISIZE / 8, UNIT);
    struct ictx c = {.r = r, .base = fmem_region_base(r)};
    c.shadow = calloc(NPAGES, sizeof *c.shadow);
    cr_assert_not_null(c.shadow);
    for (size_t p = 0; p < NPAGES; p++) {
        uint64_t v = p + 1;
        uint64_t *w = (uint64_t *)(c.base + p * PAGE);
        w[0] = v;
        w[PAGE / 8 - 1] = ~v;
        c.shadow[p] = v;
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    fmem_region_fault_stats_t fa, fb;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    cr_assert_eq(fmem_region_fault_stats(r, &fa, sizeof fa), 0);
    pthread_t th[2];
    struct worker wk[2];
    for (unsigned i = 0; i < 2; i++) {
        wk[i] = (struct worker){&c, i};
        cr_assert_eq(pthread_create(&th[i], NULL, worker_main, &wk[i]), 0);
    }
    for (unsigned i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(atomic_load(&c.bad), 0, "%s", c.why);
    for (size_t p = 0; p < NPAGES && !c.bad; p++)
        check_page(&c, p, "final read");
    cr_assert_eq(atomic_load(&c.bad), 0, "%s", c.why);
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_eq(fmem_region_fault_stats(r, &fb, sizeof fb), 0);
    cr_assert_gt(b.evictions - a.evictions, 1000);
    cr_assert_gt(fb.hot_first - fa.hot_first, 100, "%llu faults had their page mapped first",
                 (unsigned long long)(fb.hot_first - fa.hot_first));
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(c.shadow);
}

/* The size-extensible getter: bad arguments refused, a smaller (older)
 * size filled only that far, a larger (newer) one zero beyond what the
 * library knows. */
Test(region_spin, fault_stats_size_and_bad_arguments)
{
    fmem_region *r = make(1u << 20, 1u << 20, UNIT);
    fmem_region_fault_stats_t f;
    cr_assert_eq(fmem_region_fault_stats(NULL, &f, sizeof f), FMEM_EINVAL);
    cr_assert_eq(fmem_region_fault_stats(r, NULL, sizeof f), FMEM_EINVAL);
    cr_assert_eq(fmem_region_fault_stats(r, &f, 0), FMEM_EINVAL);
    unsigned char big[sizeof f + 64];
    memset(big, 0xa5, sizeof big);
    cr_assert_eq(fmem_region_fault_stats(r, (fmem_region_fault_stats_t *)(void *)big, sizeof big), 0);
    for (size_t i = sizeof f; i < sizeof big; i++)
        cr_assert_eq(big[i], 0, "byte %zu past the known fields", i);
    memset(big, 0xa5, sizeof big);
    cr_assert_eq(fmem_region_fault_stats(r, (fmem_region_fault_stats_t *)(void *)big, 8), 0);
    for (size_t i = 8; i < sizeof big; i++)
        cr_assert_eq(big[i], 0xa5, "byte %zu written past the size given", i);
    cr_assert_eq(fmem_region_destroy(r), 0);
}
