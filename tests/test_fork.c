/* test_fork.c - fork() with far memory in use: heaps on a pool, regions
 * (cached, evicted and dirty units) and heaps inside regions. After the
 * fork each side checks every object against a shadow copy in plain
 * memory, writes, frees, allocates and checks again, in both orders (the
 * child first, or the parent first), then destroys what it has: the pool
 * must be back at its starting usage and the verifier clean, on each side.
 * Also: forks from one thread while others allocate.
 *
 * Three suites run the same cases on three kinds of pool: fork (an
 * in-process pool, mem:, which the kernel copies on write), fork_shm (a
 * named pool other processes share: the child gets copies of its blocks)
 * and fork_service (an allocation service: the child connects anew). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_admin.h>
#include <fmem_far.h>

#include "service/client.h"
#include "test_service_env.h"

static fmem_pool *pool;
static uint64_t pool_start; /* allocated bytes before the test */
static bool pool_private;   /* each process has a pool of its own after a fork */
static char shm_uri[96];
static struct svc_env env;

static uint64_t pool_used(void)
{
    fmem_stats_t st;
    service_cache_drain(pool); /* a service pool: its cached blocks too */
    return fmem_stats(pool, &st) == 0 ? st.allocated_bytes : UINT64_MAX;
}

static void opened(int rc)
{
    cr_assert_eq(rc, 0, "open: %s", fmem_strerror(rc));
    pool_start = pool_used();
}

static void open_mem(void)
{
    pool_private = true;
    opened(fmem_open("mem:?size=256M", &pool));
}

static void open_shm(void)
{
    snprintf(shm_uri, sizeof shm_uri, "shm:/fmem-test-fork-%d?size=256M", (int)getpid());
    opened(fmem_open(shm_uri, &pool));
}

static void close_shm(void)
{
    fmem_close(pool);
    fmem_unlink(shm_uri);
}

static void open_service(void)
{
    env.pool_size = "256M";
    env_start_or_fail(&env, 1, NULL);
    pool = env_app(&env, 0);
    pool_start = pool_used();
}

static void close_service(void)
{
    fmem_close(pool);
    env_stop(&env);
}

static void close_mem(void) { fmem_close(pool); }

TestSuite(fork, .init = open_mem, .fini = close_mem, .timeout = 120);
TestSuite(fork_shm, .init = open_shm, .fini = close_shm, .timeout = 120);
TestSuite(fork_service, .init = open_service, .fini = close_service, .timeout = 120);

/* A failed check in either process: say where, and fail (the child exits
 * with status 1, which the parent's wait turns into a test failure). */
static _Thread_local int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "[%d] %s:%d: ", (int)getpid(), __FILE__, __LINE__);                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

/* The pool holds what it held at the start, and the verifier finds it
 * consistent. On a shared pool the other process's blocks count too: only
 * the parent checks, once the child is gone (final). */
static void pool_check(bool final)
{
    if (!pool_private && !final)
        return;
    uint64_t used = pool_used();
    CHECK(used == pool_start, "pool usage %llu, started at %llu", (unsigned long long)used,
          (unsigned long long)pool_start);
    fmem_verify_report rep = {0};
    int rc = env.nfmemd ? 0 : fmem_verify(pool, &rep, stderr);
    uint64_t errors = env.nfmemd ? env_verify_errors(&env) : rep.errors;
    CHECK(rc == 0 && errors == 0, "verifier: %d, %llu errors", rc, (unsigned long long)errors);
}

static void pool_is_clean(void) { pool_check(false); }

/* Each case runs in the three suites. */
#define FORK_CASE(name, call)                                                                      \
    Test(fork, name) { call; }                                                                     \
    Test(fork_shm, name) { call; }                                                                 \
    Test(fork_service, name) { call; }

/* ---- heap objects with shadows ------------------------------------------ */

#define NOBJ 600
struct objs {
    fmem_heap *heap;
    unsigned char *p[NOBJ];
    unsigned char *shadow[NOBJ];
    size_t n[NOBJ];
};

static size_t pick_size(uint64_t *s)
{
    uint64_t r = rng(s);
    switch (r % 8) {
    case 0: return 1 + r % 16;                        /* tiny */
    case 1: case 2: case 3: return 1 + (r >> 8) % 2000; /* small */
    case 4: case 5: return 2000 + (r >> 8) % 14000;   /* up to the slab limit */
    case 6: return 16385 + (r >> 8) % 200000;         /* large */
    default: return 1 + (r >> 8) % 300;
    }
}

