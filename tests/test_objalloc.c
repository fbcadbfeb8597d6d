/* test_objalloc.c - the object allocator on pool chunks and on a region:
 * sizes, alignment, content, footprint going back to the pool, bad input
 * (zero and huge sizes, double frees, foreign pointers), and threads
 * freeing each other's objects, including after their owner exited. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <fmem.h>
#include <fmem_far.h>

static fmem_pool *pool;
static fmem_heap *heap;

static void setup(void)
{
    cr_assert_eq(fmem_open("mem:?size=256M", &pool), 0);
    cr_assert_eq(fmem_heap_new(pool, &heap), 0);
}
static void teardown(void)
{
    fmem_heap_destroy(heap);
    fmem_stats_t st;
    fmem_stats(pool, &st);
    cr_expect_eq(st.allocated_bytes, 0, "destroy gives everything back");
    fmem_close(pool);
}
TestSuite(heap, .init = setup, .fini = teardown, .timeout = 60);

static uint64_t pool_bytes(void)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(pool, &st), 0);
    return st.allocated_bytes;
}

static void pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 31 + i);
}

static int has_pattern(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed * 31 + i))
            return 0;
    return 1;
}

Test(heap, every_size_is_usable_aligned_and_kept)
{
    enum { N = 600 };
    void *p[N];
    size_t sz[N];
    for (unsigned i = 0; i < N; i++) {
        sz[i] = i < 300 ? i : i < 500 ? (i - 300) * 83 : (i - 500) * 1500;
        p[i] = fmem_heap_malloc(heap, sz[i]);
        cr_assert_not_null(p[i], "size %zu", sz[i]);
        cr_assert_eq((uintptr_t)p[i] % 16, 0, "size %zu", sz[i]);
        cr_assert_geq(fmem_heap_usable_size(heap, p[i]), sz[i]);
        pattern(p[i], sz[i], i);
    }
    for (unsigned i = 0; i < N; i++) {
        cr_assert(has_pattern(p[i], sz[i], i), "object %u (size %zu) changed", i, sz[i]);
        cr_assert_eq(fmem_heap_free(heap, p[i]), 0);
    }
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
    fmem_heap_stats_t st;
    cr_assert_eq(fmem_heap_stats(heap, &st), 0);
    cr_assert_eq(st.mallocs, N);
    cr_assert_eq(st.frees, N);
    cr_assert_eq(st.slabs, 0);
    cr_assert_eq(st.large, 0);
}

Test(heap, size_zero_gives_unique_objects)
{
    void *a = fmem_heap_malloc(heap, 0), *b = fmem_heap_malloc(heap, 0);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    cr_assert_neq(a, b);
    cr_assert_geq(fmem_heap_usable_size(heap, a), 1);
    cr_assert_eq(fmem_heap_free(heap, a), 0);
    cr_assert_eq(fmem_heap_free(heap, b), 0);
    void *c = fmem_heap_realloc(heap, fmem_heap_malloc(heap, 100), 0);
    cr_assert_not_null(c, "realloc to 0 returns a minimal object");
    cr_assert_eq(fmem_heap_free(heap, c), 0);
}

Test(heap, huge_sizes_fail_with_enomem)
{
    errno = 0;
    cr_assert_null(fmem_heap_malloc(heap, SIZE_MAX));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_malloc(heap, (size_t)1 << 40)); /* > the pool */
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_calloc(heap, SIZE_MAX / 2, 4));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_memalign(heap, 64, SIZE_MAX - 8));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_memalign(heap, 48, 100));
    cr_assert_eq(errno, EINVAL);
    unsigned char *p = fmem_heap_malloc(heap, 1000);
    pattern(p, 1000, 7);
    errno = 0;
    cr_assert_null(fmem_heap_realloc(heap, p, SIZE_MAX / 2));
    cr_assert_eq(errno, ENOMEM);
    cr_assert(has_pattern(p, 1000, 7), "a failed realloc leaves the object alone");
    cr_assert_eq(fmem_heap_free(heap, p), 0);
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0, "failures leak nothing");
}

