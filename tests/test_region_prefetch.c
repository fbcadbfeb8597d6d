/* test_region_prefetch.c - the region's prefetch thread: sequential scans
 * whose read-ahead windows run into memory other threads write, release
 * and scan at the same time, under eviction (every byte checked against a
 * shadow copy); writing scans; regions destroyed while the prefetcher maps
 * a window (FMEM_REGION_PREFETCH_THREAD=1: the thread is off by default);
 * the same with it off. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "region_fixture.h"

TestSuite(region_prefetch, .init = open_pool, .fini = close_pool, .timeout = 180);

#define PAGE ((size_t)4096)

struct stripe {
    fmem_region *r;
    unsigned char *m, *shadow; /* region bytes of this stripe, its copy */
    size_t len;
    uint64_t seed;
    int rounds;
    int bad;
    size_t bad_at;
    const char *failed; /* a call that failed (asserted on the main thread) */
};

static int check(struct stripe *s)
{
    for (size_t i = 0; i < s->len; i += 8)
        if (*(volatile uint64_t *)(s->m + i) != *(uint64_t *)(s->shadow + i)) {
            s->bad = 1;
            s->bad_at = i;
            return 0;
        }
    return 1;
}

/* Each thread owns one stripe: it scans it (read-ahead runs on into the
 * next stripe), writes parts of it, writes it through, releases pages. */
static void *worker(void *p)
{
    struct stripe *s = p;
    for (int k = 0; k < s->rounds && !s->bad && !s->failed; k++) {
        uint64_t x = rnd(&s->seed);
        size_t pages = s->len / PAGE, a = x % pages, n = 1 + (x >> 20) % 64;
        if (a + n > pages)
            n = pages - a;
        switch (x >> 40 & 7) {
        case 0: case 1: case 2: /* sequential scan */
            check(s);
            break;
        case 3: { /* a few pages written */
            uint64_t v = rnd(&s->seed);
            for (size_t i = a * PAGE; i < (a + n) * PAGE; i += 8) {
                *(uint64_t *)(s->m + i) = v + i;
                *(uint64_t *)(s->shadow + i) = v + i;
            }
            break;
        }
        case 4: /* a writing scan: the window is mapped writable */
            for (size_t i = 0; i < s->len; i += 8) {
                uint64_t v = *(uint64_t *)(s->shadow + i) * 3 + 1;
                *(uint64_t *)(s->m + i) = v;
                *(uint64_t *)(s->shadow + i) = v;
            }
            break;
        case 5: { /* released through the region */
            size_t off = (size_t)(s->m - (unsigned char *)fmem_region_base(s->r)) + a * PAGE;
            if (fmem_region_release(s->r, off, n * PAGE) != 0)
                s->failed = "fmem_region_release";
            memset(s->shadow + a * PAGE, 0, n * PAGE);
            break;
        }
        case 6: /* released by the program itself */
            if (madvise(s->m + a * PAGE, n * PAGE, MADV_DONTNEED) != 0)
                s->failed = "madvise";
            memset(s->shadow + a * PAGE, 0, n * PAGE);
            break;
        default: /* a flush now and then */
            if ((x & 15) == 0 && fmem_region_flush(s->r) != 0)
                s->failed = "fmem_region_flush";
            else
                check(s);
            break;
        }
    }
    if (!s->bad)
        check(s);
    return NULL;
}

static void race(size_t size, size_t cache, size_t unit, unsigned nthreads, int rounds)
{
    if (!getenv("FMEM_REGION_PREFETCH_THREAD"))
        setenv("FMEM_REGION_PREFETCH_THREAD", "1", 1); /* off by default */
    fmem_region *r = make(size, cache, unit);
    unsigned char *m = fmem_region_base(r);
    unsigned char *shadow = malloc(size);
    cr_assert(shadow);
    for (size_t i = 0; i < size; i += 8) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull + 7;
        *(uint64_t *)(m + i) = v;
        *(uint64_t *)(shadow + i) = v;
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    struct stripe st[8];
    pthread_t th[8];
    size_t len = size / nthreads / PAGE * PAGE;
    for (unsigned t = 0; t < nthreads; t++) {
        st[t] = (struct stripe){r, m + t * len, shadow + t * len, len, 0x9e37 + t * 7919u, rounds,
                                0, 0, NULL};
        cr_assert_eq(pthread_create(&th[t], NULL, worker, &st[t]), 0);
    }
    for (unsigned t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    for (unsigned t = 0; t < nthreads; t++)
        cr_assert(!st[t].failed, "stripe %u: %s failed", t, st[t].failed ? st[t].failed : "");
    for (unsigned t = 0; t < nthreads; t++)
        cr_assert(!st[t].bad, "stripe %u differs from its copy at byte %zu", t, st[t].bad_at);
    fmem_region_stats_t s;
    cr_assert_eq(fmem_region_stats(r, &s), 0);
    cr_assert_gt(s.prefetches, 0, "nothing was read ahead");
    cr_assert_gt(s.evictions, 0, "nothing was evicted");
    /* the whole region once more, from one thread */
    cr_assert_eq(memcmp(m, shadow, nthreads * len), 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
    free(shadow);
}

Test(region_prefetch, scans_race_writes_releases_evictions)
{
    race((size_t)24 << 20, (size_t)3 << 20, 16 << 10, 3, 60);
}

Test(region_prefetch, small_units_many_threads)
{
    race((size_t)16 << 20, (size_t)2 << 20, 4 << 10, 4, 40);
}

Test(region_prefetch, large_units)
{
    race((size_t)32 << 20, (size_t)4 << 20, 64 << 10, 2, 40);
}

/* The same bytes with the read-ahead done by the handler itself. */
Test(region_prefetch, thread_off_same_bytes)
{
    setenv("FMEM_REGION_PREFETCH_THREAD", "0", 1);
    race((size_t)16 << 20, (size_t)2 << 20, 16 << 10, 3, 40);
    unsetenv("FMEM_REGION_PREFETCH_THREAD");
}

/* Destroy while the prefetcher is mapping a window: a scan opens one, the
 * region goes away right after its first faults. */
Test(region_prefetch, destroy_while_it_maps)
{
    setenv("FMEM_REGION_PREFETCH_THREAD", "1", 1);
    for (int k = 0; k < 30; k++) {
        fmem_region *r = make((size_t)16 << 20, (size_t)2 << 20, 16 << 10);
        unsigned char *m = fmem_region_base(r);
        for (size_t i = 0; i < ((size_t)16 << 20); i += PAGE)
            m[i] = (unsigned char)(i >> 12);
        cr_assert_eq(fmem_region_flush(r), 0);
        /* a sequential run from a unit long evicted: read-ahead starts */
        size_t from = (size_t)(k % 4) << 20, upto = from + ((size_t)(1 + k % 5) << 16);
        for (size_t i = from; i < upto; i += PAGE)
            cr_assert_eq(m[i], (unsigned char)(i >> 12), "byte %zu", i);
        cr_assert_eq(fmem_region_destroy(r), 0);
    }
}
