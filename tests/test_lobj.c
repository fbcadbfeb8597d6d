/* test_lobj.c - large heap objects without power-of-two waste (lobj.c,
 * heap_large.c): what an object of many sizes holds in the pool or the
 * region, content, realloc in place, moving (pages only) and copying when
 * it cannot grow, fork with large objects on private and shared pools, and
 * bad arguments. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmem.h>
#include <fmem_far.h>

#include "lobj.h"

#define KiB ((size_t)1024)
#define MiB (KiB * 1024)

static fmem_pool *pool;
static fmem_heap *heap;
static char shm_uri[128];

static void open_mem(void)
{
    shm_uri[0] = 0;
    cr_assert_eq(fmem_open("mem:?size=512M", &pool), 0);
    cr_assert_eq(fmem_heap_new(pool, &heap), 0);
}

static void open_shm(void)
{
    snprintf(shm_uri, sizeof shm_uri, "shm:/fmem-large-objects-test-%d?size=512M", (int)getpid());
    cr_assert_eq(fmem_open(shm_uri, &pool), 0);
    cr_assert_eq(fmem_heap_new(pool, &heap), 0);
}

static void close_all(void)
{
    fmem_heap_destroy(heap);
    fmem_stats_t st;
    fmem_stats(pool, &st);
    cr_expect_eq(st.allocated_bytes, 0, "destroy gives everything back");
    fmem_close(pool);
    if (shm_uri[0])
        fmem_unlink(shm_uri);
}

TestSuite(lobj_mem, .init = open_mem, .fini = close_all, .timeout = 120);
TestSuite(lobj_shm, .init = open_shm, .fini = close_all, .timeout = 120);

static uint64_t pool_bytes(void)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(pool, &st), 0);
    return st.allocated_bytes;
}

static void pattern(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n - 1; i += 512)
        p[i] = (unsigned char)(seed * 31 + i / 512);
    p[n - 1] = (unsigned char)(seed ^ 0x5a);
}

static int has_pattern(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n - 1; i += 512)
        if (p[i] != (unsigned char)(seed * 31 + i / 512))
            return 0;
    return p[n - 1] == (unsigned char)(seed ^ 0x5a);
}

static size_t round4k(size_t n)
{
    return (n + 4095) & ~(size_t)4095;
}

/* Sizes from just above the small-object limit to 40 MiB, many of them
 * just above a power of two (the worst case of whole blocks). */
static size_t test_size(unsigned i)
{
    size_t base = (size_t)FMEM_HEAP_SMALL_MAX << (i % 12);
    return base + 1 + (size_t)i * 4099 % base;
}

/* Every object larger than a span (128 KiB) holds at most its size
 * rounded to 4 KiB plus 1/32; smaller ones are one block of the pool,
 * the size rounded up to a power of two. */
static void sizes_cost_what_they_ask(void)
{
    for (unsigned i = 0; i < 120; i++) {
        size_t size = test_size(i);
        fmem_heap_collect(heap);
        uint64_t before = pool_bytes();
        unsigned char *p = fmem_heap_malloc(heap, size);
        cr_assert_not_null(p, "size %zu", size);
        uint64_t held = pool_bytes() - before;
        cr_assert_geq(held, round4k(size));
        size_t bound = round4k(size) + round4k(size) / 32;
        if (size <= 128 * KiB)
            for (bound = 4 * KiB; bound < size;)
                bound *= 2;
        cr_assert_leq(held, bound, "size %zu holds %llu", size, (unsigned long long)held);
        cr_assert_geq(fmem_heap_usable_size(heap, p), size);
        cr_assert_eq((uintptr_t)p % 4096, 0);
        pattern(p, size, i);
        cr_assert(has_pattern(p, size, i));
        if (i % 3 == 0) /* keep some alive across later allocations */
            continue;
        cr_assert_eq(fmem_heap_free(heap, p), 0);
        fmem_heap_collect(heap); /* recently freed objects stay for reuse */
        cr_assert_eq(pool_bytes(), before, "free gives it all back");
    }
}

Test(lobj_mem, sizes_cost_what_they_ask) { sizes_cost_what_they_ask(); }
Test(lobj_shm, sizes_cost_what_they_ask) { sizes_cost_what_they_ask(); }

