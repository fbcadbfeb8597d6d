/* region_fixture.h - what the region tests share: an in-process pool per
 * test (the suite's .init/.fini), a region on it that skips the test where
 * userfaultfd is unavailable, the pool's allocated bytes and a xorshift
 * generator. Include after <criterion/criterion.h>, then declare
 * TestSuite(NAME, .init = open_pool, .fini = close_pool, ...). */
#ifndef FMEM_TESTS_REGION_FIXTURE_H
#define FMEM_TESTS_REGION_FIXTURE_H

#include <stdint.h>

#include <fmem.h>
#include <fmem_far.h>

static fmem_pool *pool;

static void open_pool(void)
{
    cr_assert_eq(fmem_open("mem:?size=128M", &pool), 0);
}
static void close_pool(void)
{
    fmem_close(pool);
}

static fmem_region *make(size_t size, size_t cache, size_t unit)
{
    fmem_region_config c = {.size = size, .cache_bytes = cache, .fetch_unit = unit};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "create: %s", fmem_strerror(rc));
    return r;
}

static inline uint64_t pool_bytes(void)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(pool, &st), 0);
    return st.allocated_bytes;
}

static inline uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#endif
