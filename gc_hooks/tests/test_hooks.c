/* test_hooks.c - the generic allocator, zlib's pair and lua_Alloc on a
 * binding: routing by owner, realloc semantics, fallback, spills. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "hooks_fixture.h"

static fmem_pool *pool;
static fmem_hooks *b;

static void setup(void)
{
    pool = fixture_pool("mem:?size=64M");
    b = fixture_binding(pool);
}

static void teardown(void)
{
    fmem_hooks_drop(b);
    fmem_close(pool);
}

TestSuite(generic, .init = setup, .fini = teardown);

Test(generic, malloc_and_free_use_the_heap)
{
    fmem_hooks_allocator a = fmem_hooks_allocator_of(b);
    void *p = a.malloc(a.ctx, 100), *q = a.malloc(a.ctx, 100000);
    cr_assert(fmem_hooks_owns(b, p) && fmem_hooks_owns(b, q));
    cr_assert(fmem_heap_usable_size(fmem_hooks_heap(b), q) >= 100000);
    a.free(a.ctx, p);
    a.free(a.ctx, q);
    a.free(a.ctx, NULL);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.mallocs, 2);
    cr_assert_eq(st.frees, 2);
    cr_assert_eq(st.foreign_frees, 0);
}

Test(generic, realloc_null_mallocs_and_zero_frees)
{
    unsigned char *p = fmem_hooks_realloc(b, NULL, 64);
    cr_assert(fmem_hooks_owns(b, p));
    cr_assert_null(fmem_hooks_realloc(b, p, 0));
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.mallocs, 1);
    cr_assert_eq(st.frees, 1);
}

Test(generic, growing_and_shrinking_keep_the_data)
{
    static const size_t sizes[] = {10, 5000, 100000, 50, 3 << 20, 70000, 10};
    size_t n = 10;
    unsigned char *p = fmem_hooks_malloc(b, n);
    fill(p, n, 7);
    for (size_t i = 1; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t m = sizes[i];
        p = fmem_hooks_realloc(b, p, m);
        cr_assert(p && fmem_hooks_owns(b, p), "realloc to %zu", m);
        cr_assert(filled(p, n < m ? n : m, 7), "data lost in realloc %zu -> %zu", n, m);
        fill(p, m, 7);
        n = m;
    }
    fmem_hooks_free(b, p);
}

Test(generic, calloc_zeroes_and_checks_overflow)
{
    unsigned char *p = fmem_hooks_malloc(b, 4096);
    memset(p, 0xff, 4096);
    fmem_hooks_free(b, p);
    unsigned char *z = fmem_hooks_calloc(b, 512, 8);
    cr_assert(fmem_hooks_owns(b, z));
    for (int i = 0; i < 4096; i++)
        cr_assert_eq(z[i], 0);
    fmem_hooks_free(b, z);
    volatile size_t big = SIZE_MAX / 2;
    cr_assert_null(fmem_hooks_calloc(b, big, 4));
}

/* a fallback that counts its calls */
static int fb_calls[4];
static void *fb_malloc(void *c, size_t n) { (void)c; fb_calls[0]++; return malloc(n); }
static void *fb_calloc(void *c, size_t n, size_t m) { (void)c; fb_calls[1]++; return calloc(n, m); }
static void *fb_realloc(void *c, void *p, size_t n) { (void)c; fb_calls[2]++; return realloc(p, n); }
static void fb_free(void *c, void *p) { (void)c; fb_calls[3]++; free(p); }
static const fmem_hooks_allocator counting = {
    .malloc = fb_malloc, .calloc = fb_calloc, .realloc = fb_realloc, .free = fb_free};

Test(generic, foreign_pointers_go_to_the_fallback)
{
    fmem_hooks_set_fallback(b, &counting);
    void *f = malloc(100); /* allocated before any hook: not the heap's */
    cr_assert(!fmem_hooks_owns(b, f));
    f = fmem_hooks_realloc(b, f, 200);
    cr_assert_eq(fb_calls[2], 1);
    fmem_hooks_free(b, f);
    cr_assert_eq(fb_calls[3], 1);
    cr_assert_eq(fixture_stats(b).foreign_frees, 2);
}