/* Many live objects of many sizes keep their own bytes. */
static void contents_stay_apart(void)
{
    enum { N = 200 };
    unsigned char *p[N];
    size_t sz[N];
    for (unsigned i = 0; i < N; i++) {
        sz[i] = test_size(i * 7) / 4 + FMEM_HEAP_SMALL_MAX;
        p[i] = fmem_heap_malloc(heap, sz[i]);
        cr_assert_not_null(p[i]);
        memset(p[i], (int)i, sz[i]);
    }
    for (unsigned i = 0; i < N; i += 2)
        cr_assert_eq(fmem_heap_free(heap, p[i]), 0);
    for (unsigned i = 0; i < N; i += 2) {
        p[i] = fmem_heap_calloc(heap, 1, sz[i]);
        cr_assert_not_null(p[i]);
        for (size_t j = 0; j < sz[i]; j += 1024)
            cr_assert_eq(p[i][j], 0, "calloc zeroes");
        memset(p[i], (int)i, sz[i]);
    }
    for (unsigned i = 0; i < N; i++) {
        for (size_t j = 0; j < sz[i]; j += 997)
            cr_assert_eq(p[i][j], (unsigned char)i, "object %u byte %zu", i, j);
        cr_assert_eq(p[i][sz[i] - 1], (unsigned char)i);
        cr_assert_eq(fmem_heap_free(heap, p[i]), 0);
    }
}

Test(lobj_mem, contents_stay_apart) { contents_stay_apart(); }
Test(lobj_shm, contents_stay_apart) { contents_stay_apart(); }

/* Growing a large object keeps its address while its reservation has
 * room; shrinking gives trailing blocks back; the bytes stay. */
static void realloc_grows_in_place(void)
{
    size_t size = 160 * KiB; /* above a span: a range of its own */
    unsigned char *p = fmem_heap_malloc(heap, size);
    cr_assert_not_null(p);
    pattern(p, size, 1);
    for (size_t s = size + 12 * KiB; s <= 300 * KiB; s += 12 * KiB) {
        unsigned char *q = fmem_heap_realloc(heap, p, s);
        cr_assert_eq(q, p, "grows in place to %zu", s);
        cr_assert(has_pattern(p, size, 1));
        memset(p + size, 0x77, s - size);
        cr_assert_leq(pool_bytes(), round4k(s) + round4k(s) / 32 + 64 * KiB);
    }
    uint64_t big = pool_bytes();
    unsigned char *q = fmem_heap_realloc(heap, p, 140 * KiB);
    cr_assert_eq(q, p, "shrinks in place");
    cr_assert_lt(pool_bytes(), big, "shrinking gives blocks back");
    for (size_t i = 0; i < 140 * KiB; i += 512)
        cr_assert_eq(p[i], (unsigned char)(31 + i / 512));
    cr_assert_eq(fmem_heap_free(heap, p), 0);
}

Test(lobj_mem, realloc_grows_in_place) { realloc_grows_in_place(); }
Test(lobj_shm, realloc_grows_in_place) { realloc_grows_in_place(); }

/* The end of the reservation that holds [p, p + len): from /proc/self/maps
 * (the PROT_NONE mapping right after the object's last byte). */
static char *reservation_end(const unsigned char *p, size_t len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    char line[512];
    uintptr_t want = (uintptr_t)p + len, end = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && lo <= want && want < hi &&
            perms[0] == '-')
            end = hi;
    }
    fclose(f);
    return (char *)end;
}

/* When the address space after the reservation is taken, growing moves
 * the pages to a new range (no copy) and the bytes follow. */
static void realloc_moves_when_it_cannot_grow(void)
{
    size_t size = 300 * KiB;
    unsigned char *p = fmem_heap_malloc(heap, size);
    cr_assert_not_null(p);
    pattern(p, size, 2);
    size_t len = fmem_heap_usable_size(heap, p);
    char *end = reservation_end(p, len);
    cr_assert_not_null(end, "the object has a reservation after it");
    void *block = mmap(end, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);
    if (block == MAP_FAILED) /* already taken: as good */
        cr_assert_eq(errno, EEXIST);
    else
        cr_assert_eq(block, (void *)end);
    size_t grown = (size_t)(end - (char *)p) + 64 * KiB;
    uint64_t before = pool_bytes();
    unsigned char *q = fmem_heap_realloc(heap, p, grown);
    cr_assert_not_null(q);
    cr_assert_neq(q, p, "had to move");
    cr_assert(has_pattern(q, size, 2), "the bytes moved with it");
    memset(q + size, 0x33, grown - size);
    cr_assert_leq(pool_bytes() - before, round4k(grown) - len + round4k(grown) / 32);
    cr_assert_eq(fmem_heap_usable_size(heap, p), 0, "the old address is no object");
    cr_assert_eq(fmem_heap_free(heap, p), FMEM_EINVAL);
    cr_assert_eq(fmem_heap_free(heap, q), 0);
    if (block != MAP_FAILED)
        munmap(block, 4096);
}

