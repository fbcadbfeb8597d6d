/* gmp_far.c - GMP computing with big numbers whose limbs live in far
 * memory. GMP's allocation hooks (mp_set_memory_functions) take plain
 * function pointers without a context; fmem_hooks_gmp() makes three such
 * pointers bound to a heap on an fmem pool (libffi closures). The example
 * computes a factorial, a Fibonacci number and a power with GMP's own
 * allocator, then again with the pool's, checks that the results agree and
 * that every result's limbs lie inside the pool's mapped data, and exits 0
 * when all of that holds (so it runs as a test too). */
#include <fmem.h>
#include <fmem_hooks.h>
#include <gmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void check(int ok, const char *what)
{
    printf("  %-58s %s\n", what, ok ? "yes" : "NO");
    failures += !ok;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "gmp_far: %s: %s\n", what, fmem_strerror(rc));
    exit(1);
}

/* Where the pool's data is mapped: one block's address minus its offset. */
static void pool_range(fmem_pool *pool, uintptr_t *lo, uintptr_t *hi)
{
    fmem_handle h;
    void *p;
    fmem_stats_t st;
    int rc = fmem_alloc(pool, FMEM_CHUNK_SIZE, &h);
    if (rc || (rc = fmem_map(pool, &h, &p)) || (rc = fmem_stats(pool, &st)))
        die("pool range", rc);
    *lo = (uintptr_t)p - h.addr;
    *hi = *lo + st.capacity_bytes;
    fmem_free(pool, &h);
}

/* n!, fib(n) and 3^n in decimal, one string separated by spaces */
static char *compute(unsigned long n, mpz_t keep[3])
{
    mpz_init(keep[0]);
    mpz_init(keep[1]);
    mpz_init(keep[2]);
    mpz_fac_ui(keep[0], n);
    mpz_fib_ui(keep[1], 4 * n);
    mpz_ui_pow_ui(keep[2], 3, 2 * n);
    mpz_t sum;
    mpz_init(sum);
    mpz_add(sum, keep[0], keep[1]);
    mpz_mul(sum, sum, keep[2]);
    size_t len = mpz_sizeinbase(sum, 10) + 2;
    char *s = malloc(len);
    mpz_get_str(s, 10, sum);
    mpz_clear(sum);
    return s;
}

int main(void)
{
    const unsigned long n = 5000;
    fmem_pool *pool;
    fmem_hooks *b;
    int rc = fmem_open("mem:?size=64M", &pool);
    if (rc)
        die("fmem_open", rc);
    if ((rc = fmem_hooks_new_pool(pool, &b)))
        die("fmem_hooks_new_pool", rc);
    uintptr_t lo, hi;
    pool_range(pool, &lo, &hi);
    printf("gmp_far: pool data mapped at [%#lx, %#lx)\n", (unsigned long)lo, (unsigned long)hi);

    /* with GMP's own allocator */
    mpz_t local[3], early;
    char *want = compute(n, local);
    mpz_init_set_ui(early, 1);

    /* switch GMP to the pool */
    void *(*old_alloc)(size_t);
    void *(*old_realloc)(void *, size_t, size_t);
    void (*old_free)(void *, size_t);
    mp_get_memory_functions(&old_alloc, &old_realloc, &old_free);
    fmem_hooks_gmp_fns g;
    if ((rc = fmem_hooks_gmp(b, &g)))
        die("fmem_hooks_gmp", rc);
    mp_set_memory_functions(g.alloc, g.realloc, g.free);

    mpz_t far[3];
    char *got = compute(n, far);
    mpz_mul_2exp(early, early, 100000); /* made before: grows where it lives */
    printf("gmp_far: %lu! has %zu digits, fib(%lu) %zu, 3^%lu %zu\n", n,
           mpz_sizeinbase(far[0], 10), 4 * n, mpz_sizeinbase(far[1], 10), 2 * n,
           mpz_sizeinbase(far[2], 10));
    check(strcmp(want, got) == 0, "results equal those of GMP's own allocator");
    int inside = 1, owned = 1;
    for (int i = 0; i < 3; i++) {
        uintptr_t d = (uintptr_t)far[i]->_mp_d;
        size_t bytes = (size_t)far[i]->_mp_alloc * sizeof(mp_limb_t);
        inside &= d >= lo && d + bytes <= hi;
        owned &= fmem_hooks_owns(b, far[i]->_mp_d);
        printf("  limbs of result %d at %#lx (%zu bytes)\n", i, (unsigned long)d, bytes);
    }
    check(inside, "every result's limbs lie inside the pool's data");
    check(owned, "every result's limbs are objects of the binding's heap");
    check(!fmem_hooks_owns(b, local[0]->_mp_d) && !fmem_hooks_owns(b, early->_mp_d),
          "numbers made before the switch stay in local memory");
    check(mpz_sizeinbase(early, 2) == 100001, "and they still compute correctly");

    /* everything is freed by the hooks: heap objects to the heap, older
     * ones to the C library */
    for (int i = 0; i < 3; i++) {
        mpz_clear(far[i]);
        mpz_clear(local[i]);
    }
    mpz_clear(early);
    fmem_hooks_stats_t st;
    fmem_hooks_stats(b, &st);
    printf("gmp_far: heap objects %llu allocated, %llu freed; %llu foreign frees\n",
           (unsigned long long)st.mallocs, (unsigned long long)st.frees,
           (unsigned long long)st.foreign_frees);
    check(st.mallocs > 0 && st.mallocs == st.frees, "every heap object was given back");
    mp_set_memory_functions(old_alloc, old_realloc, old_free);
    free(want);
    free(got);
    fmem_hooks_drop(b);
    fmem_close(pool);
    printf("gmp_far: %s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