Test(heap, double_free_is_refused)
{
    void *p = fmem_heap_malloc(heap, 64), *q = fmem_heap_malloc(heap, 64);
    cr_assert_eq(fmem_heap_free(heap, p), 0);
    cr_assert_eq(fmem_heap_free(heap, p), FMEM_EDOUBLEFREE);
    cr_assert_eq(fmem_heap_free(heap, p), FMEM_EDOUBLEFREE);
    void *big = fmem_heap_malloc(heap, 1 << 20);
    cr_assert_eq(fmem_heap_free(heap, big), 0);
    cr_assert_eq(fmem_heap_free(heap, big), FMEM_EINVAL, "a freed large object is gone");
    /* nothing was corrupted: every object handed out is distinct */
    enum { N = 3000 };
    void **v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++) {
        v[i] = fmem_heap_malloc(heap, 64);
        cr_assert_neq(v[i], q);
        *(int *)v[i] = i;
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(*(int *)v[i], i, "object %d shared with another", i);
    for (int i = 0; i < N; i++)
        cr_assert_eq(fmem_heap_free(heap, v[i]), 0);
    cr_assert_eq(fmem_heap_free(heap, q), 0);
    free(v);
    fmem_heap_stats_t st;
    fmem_heap_stats(heap, &st);
    cr_assert_eq(st.double_frees, 2);
}

Test(heap, foreign_pointers_are_refused)
{
    int local;
    void *libc = malloc(32);
    unsigned char *p = fmem_heap_malloc(heap, 100), *big = fmem_heap_malloc(heap, 100000);
    pattern(p, 100, 1);
    fmem_heap *other;
    cr_assert_eq(fmem_heap_new(pool, &other), 0);
    void *theirs = fmem_heap_malloc(other, 100);
    cr_assert_eq(fmem_heap_free(heap, &local), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_free(heap, libc), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_free(heap, p + 8), FMEM_EINVAL, "interior pointer");
    cr_assert_eq(fmem_heap_free(heap, big + 4096), FMEM_EINVAL, "interior of a large object");
    cr_assert_eq(fmem_heap_free(heap, theirs), FMEM_EINVAL, "another heap's object");
    cr_assert_eq(fmem_heap_free(heap, (void *)~(uintptr_t)0xfff), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_free(NULL, p), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_free(heap, NULL), 0);
    cr_assert_eq(fmem_heap_usable_size(heap, libc), 0);
    cr_assert_eq(fmem_heap_usable_size(heap, p + 8), 0);
    errno = 0;
    cr_assert_null(fmem_heap_realloc(heap, libc, 10));
    cr_assert_eq(errno, EINVAL);
    cr_assert(has_pattern(p, 100, 1), "refused frees change nothing");
    cr_assert_eq(fmem_heap_free(heap, p), 0);
    cr_assert_eq(fmem_heap_free(heap, big), 0);
    cr_assert_eq(fmem_heap_free(other, theirs), 0);
    fmem_heap_destroy(other);
    free(libc);
    fmem_heap_stats_t st;
    fmem_heap_stats(heap, &st);
    cr_assert_eq(st.bad_frees, 6, "%llu", (unsigned long long)st.bad_frees);
}

Test(heap, freeing_half_gives_half_back)
{
    enum { N = 16384 }; /* 4 MiB of 256-byte objects */
    void **v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++)
        v[i] = fmem_heap_malloc(heap, 256);
    uint64_t full = pool_bytes();
    cr_assert_geq(full, (uint64_t)N * 256);
    cr_assert_leq(full, (uint64_t)N * 256 + (128 << 10));
    for (int i = 0; i < N / 2; i++)
        cr_assert_eq(fmem_heap_free(heap, v[i]), 0);
    /* a thread keeps its current slab and up to 4 empty spares */
    uint64_t half = pool_bytes(), kept = (1 + 4) * FMEM_HEAP_SLAB_SIZE;
    cr_assert_leq(half, full / 2 + kept, "%llu of %llu left", (unsigned long long)half,
                  (unsigned long long)full);
    for (int i = N / 2; i < N; i++)
        cr_assert_eq(fmem_heap_free(heap, v[i]), 0);
    cr_assert_leq(pool_bytes(), kept, "at most the current slab and the spares stay");
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
    fmem_heap_stats_t st;
    fmem_heap_stats(heap, &st);
    cr_assert_eq(st.remote_bytes, 0);
    cr_assert_geq(st.remote_peak, (uint64_t)N * 256);
    free(v);
}

