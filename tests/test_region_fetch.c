/* test_region_fetch.c - the fetch size on a live region: demand faults that
 * bring in the aligned group of units around them (region_fault.c,
 * fetch_group), grown by the policy under neighbouring reads, and the data
 * of a region whose fetch size changes while two threads use it, checked
 * against a shadow copy through evictions, releases and flushes. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "region_fixture.h"
#include "region_shadow.h"

#define UNIT FMEM_REGION_DEFAULT_UNIT
#define PAGE 4096u

TestSuite(region_fetch, .init = open_pool, .fini = close_pool, .timeout = 120);

static void fill(char *base, size_t size)
{
    for (size_t p = 0; p < size / PAGE; p++)
        *(uint64_t *)(base + p * PAGE) = p + 1;
}

/* Reads of random 64 KiB records (4 units, in a scrambled order) over a
 * region 8 times its cache: the policy grows the fetch size, the fault
 * path brings whole records in, and the faults per record fall. */
Test(region_fetch, record_reads_grow_the_fetch_size_and_cut_faults)
{
    size_t size = 16u << 20, cache = 2u << 20;
    /* four paths: a group of 4 units is fetched side by side */
    fmem_pool *one = pool;
    cr_assert_eq(fmem_open("mem:?size=96M&nodes=4", &pool), 0);
    fmem_region *r = make(size, cache, 0);
    char *base = fmem_region_base(r);
    fill(base, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    uint64_t s = 77, nrec = size / (4 * UNIT);
    static const unsigned order[4] = {2, 0, 3, 1};
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (int i = 0; i < 3000; i++) {
        uint64_t rec = rnd(&s) % nrec;
        for (int k = 0; k < 4; k++) {
            size_t p = (rec * 4 + order[k]) * (UNIT / PAGE);
            cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p + 1);
        }
    }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_geq(b.fetch_units, 4, "fetch %u units", b.fetch_units);
    /* the last 1000 records with the grown size */
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (int i = 0; i < 1000; i++) {
        uint64_t rec = rnd(&s) % nrec;
        for (int k = 0; k < 4; k++) {
            size_t p = (rec * 4 + order[k]) * (UNIT / PAGE);
            cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p + 1);
        }
    }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t mf = b.missing_faults - a.missing_faults;
    cr_assert_lt(mf, 1500, "%llu missing faults for 1000 records of 4 units",
                 (unsigned long long)mf);
    fmem_region_destroy(r);
    fmem_close(pool);
    pool = one;
}

/* An explicit fetch size of 4 units: a read fault brings in its aligned
 * group of 4; a write fault only its own unit. */
