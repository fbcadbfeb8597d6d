/* test_region_ahead.c - read-ahead the program has not reached yet under
 * eviction: the writer drops cold units a 2 MiB window at a time, and
 * read-ahead is mapped without a reference bit; units a scan has not
 * reached must stay (counted by fmem_region_stats' ahead_unused and
 * ahead_window), while the hand, releases and discards still drop them.
 * Data is checked against a shadow copy through read-ahead, evictions,
 * releases and flushes from two threads, with read-ahead on the handler
 * and on the prefetch thread. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "region_fixture.h"

TestSuite(region_ahead, .init = open_pool, .fini = close_pool, .timeout = 180);

#define PAGE ((size_t)4096)

static void prefetch_thread(int on)
{
    setenv("FMEM_REGION_PREFETCH_THREAD", on ? "1" : "0", 1);
}

static uint64_t pattern(size_t i)
{
    return i * 0x9e3779b97f4a7c15ull + 3;
}

/* A region of `size` bytes in 16 KiB units with a `cache`-byte cache,
 * every page stamped with pattern() and flushed to the pool. */
static fmem_region *filled(size_t size, size_t cache)
{
    fmem_region *r = make(size, cache, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    for (size_t i = 0; i < size; i += PAGE)
        *(uint64_t *)(m + i) = pattern(i);
    cr_assert_eq(fmem_region_flush(r), 0);
    return r;
}

/* Sequential passes over a region whose cache (1 MiB, 64 units) is half an
 * eviction window: the victims behind the scan share their window with
 * the read-ahead in front of it. Every page is checked. */
static void scan_past_window(int pf_thread)
{
    prefetch_thread(pf_thread);
    size_t size = (size_t)16 << 20, unit = 16 << 10;
    fmem_region *r = filled(size, (size_t)1 << 20);
    unsigned char *m = fmem_region_base(r);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    /* three passes; more (up to 12) while nothing was read ahead yet: a
     * prefetch thread starved of CPU by a loaded machine may not have run
     * at all, and without read-ahead the window check would prove nothing */
    for (int pass = 0; pass < 12; pass++) {
        for (size_t i = 0; i < size; i += PAGE)
            cr_assert_eq(*(volatile uint64_t *)(m + i), pattern(i), "page at %zu", i);
        cr_assert_eq(fmem_region_stats(r, &b), 0);
        if (pass >= 2 && b.prefetches > a.prefetches)
            break;
    }
    uint64_t ahead = b.prefetches - a.prefetches, unused = b.ahead_unused - a.ahead_unused;
    uint64_t window = b.ahead_window - a.ahead_window;
    /* (a prefetch thread starved of CPU may read ahead little) */
    cr_assert_gt(ahead, 0, "the scans read ahead");
    cr_assert_gt(b.evictions - a.evictions, 2 * size / unit, "the scans evicted");
    cr_assert_eq(window, 0,
                 "%llu read-ahead units dropped with a window before the scan got there "
                 "(%llu of %llu thrown away unused, %llu fetched on demand)",
                 (unsigned long long)window, (unsigned long long)unused,
                 (unsigned long long)ahead, (unsigned long long)(b.fetches - a.fetches));
    /* the last window of each pass is reached without a fault after it,
     * so it may count as unused. With the prefetch thread the hand still
     * takes some read-ahead before the scan gets there (a program fault
     * on a unit the prefetcher maps is not seen by the stream detector);
     * before eviction windows left unreached read-ahead, 32-44 % of it
     * counted as thrown away here (handler: 8-14 %), after 6-23 %
     * (handler: under 1 %) */
    unsigned most_pct = pf_thread ? 50 : 5;
    cr_assert_leq(unused * 100, ahead * most_pct,
                  "%llu of %llu read-ahead units thrown away unused (%llu fetched on demand)",
                  (unsigned long long)unused, (unsigned long long)ahead,
                  (unsigned long long)(b.fetches - a.fetches));
    cr_assert_eq(fmem_region_destroy(r), 0);
}

Test(region_ahead, scan_keeps_read_ahead_through_window_drops)
{
    scan_past_window(0);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

Test(region_ahead, scan_keeps_read_ahead_through_window_drops_prefetch_thread)
{
    scan_past_window(1);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

/* A cache full of read-ahead nobody reaches: short sequential runs (each
 * opens a window) that jump away, over far more data than the cache holds.
 * The hand must still evict the untouched read-ahead (no hang), and the
 * data stays right. */
Test(region_ahead, untouched_read_ahead_is_evicted_eventually)
{
    prefetch_thread(0);
    size_t size = (size_t)32 << 20, unit = 16 << 10;
    fmem_region *r = filled(size, (size_t)1 << 20);
    unsigned char *m = fmem_region_base(r);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    uint64_t seed = 0x5eed;
    for (int k = 0; k < 400; k++) {
        /* 6 units in a row from a random unit: the stream is confirmed and
         * reads ahead, then the program goes elsewhere */
        size_t u = rnd(&seed) % (size / unit - 8);
        for (size_t i = u * unit; i < (u + 6) * unit; i += PAGE)
            cr_assert_eq(*(volatile uint64_t *)(m + i), pattern(i), "page at %zu", i);
    }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_gt(b.prefetches - a.prefetches, 0, "read-ahead happened");
    cr_assert_gt(b.ahead_unused - a.ahead_unused, 0,
                 "read-ahead never reached was evicted (the hand still takes it)");
    cr_assert_leq(b.cached_bytes, b.cache_bytes);
    cr_assert_eq(fmem_region_destroy(r), 0);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

/* Read-ahead released before the program reaches it is dropped: it reads
 * as zeros, and the data before it stays. */
Test(region_ahead, release_drops_unreached_read_ahead)
{
    prefetch_thread(0);
    size_t size = (size_t)8 << 20, unit = 16 << 10;
    fmem_region *r = filled(size, (size_t)2 << 20);
    unsigned char *m = fmem_region_base(r);
    /* push the data out: scan the second half */
    for (size_t i = size / 2; i < size; i += PAGE)
        cr_assert_eq(*(volatile uint64_t *)(m + i), pattern(i));
    /* a scan over the first 16 units opens read-ahead beyond them */
    for (size_t i = 0; i < 16 * unit; i += PAGE)
        cr_assert_eq(*(volatile uint64_t *)(m + i), pattern(i));
    fmem_region_stats_t a;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    cr_assert_gt(a.prefetches, 0);
    cr_assert_eq(fmem_region_release(r, 16 * unit, size / 2 - 16 * unit), 0);
    for (size_t i = 16 * unit; i < size / 2; i += PAGE)
        cr_assert_eq(*(volatile uint64_t *)(m + i), 0, "released page at %zu", i);
    for (size_t i = 0; i < 16 * unit; i += PAGE)
        cr_assert_eq(*(volatile uint64_t *)(m + i), pattern(i));
    cr_assert_eq(fmem_region_destroy(r), 0);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

/* ---- integrity: two threads, each on its own 256 KiB stripes interleaved
 * with the other's (so eviction windows hold both threads' units), scan
 * their stripes in order (read-ahead), write, release and flush, every
 * byte checked against a shadow copy. */

#define STRIPE ((size_t)256 << 10)

struct worker {
    fmem_region *r;
    unsigned char *m, *shadow;
    size_t size;
    unsigned id; /* owns stripes id, id + 2, ... */
    uint64_t seed;
    int bad;
    size_t bad_at;
    const char *failed;
};

static int check_stripes(struct worker *w)
{
    for (size_t s = w->id * STRIPE; s < w->size; s += 2 * STRIPE)
        for (size_t i = s; i < s + STRIPE; i += 8)
            if (*(volatile uint64_t *)(w->m + i) != *(uint64_t *)(w->shadow + i)) {
                w->bad = 1;
                w->bad_at = i;
                return 0;
            }
    return 1;
}

static void *worker_main(void *p)
{
    struct worker *w = p;
    size_t nstripes = w->size / STRIPE / 2;
    for (int round = 0; round < 12 && !w->bad && !w->failed; round++) {
        if (!check_stripes(w))
            break;
        for (int k = 0; k < 64; k++) { /* scattered writes */
            size_t s = (rnd(&w->seed) % nstripes * 2 + w->id) * STRIPE;
            size_t i = s + rnd(&w->seed) % (STRIPE / 8) * 8;
            uint64_t v = rnd(&w->seed);
            *(uint64_t *)(w->m + i) = v;
            *(uint64_t *)(w->shadow + i) = v;
        }
        for (int k = 0; k < 4; k++) { /* releases: pages to whole units */
            size_t s = (rnd(&w->seed) % nstripes * 2 + w->id) * STRIPE;
            size_t len = (1 + rnd(&w->seed) % 16) * PAGE;
            size_t off = s + rnd(&w->seed) % ((STRIPE - len) / PAGE + 1) * PAGE;
            if (fmem_region_release(w->r, off, len)) {
                w->failed = "fmem_region_release";
                break;
            }
            memset(w->shadow + off, 0, len);
        }
        if (round % 4 == 3 && fmem_region_flush(w->r))
            w->failed = "fmem_region_flush";
    }
    if (!w->bad && !w->failed)
        check_stripes(w);
    return NULL;
}

static void two_threads(int pf_thread)
{
    prefetch_thread(pf_thread);
    size_t size = (size_t)16 << 20;
    fmem_region *r = make(size, (size_t)2 << 20, 16 << 10);
    unsigned char *m = fmem_region_base(r), *shadow = malloc(size);
    cr_assert(shadow);
    for (size_t i = 0; i < size; i += 8) {
        *(uint64_t *)(m + i) = pattern(i);
        *(uint64_t *)(shadow + i) = pattern(i);
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    struct worker w[2];
    pthread_t th[2];
    for (unsigned t = 0; t < 2; t++) {
        w[t] = (struct worker){.r = r, .m = m, .shadow = shadow, .size = size, .id = t,
                               .seed = 0xabcdef + t * 7919u};
        cr_assert_eq(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
    }
    for (unsigned t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    for (unsigned t = 0; t < 2; t++) {
        cr_assert(!w[t].failed, "thread %u: %s failed", t, w[t].failed);
        cr_assert(!w[t].bad, "thread %u: byte %zu differs from its copy", t, w[t].bad_at);
    }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_gt(b.prefetches - a.prefetches, 0, "nothing was read ahead");
    cr_assert_gt(b.evictions - a.evictions, 0, "nothing was evicted");
    cr_assert_gt(b.releases - a.releases, 0, "nothing was released");
    cr_assert_eq(memcmp(m, shadow, size), 0, "the whole region once more");
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(shadow);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

Test(region_ahead, two_threads_read_ahead_evictions_releases)
{
    two_threads(0);
}

Test(region_ahead, two_threads_read_ahead_evictions_releases_prefetch_thread)
{
    two_threads(1);
}
