/* test_region.c - far-memory regions: data integrity against a local
 * shadow copy with a cache ten times smaller than the data (4 KiB and
 * 64 KiB fetch units, one thread and several), lazy allocation, release
 * (explicit and madvise), dirty tracking, prefetch, bad input. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "region_fixture.h"

TestSuite(region, .init = open_pool, .fini = close_pool, .timeout = 60);

/* Random reads and writes (up to 2 pages long) checked against a shadow. */
static void random_ops(unsigned char *mem, unsigned char *shadow, size_t size, unsigned ops,
                       uint64_t seed)
{
    for (unsigned i = 0; i < ops; i++) {
        size_t len = 1 + rnd(&seed) % 8192, off = rnd(&seed) % (size - len);
        if (rnd(&seed) & 1) {
            unsigned char v = (unsigned char)rnd(&seed);
            memset(mem + off, v, len);
            memset(shadow + off, v, len);
        } else if (memcmp(mem + off, shadow + off, len) != 0) {
            cr_assert_fail("mismatch in [%zu, %zu) after %u operations", off, off + len, i);
        }
    }
}

static void integrity(size_t unit, size_t size)
{
    fmem_region *r = make(size, size / 10, unit);
    unsigned char *mem = fmem_region_base(r), *shadow = calloc(1, size);
    random_ops(mem, shadow, size, 6000, 0x9e3779b97f4a7c15ull + unit);
    cr_assert(memcmp(mem, shadow, size) == 0, "final contents differ");
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert(memcmp(mem, shadow, size) == 0, "contents differ after flush");
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(r, &st), 0);
    cr_assert_gt(st.evictions, 0);
    cr_assert_gt(st.writebacks, 0);
    cr_assert_gt(st.fetches, 0);
    cr_assert_leq(st.cached_bytes, st.cache_bytes);
    cr_assert_leq(st.remote_bytes, size);
    cr_assert_eq(fmem_region_destroy(r), 0);
    cr_assert_eq(pool_bytes(), 0, "destroy gives every chunk back");
    free(shadow);
}

Test(region, integrity_4k_unit)
{
    integrity(4096, 4 << 20);
}

Test(region, integrity_64k_unit)
{
    integrity(64 << 10, 16 << 20);
}

/* Threads own interleaved 8-byte words, so they all write into the same
 * pages while units are evicted and written back under them. */
struct mt_arg {
    uint64_t *mem;
    size_t words;
    unsigned id, nthreads;
    int bad;
};

static void *mt_worker(void *p)
{
    struct mt_arg *a = p;
    size_t mine = a->words / a->nthreads;
    uint64_t *shadow = calloc(mine, sizeof *shadow), seed = 12345 + a->id;
    for (unsigned i = 0; i < 4000 && !a->bad; i++) {
        size_t k = rnd(&seed) % mine, w = k * a->nthreads + a->id;
        if (rnd(&seed) % 3) {
            uint64_t v = rnd(&seed);
            a->mem[w] = v;
            shadow[k] = v;
        } else if (a->mem[w] != shadow[k]) {
            a->bad = 1;
        }
    }
    for (size_t k = 0; k < mine && !a->bad; k++)
        if (a->mem[k * a->nthreads + a->id] != shadow[k])
            a->bad = 2;
    free(shadow);
    return NULL;
}

static void threaded(size_t unit)
{
    enum { T = 4 };
    size_t size = 4 << 20;
    fmem_region *r = make(size, size / 10, unit);
    pthread_t th[T];
    struct mt_arg a[T];
    for (unsigned i = 0; i < T; i++) {
        a[i] = (struct mt_arg){fmem_region_base(r), size / 8, i, T, 0};
        pthread_create(&th[i], NULL, mt_worker, &a[i]);
    }
    for (unsigned i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(a[i].bad, 0, "thread %u saw a wrong value (%d)", i, a[i].bad);
    }
    fmem_region_stats_t st;
    fmem_region_stats(r, &st);
    cr_assert_gt(st.evictions, 0);
    fmem_region_destroy(r);
}