static void obj_new(struct objs *o, int i, uint64_t *s)
{
    o->n[i] = pick_size(s);
    o->p[i] = fmem_heap_malloc(o->heap, o->n[i]);
    o->shadow[i] = malloc(o->n[i]);
    CHECK(o->p[i] && o->shadow[i], "malloc of %zu", o->n[i]);
    if (!o->p[i] || !o->shadow[i])
        return;
    fill(o->shadow[i], o->n[i], rng(s));
    memcpy(o->p[i], o->shadow[i], o->n[i]);
}

static void obj_free(struct objs *o, int i)
{
    CHECK(fmem_heap_free(o->heap, o->p[i]) == 0, "free of object %d", i);
    free(o->shadow[i]);
    o->p[i] = o->shadow[i] = NULL;
}

static void objs_fill(struct objs *o, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (int i = 0; i < NOBJ; i++)
        obj_new(o, i, &s);
    for (int i = 0; i < NOBJ; i += 3) /* holes: frees in the snapshot */
        obj_free(o, i);
}

static void objs_check(struct objs *o, const char *when)
{
    for (int i = 0; i < NOBJ; i++)
        if (o->p[i])
            CHECK(memcmp(o->p[i], o->shadow[i], o->n[i]) == 0, "%s: object %d (%zu bytes) differs",
                  when, i, o->n[i]);
}

/* Write, free, allocate, in an order that depends on the side's seed. */
static void objs_churn(struct objs *o, uint64_t seed)
{
    uint64_t s = seed | 1;
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < NOBJ; i++) {
            uint64_t r = rng(&s) % 4;
            if (!o->p[i])
                obj_new(o, i, &s);
            else if (r == 0)
                obj_free(o, i);
            else if (r == 1) {
                fill(o->shadow[i], o->n[i], rng(&s));
                memcpy(o->p[i], o->shadow[i], o->n[i]);
            }
        }
}

static void objs_drop(struct objs *o)
{
    for (int i = 0; i < NOBJ; i++)
        if (o->p[i])
            obj_free(o, i);
}

/* ---- the two orders ------------------------------------------------------ */

/* One side's life after the fork: check the snapshot, churn, check. */
typedef void (*side_fn)(void *ctx, uint64_t seed);

/* child_first: the child runs to its end while the parent waits, then the
 * parent runs. Otherwise the parent runs to its end (destroying its
 * objects) while the child waits on a pipe, then the child runs. */
static void fork_both_orders(side_fn side, void *ctx, int child_first)
{
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        close(go[1]);
        char c;
        if (!child_first)
            CHECK(read(go[0], &c, 1) == 0, "the parent's end of the pipe"); /* parent done */
        side(ctx, 0xC1D);
        _exit(failures ? 1 : 0);
    }
    close(go[0]);
    int st;
    if (child_first)
        cr_assert_eq(waitpid(pid, &st, 0), pid);
    side(ctx, 0xFA7);
    close(go[1]); /* lets a waiting child go */
    if (!child_first)
        cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed (status %#x)", st);
    if (!pool_private && env.nfmemd) /* fmemd takes back what an exited child held */
        env_wait_allocated(&env, pool_start, 10000);
    pool_check(true);
    cr_assert_eq(failures, 0, "the parent failed");
}

/* ---- heaps on the pool --------------------------------------------------- */

static void heap_side(void *ctx, uint64_t seed)
{
    struct objs *o = ctx;
    objs_check(o, "after fork");
    objs_churn(o, seed);
    objs_check(o, "after churn");
    objs_drop(o);
    fmem_heap_destroy(o->heap);
    pool_is_clean();
}

static void heap_case(int child_first)
{
    static struct objs o;
    memset(&o, 0, sizeof o);
    int rc = fmem_heap_new(pool, &o.heap);
    if (rc == FMEM_ENOTSUP)
        cr_skip_test("this pool's transport cannot map");
    cr_assert_eq(rc, 0);
    objs_fill(&o, 42);
    fork_both_orders(heap_side, &o, child_first);
}

FORK_CASE(heap_child_first, heap_case(1))
FORK_CASE(heap_parent_first, heap_case(0))

/* ---- regions ------------------------------------------------------------- */

#define RSIZE ((size_t)8 << 20)

struct reg {
    fmem_region *r;
    unsigned char *mem, *shadow;
};