Test(region_fetch, an_explicit_fetch_size_brings_in_the_group)
{
    size_t size = 8u << 20, cache = 1u << 20;
    fmem_region *r = make(size, cache, 0);
    char *base = fmem_region_base(r);
    fill(base, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_tuning t = {.set = FMEM_REGION_TUNE_FETCH | FMEM_REGION_TUNE_PREFETCH,
                            .fetch = 4, .prefetch = 0};
    cr_assert_eq(fmem_region_tune(r, &t), 0);
    /* push the data out: read the second half */
    for (size_t p = size / 2 / PAGE; p < size / PAGE; p++)
        cr_assert_eq(*(volatile uint64_t *)(base + p * PAGE), p + 1);
    /* A group takes free slots only while more than one is free (it does
     * not wait for the writer): give the writer time to make its reserve,
     * and try a few groups. */
    fmem_region_stats_t a, b;
    int whole = 0;
    for (size_t g = 10; g < 60 && !whole; g += 10) {
        struct timespec ts = {0, 100000000};
        nanosleep(&ts, NULL);
        size_t u = 4 * g + 1; /* group 4g..4g+3 */
        cr_assert_eq(fmem_region_stats(r, &a), 0);
        cr_assert_eq(*(volatile uint64_t *)(base + u * UNIT), u * (UNIT / PAGE) + 1);
        cr_assert_eq(fmem_region_stats(r, &b), 0);
        uint64_t got = b.fetches - a.fetches;
        cr_assert(got >= 1 && got <= 4, "%llu units fetched", (unsigned long long)got);
        if (got < 4)
            continue;
        whole = 1;
        for (size_t v = 4 * g; v < 4 * g + 4; v++)
            cr_assert_eq(*(volatile uint64_t *)(base + v * UNIT + PAGE), v * (UNIT / PAGE) + 2);
        cr_assert_eq(fmem_region_stats(r, &a), 0);
        cr_assert_eq(a.missing_faults, b.missing_faults, "the group was mapped whole");
    }
    cr_assert(whole, "no fault brought in its whole group of 4");
    /* a write fault in another group maps its own unit */
    base[101 * UNIT + 8] = 1;
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_eq(b.fetches - a.fetches, 1);
    fmem_region_destroy(r);
}

/* ---- integrity while the fetch size changes ---- */

#define ISIZE ((size_t)8 << 20)
#define ICACHE ((size_t)1 << 20)
#define NPAGES (ISIZE / PAGE)


/* Thread `id` owns pages of its half of the region; it writes, reads
 * records and single pages, releases 64 KiB ranges and flushes. */
static void *worker_main(void *arg)
{
    struct worker *wk = arg;
    struct ictx *c = wk->c;
    size_t lo = wk->id * (NPAGES / 2), n = NPAGES / 2;
    uint64_t s = 1000 + wk->id, stamp = (uint64_t)(wk->id + 1) << 40;
    for (int i = 0; i < 30000 && !atomic_load(&c->bad); i++) {
        uint64_t op = rnd(&s) % 100;
        size_t p = lo + rnd(&s) % n;
        if (op < 35) { /* write a page */
            uint64_t v = ++stamp;
            volatile uint64_t *w = (volatile uint64_t *)(c->base + p * PAGE);
            w[0] = v;
            w[PAGE / 8 - 1] = ~v;
            c->shadow[p] = v;
        } else if (op < 60) { /* read a 64 KiB record, scrambled */
            size_t r0 = p & ~(size_t)15;
            static const unsigned ord[4] = {1, 3, 0, 2};
            for (int k = 0; k < 4; k++)
                for (size_t q = 0; q < 4; q++)
                    check_page(c, r0 + ord[k] * 4 + q, "record read");
        } else if (op < 95) {
            check_page(c, p, "page read");
        } else if (op < 99) { /* release 64 KiB */
            size_t r0 = p & ~(size_t)15;
            int rc = fmem_region_release(c->r, r0 * PAGE, 16 * PAGE);
            if (rc)
                fail(c, "release", r0, (uint64_t)rc, 0);
            for (size_t q = 0; q < 16; q++)
                c->shadow[r0 + q] = 0;
        } else {
            int rc = fmem_region_flush(c->r);
            if (rc)
                fail(c, "flush", 0, (uint64_t)rc, 0);
        }
    }
    return NULL;
}

/* Changes the fetch size every little while: fixed sizes and the policy. */
static void *tuner_main(void *arg)
{
    struct ictx *c = arg;
    unsigned i = 0;
    fmem_region_tuning g;
    cr_assert_eq(fmem_region_tuning_get(c->r, &g), 0);
    while (!atomic_load(&c->stop)) {
        unsigned f = 1u << (i % 5);
        fmem_region_tuning t = {0};
        if (i % 3 != 2 && f <= g.fetch_max)
            t = (fmem_region_tuning){.set = FMEM_REGION_TUNE_FETCH, .fetch = f};
        if (fmem_region_tune(c->r, &t) != 0)
            fail(c, "tune", f, 0, 0);
        i++;
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

Test(region_fetch, data_survives_fetch_size_changes_with_two_threads)
{
    struct ictx *c = calloc(1, sizeof *c);
    c->r = make(ISIZE, ICACHE, 0);
    c->base = fmem_region_base(c->r);
    c->shadow = calloc(NPAGES, sizeof *c->shadow);
    for (size_t p = 0; p < NPAGES; p++) { /* data in every page to start with */
        volatile uint64_t *w = (volatile uint64_t *)(c->base + p * PAGE);
        w[0] = c->shadow[p] = p + 1;
        w[PAGE / 8 - 1] = ~(p + 1);
    }
    cr_assert_eq(fmem_region_flush(c->r), 0);
    pthread_t t[2], tu;
    struct worker wk[2] = {{c, 0}, {c, 1}};
    cr_assert_eq(pthread_create(&tu, NULL, tuner_main, c), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, worker_main, &wk[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&c->stop, 1);
    pthread_join(tu, NULL);
    cr_assert_eq(atomic_load(&c->bad), 0, "%s", c->why);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(c->r, &st), 0);
    cr_assert_gt(st.evictions, 1000, "the data went through evictions");
    cr_assert_gt(st.releases, 0);
    /* every page once more, with the policy's fetch size */
    fmem_region_tuning none = {0};
    cr_assert_eq(fmem_region_tune(c->r, &none), 0);
    cr_assert_eq(fmem_region_flush(c->r), 0);
    for (size_t p = 0; p < NPAGES; p++)
        check_page(c, p, "final read");
    cr_assert_eq(atomic_load(&c->bad), 0, "%s", c->why);
    fmem_region_destroy(c->r);
    free(c->shadow);
    free(c);
}