Test(region, threads_interleaved_4k_unit)
{
    threaded(4096);
}

Test(region, threads_interleaved_16k_unit)
{
    threaded(16 << 10);
}

Test(region, unwritten_pages_read_zero_without_pool_space)
{
    size_t size = 8 << 20;
    fmem_region *r = make(size, 1 << 20, 16 << 10);
    const unsigned char *m = fmem_region_base(r);
    uint64_t sum = 0;
    for (size_t i = 0; i < size; i += 512)
        sum += m[i];
    cr_assert_eq(sum, 0);
    cr_assert_eq(pool_bytes(), 0, "reads allocate nothing");
    fmem_region_stats_t st;
    fmem_region_stats(r, &st);
    cr_assert_eq(st.remote_bytes, 0);
    cr_assert_eq(st.writebacks, 0);
    cr_assert_eq(st.fetches, 0);
    /* one byte written in a 64 KiB piece allocates that piece only */
    ((unsigned char *)fmem_region_base(r))[100 << 10] = 1;
    cr_assert_eq(pool_bytes(), 64 << 10);
    fmem_region_destroy(r);
}

static void fill(unsigned char *m, size_t from, size_t to)
{
    for (size_t i = from; i < to; i += 8)
        *(uint64_t *)(m + i) = i * 2654435761u + 1;
}

static int holds(const unsigned char *m, size_t from, size_t to)
{
    for (size_t i = from; i < to; i += 8)
        if (*(const uint64_t *)(m + i) != i * 2654435761u + 1)
            return 0;
    return 1;
}

static int zero(const unsigned char *m, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (m[i])
            return 0;
    return 1;
}

