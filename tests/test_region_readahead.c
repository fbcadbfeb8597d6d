/* test_region_readahead.c - the region's read-ahead stream: scans racing
 * releases and evictions (content checked word by word), writing scans
 * mapped dirty without a write-protect fault per unit (and keeping the
 * bytes they do not write), random faults reading nothing ahead. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "region_fixture.h"

TestSuite(region_readahead, .init = open_pool, .fini = close_pool, .timeout = 120);

static uint64_t word(size_t i)
{
    return i * 2654435761u + 1;
}

static void fill(unsigned char *m, size_t from, size_t to)
{
    for (size_t i = from; i < to; i += 8)
        *(uint64_t *)(m + i) = word(i);
}

#define BLK ((size_t)64 << 10)
/* every fourth 64 KiB block may be released (and written again) */
static int releasable(size_t off)
{
    return (off / BLK) % 4 == 1;
}

struct race {
    fmem_region *r;
    unsigned char *m;
    size_t size;
    atomic_int stop;
    int bad;
    size_t bad_at;
    unsigned id;
};

/* Releases the releaser has made: scanners start after the first few,
 * so the race is run however the threads are scheduled. */
static _Atomic unsigned releases_made;

/* Sequential passes from a different start each: every word is the
 * pattern, or zero in a releasable block. */
static void *scanner(void *p)
{
    struct race *a = p;
    while (atomic_load(&releases_made) < 8)
        sched_yield();
    size_t words = a->size / 8, start = (a->id * a->size / 3) / 8;
    for (int pass = 0; pass < 3 && !a->bad; pass++)
        for (size_t k = 0; k < words; k++) {
            size_t i = ((start + k) % words) * 8;
            uint64_t v = *(volatile uint64_t *)(a->m + i);
            if (v != word(i) && !(v == 0 && releasable(i))) {
                a->bad = 1;
                a->bad_at = i;
                break;
            }
        }
    return NULL;
}

/* Release releasable blocks (both ways) and write some of them again. */
static void *releaser(void *p)
{
    struct race *a = p;
    uint64_t seed = 0x1234567;
    size_t nblk = a->size / BLK;
    while (!atomic_load(&a->stop)) {
        size_t b = rnd(&seed) % nblk;
        b = b - b % 4 + 1;
        if (b >= nblk)
            continue;
        size_t off = b * BLK, len = (1 + rnd(&seed) % 4) * 4096;
        if (rnd(&seed) & 1)
            len = BLK;
        int rc = rnd(&seed) % 3 ? fmem_region_release(a->r, off, len)
                                : madvise(a->m + off, len, MADV_DONTNEED);
        if (rc) {
            a->bad = 2;
            break;
        }
        atomic_fetch_add(&releases_made, 1);
        if (rnd(&seed) % 4 == 0)
            fill(a->m, off, off + BLK);
    }
    return NULL;
}

static void race(size_t unit)
{
    size_t size = 16 << 20;
    fmem_region *r = make(size, 2 << 20, unit);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    atomic_store(&releases_made, 0);
    enum { S = 2 };
    struct race a[S + 1];
    pthread_t th[S + 1];
    for (unsigned i = 0; i <= S; i++) {
        a[i] = (struct race){.r = r, .m = m, .size = size, .id = i};
        pthread_create(&th[i], NULL, i < S ? scanner : releaser, &a[i]);
    }
    for (unsigned i = 0; i < S; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(a[i].bad, 0, "scanner %u read a wrong word at %zu", i, a[i].bad_at);
    }
    atomic_store(&a[S].stop, 1);
    pthread_join(th[S], NULL);
    cr_assert_eq(a[S].bad, 0, "a release failed");
    for (size_t i = 0; i < size; i += 8) {
        uint64_t v = *(uint64_t *)(m + i);
        cr_assert(v == word(i) || (v == 0 && releasable(i)), "word at %zu", i);
    }
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.prefetches, 0);
    cr_assert_gt(st.evictions, 0);
    cr_assert_gt(st.releases, 0);
    cr_assert_eq(fmem_region_release(r, 0, size), 0);
    fmem_stats_t ps;
    cr_assert_eq(fmem_stats(pool, &ps), 0);
    cr_assert_eq(ps.allocated_bytes, 0, "every chunk is given back");
    fmem_region_destroy(r);
}

Test(region_readahead, races_releases_and_evictions_4k_unit)
{
    race(4096);
}

Test(region_readahead, races_releases_and_evictions_16k_unit)
{
    race(16 << 10);
}

Test(region_readahead, races_releases_and_evictions_64k_unit)
{
    race(64 << 10);
}

/* A scan that writes one word per 4 KiB page over evicted units: its
 * read-ahead is mapped dirty, so it does not take a write-protect fault on
 * each unit, and the words it does not write keep their values. */
Test(region_readahead, writing_scan_maps_units_dirty)
{
    size_t size = 8 << 20, unit = 16 << 10, units = size / unit;
    fmem_region *r = make(size, 1 << 20, unit);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    fmem_region_stats(r, &a);
    for (size_t i = 0; i < size; i += 4096)
        *(uint64_t *)(m + i) = ~word(i);
    fmem_region_stats(r, &b);
    uint64_t wp = b.wp_faults - a.wp_faults;
    cr_assert_lt(wp, units / 4, "%llu write-protect faults for %zu units",
                 (unsigned long long)wp, units);
    cr_assert_gt(b.prefetches, a.prefetches);
    for (size_t i = 0; i < size; i += 8)
        cr_assert_eq(*(uint64_t *)(m + i), i % 4096 ? word(i) : ~word(i), "word at %zu", i);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_destroy(r);
}

/* Random faults read nothing ahead (the window opens on sequential ones). */
Test(region_readahead, random_faults_read_nothing_ahead)
{
    size_t size = 16 << 20;
    fmem_region *r = make(size, 2 << 20, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    fmem_region_stats(r, &a);
    uint64_t seed = 99, sum = 0;
    for (int k = 0; k < 4000; k++)
        sum += *(volatile uint64_t *)(m + (rnd(&seed) % (size / 4096)) * 4096);
    (void)sum;
    fmem_region_stats(r, &b);
    uint64_t demand = b.fetches - a.fetches, ahead = b.prefetches - a.prefetches;
    cr_assert_gt(demand, 1000);
    cr_assert_lt(ahead * 20, demand, "demand %llu, read ahead %llu", (unsigned long long)demand,
                 (unsigned long long)ahead);
    fmem_region_destroy(r);
}

/* A writing scan over memory never written before takes no pool space for
 * what it does not write (fresh runs map zeros past its end without
 * any): releasing what was written gives every chunk back. */
Test(region_readahead, writing_readahead_allocates_nothing_unwritten)
{
    size_t size = 16 << 20, written = 2 << 20;
    fmem_region *r = make(size, 4 << 20, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, written);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_geq(st.zero_fills, written / (16 << 10));
    cr_assert_eq(fmem_region_release(r, 0, written), 0);
    fmem_stats_t ps;
    cr_assert_eq(fmem_stats(pool, &ps), 0);
    cr_assert_eq(ps.allocated_bytes, 0, "%llu bytes of pool held for units never written",
                 (unsigned long long)ps.allocated_bytes);
    fmem_region_destroy(r);
}