Test(lobj_mem, realloc_moves_when_it_cannot_grow) { realloc_moves_when_it_cannot_grow(); }
Test(lobj_shm, realloc_moves_when_it_cannot_grow) { realloc_moves_when_it_cannot_grow(); }

/* Growing a page at a time fills the block list; then realloc copies into
 * a fresh object, and the bytes are all there. */
static void realloc_page_by_page(void)
{
    size_t size = 64 * KiB + 4096;
    unsigned char *p = fmem_heap_malloc(heap, size);
    cr_assert_not_null(p);
    memset(p, 0xab, size);
    unsigned moves = 0;
    for (unsigned i = 0; i < 300; i++) {
        size_t s = size + 4096;
        unsigned char *q = fmem_heap_realloc(heap, p, s);
        cr_assert_not_null(q);
        moves += q != p;
        cr_assert_eq(q[0], 0xab);
        cr_assert_eq(q[size - 1], 0xab, "step %u", i);
        memset(q + size, 0xab, s - size);
        p = q;
        size = s;
    }
    for (size_t i = 0; i < size; i += 777)
        cr_assert_eq(p[i], 0xab);
    cr_assert_lt(moves, 100, "most steps grow in place");
    fmem_heap_collect(heap);
    cr_assert_leq(pool_bytes(), round4k(size) + round4k(size) / 32 + 64 * KiB);
    cr_assert_eq(fmem_heap_free(heap, p), 0);
}

Test(lobj_mem, realloc_page_by_page) { realloc_page_by_page(); }
Test(lobj_shm, realloc_page_by_page) { realloc_page_by_page(); }

/* memalign above a page: aligned, and still no power-of-two waste. */
static void memalign_large(void)
{
    for (size_t align = 8192; align <= 4 * MiB; align *= 4) {
        uint64_t before = pool_bytes();
        size_t size = 3 * align + 5;
        unsigned char *p = fmem_heap_memalign(heap, align, size);
        cr_assert_not_null(p);
        cr_assert_eq((uintptr_t)p % align, 0);
        memset(p, 1, size);
        cr_assert_leq(pool_bytes() - before, round4k(size) + round4k(size) / 32);
        cr_assert_eq(fmem_heap_free(heap, p), 0);
    }
}

Test(lobj_mem, memalign_large) { memalign_large(); }
Test(lobj_shm, memalign_large) { memalign_large(); }

/* fork: the child sees the large objects as of the fork; later writes on
 * either side stay there; both free and allocate independently. */
static void fork_keeps_a_snapshot(void)
{
    enum { N = 6 };
    unsigned char *p[N];
    size_t sz[N];
    for (unsigned i = 0; i < N; i++) {
        sz[i] = (size_t)FMEM_HEAP_SMALL_MAX * 5 * (i + 1) + 12345 * i;
        p[i] = fmem_heap_malloc(heap, sz[i]);
        cr_assert_not_null(p[i]);
        memset(p[i], 'a' + (int)i, sz[i]);
    }
    int to_child[2], to_parent[2];
    cr_assert_eq(pipe(to_child), 0);
    cr_assert_eq(pipe(to_parent), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char c;
        int bad = 0;
        for (unsigned i = 0; i < N; i++)
            for (size_t j = 0; j < sz[i]; j += 1000)
                bad |= p[i][j] != 'a' + (int)i;
        memset(p[0], 'C', sz[0]); /* the parent must not see this */
        if (write(to_parent[1], "x", 1) != 1 || read(to_child[0], &c, 1) != 1)
            _exit(3);
        /* the parent wrote 'P' into p[1] meanwhile */
        for (size_t j = 0; j < sz[1]; j += 1000)
            bad |= p[1][j] != 'b';
        unsigned char *q = fmem_heap_realloc(heap, p[2], sz[2] * 3);
        bad |= !q || q[0] != 'c' || q[sz[2] - 1] != 'c';
        memset(q, 'Q', sz[2] * 3);
        unsigned char *r = fmem_heap_malloc(heap, 3 * MiB + 1);
        bad |= !r;
        if (r)
            memset(r, 'R', 3 * MiB + 1);
        bad |= fmem_heap_free(heap, r) != 0 || fmem_heap_free(heap, q) != 0;
        for (unsigned i = 0; i < N; i++)
            if (i != 2)
                bad |= fmem_heap_free(heap, p[i]) != 0;
        fmem_heap_collect(heap); /* nothing of the child's left in a shared pool */
        _exit(bad ? 1 : 0);
    }
    char c;
    cr_assert_eq(read(to_parent[0], &c, 1), 1);
    memset(p[1], 'P', sz[1]);
    cr_assert_eq(write(to_child[1], "y", 1), 1);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    for (size_t j = 0; j < sz[0]; j += 1000)
        cr_assert_eq(p[0][j], 'a', "the child's write stays in the child");
    for (unsigned i = 2; i < N; i++)
        for (size_t j = 0; j < sz[i]; j += 1000)
            cr_assert_eq(p[i][j], 'a' + (int)i);
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(fmem_heap_free(heap, p[i]), 0);
    close(to_child[0]);
    close(to_child[1]);
    close(to_parent[0]);
    close(to_parent[1]);
}