Test(heap, large_objects_go_back)
{
    /* 768 KiB: two blocks side by side, a kind the heap keeps for reuse */
    const size_t sz = (size_t)768 << 10;
    void *v[8];
    for (int i = 0; i < 8; i++) {
        v[i] = fmem_heap_calloc(heap, 1, sz);
        cr_assert_not_null(v[i]);
        cr_assert_eq(((char *)v[i])[12345], 0);
    }
    cr_assert_eq(pool_bytes(), 8 * sz);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(fmem_heap_free(heap, v[i]), 0);
    /* up to 2 MiB of them stay mapped for the next malloc of their size */
    uint64_t kept = pool_bytes();
    cr_assert_leq(kept, 2 << 20);
    cr_assert_gt(kept, 0);
    void *again = fmem_heap_malloc(heap, sz);
    cr_assert_eq(pool_bytes(), kept, "a freed one is used again");
    cr_assert_eq(fmem_heap_free(heap, again), 0);
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
    /* one block of the pool (a power of two) goes back at once */
    void *one = fmem_heap_malloc(heap, (size_t)1 << 20);
    cr_assert_eq(pool_bytes(), 1 << 20);
    cr_assert_eq(fmem_heap_free(heap, one), 0);
    cr_assert_eq(pool_bytes(), 0);
    void *huge = fmem_heap_malloc(heap, (size_t)3 << 20); /* too large to keep */
    cr_assert_eq(fmem_heap_free(heap, huge), 0);
    cr_assert_eq(pool_bytes(), 0);
}

Test(heap, realloc_keeps_content_and_memalign_aligns)
{
    unsigned char *p = fmem_heap_malloc(heap, 10);
    pattern(p, 10, 3);
    size_t sizes[] = {100, 5000, 40000, 300000, 70, 20000, 9};
    size_t have = 10;
    for (unsigned i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        p = fmem_heap_realloc(heap, p, sizes[i]);
        cr_assert_not_null(p);
        size_t keep = have < sizes[i] ? have : sizes[i];
        cr_assert(has_pattern(p, keep, 3), "step %u", i);
        pattern(p, sizes[i], 3);
        have = sizes[i];
    }
    cr_assert_eq(fmem_heap_free(heap, p), 0);
    for (size_t a = 32; a <= ((size_t)1 << 20); a <<= 1)
        for (size_t s = 1; s <= 70000; s *= 7) {
            void *q = fmem_heap_memalign(heap, a, s);
            cr_assert_not_null(q);
            cr_assert_eq((uintptr_t)q % a, 0, "align %zu size %zu", a, s);
            cr_assert_geq(fmem_heap_usable_size(heap, q), s);
            memset(q, 0xab, s);
            cr_assert_eq(fmem_heap_free(heap, q), 0);
        }
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
}

/* ---- threads ------------------------------------------------------------ */

enum { T = 4, PER_THREAD = 20000, RING = 256 };

struct ring {
    pthread_mutex_t m;
    void *slot[RING];
    unsigned head, tail;
};

static struct ring rings[T];

static int ring_put(struct ring *r, void *p)
{
    pthread_mutex_lock(&r->m);
    int ok = r->tail - r->head < RING;
    if (ok)
        r->slot[r->tail++ % RING] = p;
    pthread_mutex_unlock(&r->m);
    return ok;
}

static void *ring_get(struct ring *r)
{
    pthread_mutex_lock(&r->m);
    void *p = r->head != r->tail ? r->slot[r->head++ % RING] : NULL;
    pthread_mutex_unlock(&r->m);
    return p;
}

static _Atomic int bad_objects;

/* An object carries its size in its first word and a pattern after it. */
static void *make_obj(uint64_t *seed)
{
    *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
    size_t n = 16 + (*seed >> 33) % ((*seed >> 20 & 7) ? 512 : 6000);
    unsigned char *p = fmem_heap_malloc(heap, n);
    if (!p)
        return NULL;
    *(size_t *)p = n;
    memset(p + sizeof(size_t), (int)(n & 0xff), n - sizeof(size_t));
    return p;
}

static void check_free(void *o)
{
    unsigned char *p = o;
    size_t n = *(size_t *)p;
    for (size_t i = sizeof(size_t); i < n; i++)
        if (p[i] != (unsigned char)(n & 0xff)) {
            bad_objects++;
            break;
        }
    if (fmem_heap_free(heap, p) != 0)
        bad_objects++;
}