Test(generic, inactive_binding_allocates_from_the_fallback)
{
    fmem_hooks_set_fallback(b, &counting);
    void *in = fmem_hooks_malloc(b, 100);
    fmem_hooks_set_active(b, 0);
    cr_assert(!fmem_hooks_active(b));
    void *out = fmem_hooks_malloc(b, 100), *z = fmem_hooks_calloc(b, 10, 10);
    cr_assert(!fmem_hooks_owns(b, out) && !fmem_hooks_owns(b, z));
    cr_assert_eq(fb_calls[0], 1);
    cr_assert_eq(fb_calls[1], 1);
    fmem_hooks_free(b, in); /* still back to the heap */
    cr_assert_eq(fb_calls[3], 0);
    fmem_hooks_free(b, out);
    fmem_hooks_free(b, z);
    fmem_hooks_set_active(b, 1);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.fallback_allocs, 2);
    cr_assert_eq(st.frees, 1);
}

Test(generic, a_full_heap_spills_to_the_fallback)
{
    fmem_hooks *small;
    fmem_pool *tiny = fixture_pool("mem:?size=2M");
    small = fixture_binding(tiny);
    unsigned char *p = fmem_hooks_malloc(small, 100);
    fill(p, 100, 3);
    unsigned char *big = fmem_hooks_malloc(small, 8 << 20);
    cr_assert(big && !fmem_hooks_owns(small, big));
    memset(big, 1, 8 << 20);
    p = fmem_hooks_realloc(small, p, 16 << 20); /* moves out of the heap */
    cr_assert(p && !fmem_hooks_owns(small, p) && filled(p, 100, 3));
    fmem_hooks_stats_t st = fixture_stats(small);
    cr_assert_eq(st.spills, 2);
    fmem_hooks_free(small, big);
    fmem_hooks_free(small, p);
    cr_assert_eq(fixture_stats(small).foreign_frees, 2);
    fmem_hooks_drop(small);
    fmem_close(tiny);
}

Test(generic, zlib_pair)
{
    unsigned char *p = fmem_hooks_zalloc(b, 1000, 3);
    cr_assert(fmem_hooks_owns(b, p));
    fill(p, 3000, 1);
    fmem_hooks_zfree(b, p);
    cr_assert_eq(fixture_stats(b).frees, 1);
}

static void *churn(void *arg)
{
    fmem_hooks *bb = arg;
    void *slot[32] = {0};
    unsigned seed = 1;
    for (int i = 0; i < 20000; i++) {
        int k = rand_r(&seed) % 32;
        if (slot[k])
            fmem_hooks_free(bb, slot[k]);
        slot[k] = rand_r(&seed) % 4 ? fmem_hooks_malloc(bb, 1 + rand_r(&seed) % 2000)
                                    : fmem_hooks_realloc(bb, NULL, 20000);
    }
    for (int k = 0; k < 32; k++)
        fmem_hooks_free(bb, slot[k]);
    return NULL;
}

Test(generic, threads)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, b);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.mallocs, st.frees);
    cr_assert_eq(st.spills + st.foreign_frees, 0);
}

TestSuite(lua_alloc, .init = setup, .fini = teardown);

Test(lua_alloc, new_grow_shrink_free)
{
    /* new block: osize is a type tag (LUA_TTABLE = 5), not a size */
    unsigned char *p = fmem_hooks_lua_alloc(b, NULL, 5, 40);
    cr_assert(fmem_hooks_owns(b, p));
    fill(p, 40, 9);
    p = fmem_hooks_lua_alloc(b, p, 40, 100000);
    cr_assert(p && filled(p, 40, 9));
    fill(p, 100000, 9);
    p = fmem_hooks_lua_alloc(b, p, 100000, 24);
    cr_assert(p && filled(p, 24, 9));
    cr_assert_null(fmem_hooks_lua_alloc(b, p, 24, 0));
    cr_assert_null(fmem_hooks_lua_alloc(b, NULL, 0, 0)); /* free(NULL) */
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.mallocs, 1);
    cr_assert_eq(st.frees, 1);
}

static void *no_realloc(void *c, void *p, size_t n)
{
    (void)c, (void)p, (void)n;
    return NULL;
}

Test(lua_alloc, shrinking_never_fails)
{
    fmem_hooks_allocator failing = counting;
    failing.realloc = no_realloc;
    fmem_hooks_set_fallback(b, &failing);
    void *f = malloc(1000); /* a foreign block whose allocator refuses */
    cr_assert_eq(fmem_hooks_lua_alloc(b, f, 1000, 10), f);
    cr_assert_null(fmem_hooks_lua_alloc(b, f, 1000, 2000)); /* growing may */
    free(f);
}
