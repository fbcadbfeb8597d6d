/* test_region_fresh.c - fresh memory at first touch, and a region heap's
 * freed pages kept for reuse:
 *  - a first touch of fresh memory maps a long run of zero units (longer
 *    than the handler's staging buffer) while another thread writes and
 *    releases units inside that run: every byte checked by its owner;
 *  - a region heap reuses the pages of a freed object without a fault,
 *    calloc over them still gives zeros, and fmem_heap_collect gives them
 *    back to the region. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "region_fixture.h"

TestSuite(region_fresh, .init = open_pool, .fini = close_pool, .timeout = 120);

#define UNIT 16384
#define BLOCK ((size_t)1 << 20) /* a fresh run: 64 units */
#define HALF (BLOCK / 2)

struct racer {
    unsigned char *m;
    fmem_region *r;
    size_t nblocks;
    int second; /* owns the second half of each block */
    atomic_int *stop;
    int bad;
};

/* The first half of each block: touched first (a fault maps the run over
 * both halves), checked, released whole so it is fresh again. The second
 * half: written a page at a time and released in pieces meanwhile. */
static void *race(void *arg)
{
    struct racer *t = arg;
    uint64_t s = t->second ? 77 : 99;
    for (unsigned round = 0; round < 200 && !atomic_load(t->stop); round++) {
        size_t b = rnd(&s) % t->nblocks;
        unsigned char *p = t->m + b * BLOCK + (t->second ? HALF : 0);
        unsigned char v = (unsigned char)(round + 1 + t->second * 100);
        if (!t->second) {
            for (size_t off = 0; off < HALF; off += 4096)
                p[off] = v;
            for (size_t off = 0; off < HALF; off += 4096)
                t->bad += p[off] != v;
            t->bad += fmem_region_release(t->r, (size_t)(p - t->m), HALF) != 0;
            for (size_t off = 0; off < HALF; off += 4096 * 7)
                t->bad += p[off] != 0;
        } else {
            size_t piece = (rnd(&s) % 8 + 1) * 4096; /* partial and whole units */
            for (size_t off = 0; off < HALF; off += piece) {
                size_t n = off + piece > HALF ? HALF - off : piece;
                memset(p + off, v, n);
                t->bad += p[off] != v || p[off + n - 1] != v;
                t->bad += fmem_region_release(t->r, (size_t)(p + off - t->m), n) != 0;
                t->bad += p[off] != 0 || p[off + n - 1] != 0;
            }
        }
    }
    return NULL;
}

