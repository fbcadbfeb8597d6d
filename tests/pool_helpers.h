/* pool_helpers.h - Criterion helpers shared by the core API tests: open a
 * pool, allocate, and read the pool's allocated bytes, failing the test with
 * fmem's message when a call that must succeed does not. */
#ifndef FMEM_TEST_POOL_HELPERS_H
#define FMEM_TEST_POOL_HELPERS_H

#include <criterion/criterion.h>

#include "fmem.h"

static inline fmem_pool *open_pool(const char *uri)
{
    fmem_pool *p = NULL;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", uri, fmem_strerror(rc));
    cr_assert_not_null(p);
    return p;
}

static inline uint64_t allocated_bytes(fmem_pool *p)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    return st.allocated_bytes;
}

static inline fmem_handle must_alloc(fmem_pool *p, size_t size)
{
    fmem_handle h;
    int rc = fmem_alloc(p, size, &h);
    cr_assert_eq(rc, 0, "fmem_alloc(%zu): %s", size, fmem_strerror(rc));
    return h;
}

#endif