Test(region, release_half_gives_pool_space_back)
{
    size_t size = 16 << 20;
    fmem_region *r = make(size, 2 << 20, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    cr_assert_eq(pool_bytes(), size);
    cr_assert_eq(fmem_region_release(r, 0, size / 2), 0);
    cr_assert_eq(pool_bytes(), size / 2, "pool holds %llu", (unsigned long long)pool_bytes());
    cr_assert(zero(m, 0, size / 2), "released bytes read as zero");
    cr_assert(holds(m, size / 2, size), "the other half is intact");
    cr_assert_eq(pool_bytes(), size / 2, "reading released memory allocates nothing");
    fmem_region_stats_t st;
    fmem_region_stats(r, &st);
    cr_assert_eq(st.remote_bytes, size / 2);
    cr_assert_eq(st.remote_peak, size);
    cr_assert_eq(fmem_region_release(r, 0, size), 0);
    cr_assert_eq(pool_bytes(), 0);
    fmem_region_destroy(r);
}

Test(region, madvise_dontneed_is_a_release)
{
    size_t size = 8 << 20;
    fmem_region *r = make(size, 1 << 20, 4096);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(madvise(m + size / 4, size / 2, MADV_DONTNEED), 0);
    cr_assert_eq(fmem_region_flush(r), 0); /* also waits for the release */
    cr_assert_eq(pool_bytes(), size / 2);
    cr_assert(holds(m, 0, size / 4));
    cr_assert(zero(m, size / 4, 3 * size / 4));
    cr_assert(holds(m, 3 * size / 4, size));
    fmem_region_destroy(r);
}

/* 4 KiB released inside a 64 KiB unit: zero after eviction and refetch,
 * neighbours intact, chunk kept. */
Test(region, partial_unit_release)
{
    size_t size = 4 << 20, unit = 64 << 10;
    fmem_region *r = make(size, 1 << 20, unit);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    for (size_t u = 0; u < size; u += unit) /* cached and evicted ones */
        cr_assert_eq(fmem_region_release(r, u + 8192, 4096), 0);
    uint64_t before = pool_bytes();
    cr_assert_eq(before, size, "partly released chunks stay");
    for (int pass = 0; pass < 2; pass++) /* second pass after evictions */
        for (size_t u = 0; u < size; u += unit) {
            cr_assert(holds(m, u, u + 8192), "unit at %zu", u);
            cr_assert(zero(m, u + 8192, u + 12288), "unit at %zu, pass %d", u, pass);
            cr_assert(holds(m, u + 12288, u + unit), "unit at %zu", u);
        }
    fmem_region_destroy(r);
}

Test(region, clean_units_are_not_written_back)
{
    size_t size = 8 << 20;
    fmem_region *r = make(size, 1 << 20, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    fmem_region_stats(r, &a);
    for (int pass = 0; pass < 2; pass++)
        cr_assert(holds(m, 0, size));
    fmem_region_stats(r, &b);
    cr_assert_gt(b.evictions, a.evictions);
    cr_assert_eq(b.writebacks, a.writebacks, "reading must not dirty anything");
    cr_assert_eq(b.bytes_written, a.bytes_written);
    fmem_region_destroy(r);
}

Test(region, sequential_scan_is_prefetched)
{
    size_t size = 8 << 20;
    fmem_region *r = make(size, 1 << 20, 4096);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats_t a, b;
    fmem_region_stats(r, &a);
    cr_assert(holds(m, 0, size));
    fmem_region_stats(r, &b);
    uint64_t demand = b.fetches - a.fetches, ahead = b.prefetches - a.prefetches;
    cr_assert_gt(ahead, demand, "demand %llu, read ahead %llu", (unsigned long long)demand,
                 (unsigned long long)ahead);
    fmem_region_destroy(r);
}

Test(region, bad_configuration)
{
    fmem_region *r = (fmem_region *)1;
    fmem_region_config c = {.size = 1 << 20, .cache_bytes = 1 << 20};
    cr_assert_eq(fmem_region_create(NULL, &c, &r), FMEM_EINVAL);
    cr_assert_null(r);
    cr_assert_eq(fmem_region_create(pool, NULL, &r), FMEM_EINVAL);
    c.fetch_unit = 3000;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_EINVAL);
    c.fetch_unit = 2048;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_EINVAL);
    c.fetch_unit = 512 << 10;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_EINVAL);
    c.fetch_unit = 0;
    c.cache_bytes = 0;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_EINVAL);
    c.cache_bytes = 1 << 20;
    c.size = 0;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_ESIZE);
    c.size = SIZE_MAX;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_ESIZE);
    c.size = 1 << 20;
    c.flags = 1;
    cr_assert_eq(fmem_region_create(pool, &c, &r), FMEM_EINVAL);
}

Test(region, bad_release)
{
    size_t size = 1 << 20;
    fmem_region *r = make(size, size, 16 << 10);
    unsigned char *m = fmem_region_base(r);
    fill(m, 0, size);
    cr_assert_eq(fmem_region_release(r, 100, 4096), FMEM_EINVAL);
    cr_assert_eq(fmem_region_release(r, 4096, 100), FMEM_EINVAL);
    cr_assert_eq(fmem_region_release(r, size, 4096), FMEM_ERANGE);
    cr_assert_eq(fmem_region_release(r, 4096, size), FMEM_ERANGE);
    cr_assert_eq(fmem_region_release(r, SIZE_MAX & ~(size_t)4095, 4096), FMEM_ERANGE);
    cr_assert_eq(fmem_region_release(r, 0, 0), 0);
    cr_assert_eq(fmem_region_release(NULL, 0, 4096), FMEM_EINVAL);
    cr_assert(holds(m, 0, size), "refused releases change nothing");
    cr_assert_eq(fmem_region_destroy(NULL), FMEM_EINVAL);
    fmem_region_stats_t st;
    cr_assert_eq(fmem_region_stats(NULL, &st), FMEM_EINVAL);
    cr_assert_eq(fmem_region_stats(r, NULL), FMEM_EINVAL);
    fmem_region_destroy(r);
}