static fmem_region *make_region(size_t size, size_t cache)
{
    fmem_region_config c = {.size = size, .cache_bytes = cache, .fetch_unit = 16384};
    fmem_region *r;
    int rc = fmem_region_create(pool, &c, &r);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP)
        cr_skip_test("no userfaultfd here: %s", fmem_strerror(rc));
    cr_assert_eq(rc, 0, "region: %s", fmem_strerror(rc));
    return r;
}

static void region_side(void *ctx, uint64_t seed)
{
    struct reg *g = ctx;
    CHECK(memcmp(g->mem, g->shadow, RSIZE) == 0, "region differs after fork");
    uint64_t s = seed | 1;
    for (int i = 0; i < 3000; i++) { /* scattered writes: faults, evictions */
        size_t off = rng(&s) % (RSIZE - 512), len = 1 + rng(&s) % 512;
        fill(g->shadow + off, len, rng(&s));
        memcpy(g->mem + off, g->shadow + off, len);
    }
    CHECK(fmem_region_release(g->r, RSIZE / 2, RSIZE / 8) == 0, "release");
    memset(g->shadow + RSIZE / 2, 0, RSIZE / 8);
    CHECK(fmem_region_flush(g->r) == 0, "flush");
    CHECK(memcmp(g->mem, g->shadow, RSIZE) == 0, "region differs after writes");
    fmem_region_stats_t st;
    CHECK(fmem_region_stats(g->r, &st) == 0 && st.evictions > 0, "no eviction: the test is void");
    CHECK(fmem_region_destroy(g->r) == 0, "destroy");
    pool_is_clean();
}

static void region_case(int child_first)
{
    static struct reg g;
    g.r = make_region(RSIZE, RSIZE / 4);
    g.mem = fmem_region_base(g.r);
    g.shadow = calloc(1, RSIZE);
    cr_assert_not_null(g.shadow);
    uint64_t s = 7;
    fill(g.shadow, RSIZE, 3); /* everything written: most units evicted */
    memcpy(g.mem, g.shadow, RSIZE);
    for (int i = 0; i < 200; i++) { /* some cached units dirty, some clean */
        size_t off = rng(&s) % (RSIZE - 64);
        g.shadow[off] ^= 0x5a;
        g.mem[off] = g.shadow[off];
        (void)g.mem[rng(&s) % RSIZE];
    }
    fork_both_orders(region_side, &g, child_first);
    free(g.shadow);
}

FORK_CASE(region_child_first, region_case(1))
FORK_CASE(region_parent_first, region_case(0))

/* ---- a heap inside a region ---------------------------------------------- */

struct heap_in_region {
    fmem_region *r;
    struct objs o;
};

static void hir_side(void *ctx, uint64_t seed)
{
    struct heap_in_region *x = ctx;
    objs_check(&x->o, "after fork");
    objs_churn(&x->o, seed);
    objs_check(&x->o, "after churn");
    objs_drop(&x->o);
    fmem_heap_destroy(x->o.heap);
    CHECK(fmem_region_destroy(x->r) == 0, "destroy");
    pool_is_clean();
}

static void hir_case(int child_first)
{
    static struct heap_in_region x;
    memset(&x, 0, sizeof x);
    x.r = make_region((size_t)256 << 20, (size_t)4 << 20); /* less than the objects take */
    cr_assert_eq(fmem_heap_new_region(x.r, &x.o.heap), 0);
    objs_fill(&x.o, 99);
    fork_both_orders(hir_side, &x, child_first);
}

FORK_CASE(heap_in_region_child_first, hir_case(1))
FORK_CASE(heap_in_region_parent_first, hir_case(0))

/* ---- fork from one thread while others allocate ------------------------- */

#define WORKERS 3
static fmem_heap *shared_heap;
static _Atomic int stop_workers;

/* Each worker keeps a ring of objects stamped with their own address. */
static void *worker(void *arg)
{
    uint64_t s = (uintptr_t)arg * 7919 + 1;
    void *ring[64] = {0};
    size_t len[64] = {0};
    long bad = 0;
    while (!atomic_load(&stop_workers)) {
        unsigned i = (unsigned)(rng(&s) % 64);
        if (ring[i]) {
            unsigned char *p = ring[i];
            for (size_t k = 0; k < len[i]; k++)
                bad += p[k] != (unsigned char)((uintptr_t)p + k);
            fmem_heap_free(shared_heap, p);
        }
        len[i] = pick_size(&s);
        unsigned char *p = fmem_heap_malloc(shared_heap, len[i]);
        ring[i] = p;
        if (p)
            for (size_t k = 0; k < len[i]; k++)
                p[k] = (unsigned char)((uintptr_t)p + k);
    }
    for (int i = 0; i < 64; i++)
        fmem_heap_free(shared_heap, ring[i]);
    return (void *)bad;
}