Test(lobj_mem, fork_keeps_a_snapshot) { fork_keeps_a_snapshot(); }
Test(lobj_shm, fork_keeps_a_snapshot) { fork_keeps_a_snapshot(); }

/* Bad arguments to the heap's large-object paths and to lobj itself. */
static void bad_arguments(void)
{
    unsigned char *p = fmem_heap_malloc(heap, 200 * KiB);
    cr_assert_not_null(p);
    cr_assert_eq(fmem_heap_free(heap, p + 4096), FMEM_EINVAL, "inside, not the start");
    cr_assert_eq(fmem_heap_usable_size(heap, p + 4096), 0);
    errno = 0;
    cr_assert_null(fmem_heap_realloc(heap, p + 8192, 300 * KiB));
    cr_assert_eq(errno, EINVAL);
    cr_assert_eq(fmem_heap_free(heap, p), 0);
    cr_assert_eq(fmem_heap_free(heap, p), FMEM_EINVAL, "double free of a large object");
    errno = 0;
    cr_assert_null(fmem_heap_malloc(heap, SIZE_MAX - 4096));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_malloc(heap, 1024 * MiB), "more than the pool");
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(fmem_heap_memalign(heap, 3 * 4096, 100 * KiB));
    cr_assert_eq(errno, EINVAL);
    unsigned char *q = fmem_heap_malloc(heap, 100 * KiB);
    errno = 0;
    cr_assert_null(fmem_heap_realloc(heap, q, SIZE_MAX / 2), "too large: the old object stays");
    cr_assert_eq(errno, ENOMEM);
    cr_assert_eq(fmem_heap_free(heap, q), 0);

    struct lobj o;
    cr_assert_eq(lobj_alloc(NULL, 100 * KiB, 0, &o), FMEM_EINVAL);
    cr_assert_eq(lobj_alloc(pool, 100 * KiB, 0, NULL), FMEM_EINVAL);
    cr_assert_eq(lobj_alloc(pool, 100 * KiB, 3 * 4096, &o), FMEM_EINVAL);
    cr_assert_eq(lobj_alloc(pool, 0, 0, &o), FMEM_EINVAL);
    cr_assert_eq(lobj_alloc(pool, SIZE_MAX, 0, &o), FMEM_ENOMEM);
    cr_assert_eq(o.n, 0);
    cr_assert_eq(lobj_resize(pool, &o, 4096, 1), FMEM_EINVAL, "an empty lobj");
    lobj_free(pool, &o); /* empty: nothing happens */
    cr_assert_eq(lobj_alloc(pool, 100 * KiB, 0, &o), 0);
    cr_assert_eq(lobj_resize(pool, &o, 0, 1), FMEM_EINVAL);
    cr_assert_eq(lobj_resize(NULL, &o, 4096, 1), FMEM_EINVAL);
    cr_assert_eq(lobj_resize(pool, &o, SIZE_MAX, 1), FMEM_EINVAL);
    cr_assert_eq(lobj_fork_child(NULL), 0);
    lobj_free(pool, &o);
    lobj_free(pool, NULL);
    fmem_heap_collect(heap);
    cr_assert_eq(pool_bytes(), 0);
}

Test(lobj_mem, bad_arguments) { bad_arguments(); }
Test(lobj_shm, bad_arguments) { bad_arguments(); }

/* The plan: at most six blocks, powers of two of at least 4 KiB, adding up
 * to the size rounded to 4 KiB plus less than 1/32. */