Test(region_fresh, long_fresh_runs_race_releases)
{
    size_t nblocks = 16, size = nblocks * BLOCK;
    fmem_region *r = make(size, size, UNIT); /* room: fresh runs are long */
    atomic_int stop = 0;
    struct racer t[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        t[i] = (struct racer){.m = fmem_region_base(r), .r = r, .nblocks = nblocks,
                              .second = i, .stop = &stop};
        cr_assert_eq(pthread_create(&th[i], NULL, race, &t[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    cr_assert_eq(t[0].bad, 0, "first halves: %d wrong", t[0].bad);
    cr_assert_eq(t[1].bad, 0, "second halves: %d wrong", t[1].bad);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.zero_fills, 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* A write to fresh memory maps well beyond the staging buffer's 128 KiB
 * when the cache has room: a 4 MiB first-touch write takes a few faults. */
Test(region_fresh, fresh_write_maps_long_runs)
{
    size_t size = (size_t)8 << 20;
    fmem_region *r = make(size, size, UNIT);
    unsigned char *m = fmem_region_base(r);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    memset(m, 0x5a, (size_t)4 << 20);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t faults = b.missing_faults - a.missing_faults;
    cr_assert_leq(faults, 8, "%llu faults for 4 MiB", (unsigned long long)faults);
    for (size_t off = 0; off < ((size_t)4 << 20); off += 4096)
        cr_assert_eq(m[off], 0x5a);
    cr_assert_eq(m[(size_t)4 << 20], 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* Memory never written is read ahead only a little past the stream's last
 * fault: a program that fills a new array and frees it gets zeros mapped
 * for what it writes and at most FRESH_AHEAD_BYTES (2 MiB) plus a fresh
 * run past its end. A read-ahead window grows to a quarter of the cache,
 * and one over fresh memory used to map zeros that far past the end of
 * the array (here 17 588 units for 12 288 written; in a pandas run
 * 4.4 GiB). */
Test(region_fresh, fresh_memory_is_read_ahead_only_near_the_writer)
{
    size_t size = (size_t)1 << 30, len = (size_t)48 << 20, rounds = 4;
    /* windows that may grow to 256 MiB, as the policy lets them where the
     * cache is large */
    fmem_region_config c = {.size = size, .cache_bytes = size, .fetch_unit = UNIT,
                            .prefetch = (256 << 20) / UNIT};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "create: %s", fmem_strerror(rc));
    unsigned char *m = fmem_region_base(r);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (size_t k = 0; k < rounds; k++) {
        size_t at = k * ((size_t)256 << 20);
        for (size_t off = 0; off < len; off += 4096)
            m[at + off] = (unsigned char)(k + 1);
        for (size_t off = 0; off < len; off += 4096 * 5)
            cr_assert_eq(m[at + off], (unsigned char)(k + 1));
        usleep(50000); /* an open read-ahead window would run on meanwhile */
        cr_assert_eq(fmem_region_release(r, at, (size_t)256 << 20), 0);
    }
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    uint64_t zeros = b.zero_fills - a.zero_fills,
             most = rounds * ((len + ((size_t)2 << 20) + BLOCK) / UNIT);
    cr_assert_leq(zeros, most, "%llu units zero-filled, at most %llu wanted",
                  (unsigned long long)zeros, (unsigned long long)most);
    cr_assert_geq(zeros, rounds * (len / UNIT));
    cr_assert_eq(fmem_region_destroy(r), 0);
}

Test(region_fresh, heap_reuses_freed_pages_and_collect_releases_them)
{
    size_t size = (size_t)64 << 20;
    fmem_region *r = make(size, size, UNIT);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    size_t n = (size_t)1 << 20;
    unsigned char *p = fmem_heap_malloc(h, n);
    cr_assert_not_null(p);
    memset(p, 0xab, n);
    cr_assert_eq(fmem_heap_free(h, p), 0);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    unsigned char *q = fmem_heap_malloc(h, n);
    cr_assert_eq(q, p, "the freed pages are reused");
    memset(q, 0xcd, n);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_eq(b.missing_faults, a.missing_faults, "reuse costs no fault");
    cr_assert_eq(b.releases, a.releases, "nor a release");
    cr_assert_eq(fmem_heap_free(h, q), 0);
    /* calloc over held pages: zeros all the same */
    unsigned char *z = fmem_heap_calloc(h, 1, n - 4096);
    cr_assert_eq(z, p);
    for (size_t i = 0; i < n - 4096; i++)
        cr_assert_eq(z[i], 0, "byte %zu", i);
    memset(z, 0xee, n - 4096);
    cr_assert_eq(fmem_heap_free(h, z), 0);
    /* collect: held pages go back to the region, which frees their chunks */
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    cr_assert_gt(a.remote_bytes, 0);
    fmem_heap_collect(h);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_gt(b.releases, a.releases);
    cr_assert_eq(b.remote_bytes, 0, "%llu bytes left", (unsigned long long)b.remote_bytes);
    for (size_t i = 0; i < n; i += 512)
        cr_assert_eq(p[i], 0, "released pages read as zeros");
    fmem_heap_destroy(h);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* Beyond the budget (1/8 of the cache) freed pages go back at once: a
 * heap never holds more than that. */
Test(region_fresh, held_pages_stay_within_budget)
{
    size_t size = (size_t)64 << 20, cache = (size_t)8 << 20;
    fmem_region *r = make(size, cache, UNIT);
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_region(r, &h), 0);
    enum { N = 16 };
    unsigned char *p[N];
    size_t n = 512 * 1024; /* 8 MiB in all, the budget is 1 MiB */
    for (int i = 0; i < N; i++) {
        p[i] = fmem_heap_malloc(h, n);
        cr_assert_not_null(p[i]);
        memset(p[i], i + 1, n);
    }
    cr_assert_eq(fmem_region_flush(r), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(fmem_heap_free(h, p[i]), 0);
    /* released pages read as zeros; held ones keep their data */
    size_t kept = 0;
    for (int i = 0; i < N; i++)
        for (size_t off = 0; off < n; off += 4096)
            kept += p[i][off] != 0;
    cr_assert_leq(kept * 4096, cache / 8, "%zu pages still held", kept);
    fmem_heap_destroy(h);
    for (int i = 0; i < N; i++)
        for (size_t off = 0; off < n; off += 4096)
            cr_assert_eq(p[i][off], 0, "a destroyed heap holds nothing");
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* A write to fresh memory maps the units after it writable along with it
 * (a 1 MiB run); a flush writes back the one that was written and takes
 * no pool space for the others, which hold only zeros. */
Test(region_fresh, flush_takes_no_pool_space_for_unwritten_fresh_units)
{
    size_t size = (size_t)8 << 20;
    fmem_region *r = make(size, size, UNIT);
    unsigned char *m = fmem_region_base(r);
    m[100] = 7; /* maps a run of up to 64 units, writable */
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.remote_bytes, 64 * 1024, "%llu pool bytes for one written unit",
                 (unsigned long long)st.remote_bytes);
    cr_assert_leq(st.writebacks, 1);
    cr_assert_eq(m[100], 7);
    m[UNIT * 20] = 9; /* a unit of the run written after the flush */
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_eq(st.remote_bytes, 2 * 64 * 1024);
    cr_assert_eq(m[UNIT * 20], 9);
    cr_assert_eq(m[UNIT * 21], 0);
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* Fresh units are mapped writable even when a read brought them in: a
 * program that reads new memory before it writes it (a buffer checked,
 * then filled) takes no write-protect fault per unit. (Mapped
 * write-protected before, each unit took one.) */
Test(region_fresh, write_after_read_of_fresh_memory_takes_no_write_protect_fault)
{
    size_t size = (size_t)8 << 20, len = (size_t)1 << 20;
    fmem_region *r = make(size, size, UNIT);
    volatile unsigned char *m = fmem_region_base(r);
    unsigned sum = 0;
    for (size_t off = 0; off < len; off += 4096)
        sum += m[off];
    cr_assert_eq(sum, 0);
    fmem_region_stats_t a, b;
    cr_assert_eq(fmem_region_stats(r, &a), 0);
    for (size_t off = 0; off < len; off += 4096)
        m[off] = (unsigned char)(off / 4096 + 1);
    cr_assert_eq(fmem_region_stats(r, &b), 0);
    cr_assert_eq(b.wp_faults - a.wp_faults, 0, "%llu write-protect faults writing %zu units",
                 (unsigned long long)(b.wp_faults - a.wp_faults), len / UNIT);
    for (size_t off = 0; off < len; off += 4096)
        cr_assert_eq(m[off], (unsigned char)(off / 4096 + 1));
    cr_assert_eq(fmem_region_destroy(r), 0);
}

/* Units read fresh and mapped writable, some of them written later,
 * through evictions and flushes of a small cache: every byte matches a
 * shadow copy, and only the units written take pool space. */
Test(region_fresh, fresh_units_read_then_some_written_through_evictions)
{
    size_t size = (size_t)8 << 20, nunits = size / UNIT;
    fmem_region *r = make(size, (size_t)1 << 20, UNIT); /* 64 units cached */
    volatile unsigned char *m = fmem_region_base(r);
    unsigned char *shadow = calloc(nunits, 1);
    cr_assert_not_null(shadow);
    for (unsigned pass = 1; pass <= 4; pass++) {
        for (size_t u = 0; u < nunits; u++) /* a read first, everywhere */
            cr_assert_eq(m[u * UNIT + 4096 * (u % 4)], shadow[u], "pass %u unit %zu", pass, u);
        for (size_t u = 0; u < nunits; u += 8) { /* every 8th unit: one per chunk */
            shadow[u] = (unsigned char)(pass * 31 + u);
            m[u * UNIT + 4096 * (u % 4)] = shadow[u];
        }
        if (pass % 2 == 0)
            cr_assert_eq(fmem_region_flush(r), 0);
    }
    for (size_t u = 0; u < nunits; u++)
        cr_assert_eq(m[u * UNIT + 4096 * (u % 4)], shadow[u], "unit %zu", u);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.evictions, nunits, "the cache was too large to evict");
    cr_assert_leq(st.remote_bytes, (nunits / 8) * 64 * 1024, "%llu pool bytes",
                  (unsigned long long)st.remote_bytes);
    free(shadow);
    cr_assert_eq(fmem_region_destroy(r), 0);
}