static void threads_case(void)
{
    int rc = fmem_heap_new(pool, &shared_heap);
    if (rc == FMEM_ENOTSUP)
        cr_skip_test("this pool's transport cannot map");
    cr_assert_eq(rc, 0);
    pthread_t t[WORKERS];
    for (uintptr_t i = 0; i < WORKERS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, worker, (void *)(i + 1)), 0);
    int children_ok = 1;
    for (int k = 0; k < 20; k++) {
        usleep(2000);
        pid_t pid = fork();
        if (pid == 0) {
            /* alone here: the workers' objects are the snapshot's; allocate
             * and free on top of them, then give everything back */
            struct objs o = {.heap = shared_heap};
            objs_fill(&o, (uint64_t)k + 5);
            objs_churn(&o, (uint64_t)k + 11);
            objs_check(&o, "child");
            objs_drop(&o);
            fmem_heap_stats_t st;
            CHECK(fmem_heap_stats(shared_heap, &st) == 0, "stats");
            fmem_heap_destroy(shared_heap);
            pool_is_clean();
            _exit(failures ? 1 : 0);
        }
        int st;
        children_ok &= waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    atomic_store(&stop_workers, 1);
    long bad = 0;
    for (int i = 0; i < WORKERS; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    cr_assert(children_ok, "a child failed");
    cr_assert_eq(bad, 0, "%ld bytes of the workers' objects changed", bad);
    fmem_heap_destroy(shared_heap);
    if (env.nfmemd)
        env_wait_allocated(&env, pool_start, 10000);
    pool_check(true);
    cr_assert_eq(failures, 0);
}
FORK_CASE(fork_while_threads_allocate, threads_case())

/* ---- small objects show no allocator words ------------------------------- */

Test(fork, small_objects_hold_no_free_list_links)
{
    fmem_heap *h;
    int rc = fmem_heap_new(pool, &h);
    if (rc == FMEM_ENOTSUP)
        cr_skip_test("this pool's transport cannot map");
    cr_assert_eq(rc, 0);
    /* fresh objects (linked when the slab was carved), then reused ones */
    for (int round = 0; round < 2; round++) {
        void *p[256];
        for (int i = 0; i < 256; i++) {
            p[i] = fmem_heap_malloc(h, 4 + (size_t)(i % 4) * 16);
            cr_assert_not_null(p[i]);
            const uintptr_t *w = p[i];
            cr_assert(w[0] == 0 && w[1] == 0,
                      "round %d object %d shows %#lx %#lx", round, i, (unsigned long)w[0],
                      (unsigned long)w[1]);
        }
        for (int i = 0; i < 256; i++)
            fmem_heap_free(h, p[i]);
    }
    fmem_heap_destroy(h);
}

/* ---- a fork as soon as a region's threads exist ------------------------------ */

/* A region's fault handler and writer tell the fork gate they are library
 * threads when they start. A fork prepared before they did waited for them
 * to park while holding the lock they needed to register: the forker and
 * the handler waited for each other for good (seen in a multiprocessing
 * child that forked again right after its region's threads restarted).
 * Fork at once after fmem_region_create, and again at once in the child,
 * whose region has just restarted its threads. A hang is killed by the
 * alarm (the child) or Criterion's timeout (the parent). */
Test(fork, fork_at_once_after_the_region_threads_start, .timeout = 90)
{
    int children_ok = 1;
    for (int k = 0; k < 100 && children_ok; k++) {
        fmem_region *r = make_region(4 << 20, 1 << 20);
        unsigned char *mem = fmem_region_base(r);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(30);
            pid_t gc = fork();
            if (gc == 0) {
                mem[k] = 1;
                _exit(mem[k] == 1 && fmem_region_destroy(r) == 0 ? 0 : 1);
            }
            int st;
            int ok = waitpid(gc, &st, 0) == gc && WIFEXITED(st) && WEXITSTATUS(st) == 0;
            mem[k] = 2;
            _exit(ok && mem[k] == 2 && fmem_region_destroy(r) == 0 ? 0 : 1);
        }
        int st;
        children_ok = waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        cr_assert(children_ok, "round %d: the child ended with status %#x", k, st);
        cr_assert_eq(fmem_region_destroy(r), 0);
    }
    cr_assert_eq(pool_used(), pool_start);
}
