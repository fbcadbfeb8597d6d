/* test_closure.c - libffi closures: plain function pointers bound to a
 * binding, one per (binding, kind), freed with the binding. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "hooks_fixture.h"

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);

Test(closure, two_bindings_two_pools_two_pointers)
{
    fmem_pool *p1 = fixture_pool("mem:?size=16M"), *p2 = fixture_pool("mem:?size=16M");
    fmem_hooks *b1 = fixture_binding(p1), *b2 = fixture_binding(p2);
    malloc_fn m1 = (malloc_fn)fmem_hooks_closure(b1, FMEM_HOOKS_MALLOC);
    malloc_fn m2 = (malloc_fn)fmem_hooks_closure(b2, FMEM_HOOKS_MALLOC);
    free_fn f1 = (free_fn)fmem_hooks_closure(b1, FMEM_HOOKS_FREE);
    cr_assert(m1 && m2 && f1);
    cr_assert_neq((void *)m1, (void *)m2);
    cr_assert_eq((void *)m1, (void *)fmem_hooks_closure(b1, FMEM_HOOKS_MALLOC),
                 "same (binding, kind), same pointer");
    void *a = m1(1000), *c = m2(1000);
    cr_assert(fmem_hooks_owns(b1, a) && !fmem_hooks_owns(b2, a));
    cr_assert(fmem_hooks_owns(b2, c) && !fmem_hooks_owns(b1, c));
    f1(a);
    cr_assert_eq(fixture_stats(b1).frees, 1);
    ((free_fn)fmem_hooks_closure(b2, FMEM_HOOKS_FREE))(c);
    fmem_hooks_drop(b1);
    fmem_hooks_drop(b2);
    fmem_close(p1);
    fmem_close(p2);
}

Test(closure, every_kind)
{
    fmem_pool *p = fixture_pool("mem:?size=16M");
    fmem_hooks *b = fixture_binding(p);
    void *(*cal)(size_t, size_t) = (void *(*)(size_t, size_t))fmem_hooks_closure(b, FMEM_HOOKS_CALLOC);
    void *(*re)(void *, size_t) = (void *(*)(void *, size_t))fmem_hooks_closure(b, FMEM_HOOKS_REALLOC);
    char *(*sd)(const char *) = (char *(*)(const char *))fmem_hooks_closure(b, FMEM_HOOKS_STRDUP);
    free_fn fr = (free_fn)fmem_hooks_closure(b, FMEM_HOOKS_FREE);
    unsigned char *z = cal(100, 10);
    cr_assert(fmem_hooks_owns(b, z));
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(z[i], 0);
    fill(z, 1000, 4);
    z = re(z, 50000);
    cr_assert(fmem_hooks_owns(b, z) && filled(z, 1000, 4));
    cr_assert_null(re(z, 0));
    char *s = sd("far memory");
    cr_assert(fmem_hooks_owns(b, s));
    cr_assert_str_eq(s, "far memory");
    fr(s);

    fmem_hooks_gmp_fns g;
    cr_assert_eq(fmem_hooks_gmp(b, &g), 0);
    unsigned char *q = g.alloc(64);
    fill(q, 64, 2);
    q = g.realloc(q, 64, 9000);
    cr_assert(fmem_hooks_owns(b, q) && filled(q, 64, 2));
    g.free(q, 9000);

    void *(*om)(size_t, const char *, int) =
        (void *(*)(size_t, const char *, int))fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_MALLOC);
    void *(*orr)(void *, size_t, const char *, int) =
        (void *(*)(void *, size_t, const char *, int))fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_REALLOC);
    void (*of)(void *, const char *, int) =
        (void (*)(void *, const char *, int))fmem_hooks_closure(b, FMEM_HOOKS_FILELINE_FREE);
    void *o = om(10, __FILE__, __LINE__);
    o = orr(o, 20000, __FILE__, __LINE__);
    cr_assert(fmem_hooks_owns(b, o));
    of(o, __FILE__, __LINE__);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.closures, 10);
    cr_assert_eq(st.mallocs, st.frees);
    fmem_hooks_drop(b);
    fmem_close(p);
}

Test(closure, dropping_frees_the_closures)
{
    uint64_t before = fmem_hooks_closures_alive();
    fmem_pool *p = fixture_pool("mem:?size=16M");
    fmem_hooks *b = fixture_binding(p);
    for (int k = FMEM_HOOKS_MALLOC; k < FMEM_HOOKS_KINDS; k++)
        cr_assert_not_null(fmem_hooks_closure(b, (fmem_hooks_kind)k));
    cr_assert_eq(fmem_hooks_closures_alive(), before + FMEM_HOOKS_KINDS - 1);
    fmem_hooks_drop(b);
    cr_assert_eq(fmem_hooks_closures_alive(), before);
    fmem_close(p);
}

Test(closure, unknown_kind)
{
    fmem_pool *p = fixture_pool("mem:?size=16M");
    fmem_hooks *b = fixture_binding(p);
    errno = 0;
    cr_assert_null(fmem_hooks_closure(b, (fmem_hooks_kind)0));
    cr_assert_null(fmem_hooks_closure(b, FMEM_HOOKS_KINDS));
    cr_assert_eq(errno, EINVAL);
    fmem_hooks_drop(b);
    fmem_close(p);
}

static malloc_fn shared_malloc;
static free_fn shared_free;
static void *caller(void *arg)
{
    (void)arg;
    for (int i = 0; i < 5000; i++) {
        void *x = shared_malloc(16 + (size_t)i % 300);
        memset(x, 1, 16);
        shared_free(x);
    }
    return NULL;
}

Test(closure, called_from_threads)
{
    fmem_pool *p = fixture_pool("mem:?size=16M");
    fmem_hooks *b = fixture_binding(p);
    shared_malloc = (malloc_fn)fmem_hooks_closure(b, FMEM_HOOKS_MALLOC);
    shared_free = (free_fn)fmem_hooks_closure(b, FMEM_HOOKS_FREE);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, caller, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_eq(st.mallocs, 20000);
    cr_assert_eq(st.frees, 20000);
    fmem_hooks_drop(b);
    fmem_close(p);
}