static void *stress_worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t seed = id + 1;
    void *keep[64] = {0};
    for (int i = 0; i < PER_THREAD; i++) {
        void *o = make_obj(&seed);
        if (!o) {
            bad_objects++;
            break;
        }
        unsigned k = (unsigned)(seed >> 40) % 64;
        if (seed >> 50 & 1) { /* keep some locally for a while */
            if (keep[k])
                check_free(keep[k]);
            keep[k] = o;
        } else if (!ring_put(&rings[(id + 1) % T], o)) {
            check_free(o);
        }
        void *in = ring_get(&rings[id]);
        if (in)
            check_free(in);
    }
    for (int k = 0; k < 64; k++)
        if (keep[k])
            check_free(keep[k]);
    return NULL;
}

Test(heap, threads_free_each_others_objects)
{
    for (int i = 0; i < T; i++)
        pthread_mutex_init(&rings[i].m, NULL);
    pthread_t th[T];
    for (unsigned i = 0; i < T; i++)
        pthread_create(&th[i], NULL, stress_worker, (void *)(uintptr_t)i);
    for (int i = 0; i < T; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < T; i++) /* left in the rings by exited threads */
        for (void *o; (o = ring_get(&rings[i])) != NULL;)
            check_free(o);
    cr_assert_eq(bad_objects, 0);
    fmem_heap_stats_t st;
    fmem_heap_stats(heap, &st);
    cr_assert_eq(st.mallocs, st.frees);
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0, "%llu bytes still held", (unsigned long long)pool_bytes());
}

static void *alloc_and_exit(void *arg)
{
    void **v = arg;
    for (int i = 0; i < 5000; i++)
        v[i] = fmem_heap_malloc(heap, 32 + i % 700);
    return NULL;
}

Test(heap, objects_outlive_their_thread)
{
    void **v = malloc(5000 * sizeof *v);
    for (int round = 0; round < 3; round++) {
        pthread_t t;
        pthread_create(&t, NULL, alloc_and_exit, v);
        pthread_join(t, NULL);
        for (int i = 0; i < 5000; i++)
            cr_assert_eq(fmem_heap_free(heap, v[i]), 0);
    }
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
    free(v);
}

/* ---- on a region ---------------------------------------------------------- */

Test(heap, runs_inside_a_region)
{
    fmem_region_config c = {.size = 32 << 20, .cache_bytes = 2 << 20, .fetch_unit = 16 << 10};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("userfaultfd is not available here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0);
    fmem_heap *rh;
    cr_assert_eq(fmem_heap_new_region(r, &rh), 0);
    enum { N = 6000 };
    unsigned char **v = malloc(N * sizeof *v);
    size_t *sz = malloc(N * sizeof *sz);
    for (int i = 0; i < N; i++) {
        sz[i] = i % 50 == 0 ? 40000 + (size_t)i : 16 + (size_t)(i * 37) % 1500;
        v[i] = fmem_heap_malloc(rh, sz[i]);
        cr_assert_not_null(v[i]);
        pattern(v[i], sz[i], (unsigned)i);
    }
    fmem_region_stats_t rs;
    fmem_region_stats(r, &rs);
    cr_assert_gt(rs.evictions, 0, "the heap is larger than the cache");
    for (int i = 0; i < N; i++)
        cr_assert(has_pattern(v[i], sz[i], (unsigned)i), "object %d", i);
    for (int i = 0; i < N; i += 2)
        cr_assert_eq(fmem_heap_free(rh, v[i]), 0);
    for (int i = 1; i < N; i += 2)
        cr_assert(has_pattern(v[i], sz[i], (unsigned)i), "object %d after frees", i);
    for (int i = 1; i < N; i += 2)
        cr_assert_eq(fmem_heap_free(rh, v[i]), 0);
    fmem_heap_collect(rh);
    fmem_heap_stats_t hs;
    fmem_heap_stats(rh, &hs);
    cr_assert_eq(hs.remote_bytes, 0);
    cr_assert_eq(fmem_region_flush(r), 0);
    fmem_region_stats(r, &rs);
    cr_assert_eq(rs.remote_bytes, 0, "released slabs free their chunks");
    cr_assert_eq(pool_bytes(), 0);
    fmem_heap_destroy(rh);
    fmem_region_destroy(r);
    free(v);
    free(sz);
}