Test(lobj_plan, slack_is_bounded)
{
    size_t sizes[LOBJ_PLAN_MAX];
    for (size_t size = 1; size < ((size_t)1 << 40); size = size * 5 / 4 + 4093) {
        unsigned n = lobj_plan(size, sizes);
        cr_assert(n >= 1 && n <= LOBJ_PLAN_MAX);
        size_t sum = 0;
        for (unsigned i = 0; i < n; i++) {
            cr_assert_geq(sizes[i], 4096);
            cr_assert_eq(sizes[i] & (sizes[i] - 1), 0);
            cr_assert(i == 0 || sizes[i] < sizes[i - 1], "largest first, each once");
            sum += sizes[i];
        }
        cr_assert_geq(sum, round4k(size));
        cr_assert_lt(sum - round4k(size), round4k(size) / 32 + 1, "size %zu -> %zu", size, sum);
    }
    cr_assert_eq(lobj_plan(0, sizes), 0);
    cr_assert_eq(lobj_plan(SIZE_MAX, sizes), 0);
}

/* ---- region heaps: runs of 4 KiB pages ---------------------------------- */

static fmem_region *region;

static void open_region(void)
{
    open_mem();
    fmem_region_config c = {.size = 256 * MiB, .cache_bytes = 8 * MiB, .fetch_unit = 16 * KiB};
    int rc = fmem_region_create(pool, &c, &region);
    if (rc == FMEM_EACCES || rc == FMEM_ENOTSUP) {
        region = NULL;
        return;
    }
    cr_assert_eq(rc, 0);
    fmem_heap_destroy(heap);
    cr_assert_eq(fmem_heap_new_region(region, &heap), 0);
}

static void close_region(void)
{
    if (region) {
        fmem_heap_destroy(heap);
        cr_assert_eq(fmem_region_flush(region), 0);
        fmem_region_destroy(region);
        heap = NULL;
    }
    close_all();
}

TestSuite(lobj_region, .init = open_region, .fini = close_region, .timeout = 120);

static uint64_t heap_bytes(void)
{
    fmem_heap_stats_t hs;
    cr_assert_eq(fmem_heap_stats(heap, &hs), 0);
    return hs.remote_bytes;
}

#define NEED_REGION()                                                                        \
    do {                                                                                     \
        if (!region)                                                                         \
            cr_skip_test("userfaultfd is not available here");                               \
    } while (0)

Test(lobj_region, sizes_cost_their_pages)
{
    NEED_REGION();
    for (unsigned i = 0; i < 100; i++) {
        size_t size = test_size(i) % (20 * MiB) + FMEM_HEAP_SMALL_MAX + 1;
        uint64_t before = heap_bytes();
        unsigned char *p = fmem_heap_malloc(heap, size);
        cr_assert_not_null(p);
        cr_assert_eq(heap_bytes() - before, round4k(size), "size %zu", size);
        pattern(p, size, i);
        cr_assert(has_pattern(p, size, i));
        cr_assert_eq(fmem_heap_free(heap, p), 0);
        cr_assert_eq(heap_bytes(), before);
    }
}

Test(lobj_region, realloc_in_place_and_moving)
{
    NEED_REGION();
    unsigned char *a = fmem_heap_malloc(heap, 40 * KiB);
    unsigned char *b = fmem_heap_malloc(heap, 40 * KiB);
    cr_assert_not_null(a);
    cr_assert_not_null(b);
    pattern(a, 40 * KiB, 5);
    cr_assert_eq(fmem_heap_free(heap, b), 0);
    unsigned char *q = fmem_heap_realloc(heap, a, 70 * KiB);
    cr_assert_eq(q, a, "the pages after it are free: grows in place");
    cr_assert(has_pattern(a, 40 * KiB, 5));
    cr_assert_eq(heap_bytes(), round4k(70 * KiB));
    unsigned char *c = fmem_heap_malloc(heap, 40 * KiB); /* right after a, first fit */
    cr_assert_not_null(c);
    memset(c, 0xcc, 40 * KiB);
    pattern(a, 70 * KiB, 6);
    q = fmem_heap_realloc(heap, a, 200 * KiB);
    cr_assert_not_null(q);
    cr_assert_lt((size_t)(c - a), 200 * KiB, "first fit puts c after a");
    cr_assert_neq(q, a, "c is in the way: moves");
    cr_assert(has_pattern(q, 70 * KiB, 6));
    for (size_t i = 0; i < 40 * KiB; i++)
        cr_assert_eq(c[i], 0xcc);
    q = fmem_heap_realloc(heap, q, 30 * KiB);
    cr_assert_not_null(q);
    cr_assert_eq(heap_bytes(), round4k(30 * KiB) + round4k(40 * KiB), "shrinking gives pages back");
    cr_assert_eq(fmem_heap_free(heap, q), 0);
    cr_assert_eq(fmem_heap_free(heap, c), 0);
    cr_assert_eq(heap_bytes(), 0);
}

Test(lobj_region, fork_keeps_a_snapshot)
{
    NEED_REGION();
    fork_keeps_a_snapshot();
}
