/* hooks_fixture.h - a private pool and a binding on a heap over it, for
 * the hook tests. */
#ifndef HOOKS_FIXTURE_H
#define HOOKS_FIXTURE_H

#include <criterion/criterion.h>
#include <fmem_hooks.h>

static inline fmem_pool *fixture_pool(const char *uri)
{
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", uri, fmem_strerror(rc));
    return p;
}

static inline fmem_hooks *fixture_binding(fmem_pool *p)
{
    fmem_hooks *b;
    int rc = fmem_hooks_new_pool(p, &b);
    cr_assert_eq(rc, 0, "fmem_hooks_new_pool: %s", fmem_strerror(rc));
    return b;
}

static inline fmem_hooks_stats_t fixture_stats(fmem_hooks *b)
{
    fmem_hooks_stats_t st;
    cr_assert_eq(fmem_hooks_stats(b, &st), 0);
    return st;
}

static inline void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed);
}

static inline int filled(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed))
            return 0;
    return 1;
}

/* The pool's data range: a mapped block's address minus its offset. */
static inline void fixture_pool_range(fmem_pool *p, uintptr_t *lo, uintptr_t *hi)
{
    fmem_handle h;
    void *ptr;
    fmem_stats_t st;
    cr_assert_eq(fmem_alloc(p, FMEM_CHUNK_SIZE, &h), 0);
    cr_assert_eq(fmem_map(p, &h, &ptr), 0);
    cr_assert_eq(fmem_stats(p, &st), 0);
    *lo = (uintptr_t)ptr - h.addr;
    *hi = *lo + st.capacity_bytes;
    fmem_free(p, &h);
}

#endif
