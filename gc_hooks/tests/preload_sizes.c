/* preload_sizes.c - run under libfmem-preload.so (preload.sh), on the
 * default pool and on a named one: large blocks cost their size rounded to
 * 4 KiB plus at most 1/32 (never a power of two), at and around every
 * boundary of the size plan, with their bytes intact; realloc keeps the
 * bytes and grows or shrinks a block in place where its slot allows;
 * calloc gives zeros also from reused blocks; a fork child sees a
 * snapshot of blocks made of several pieces; no two blocks touch (numpy
 * takes touching arrays for overlapping ones and runs scalar loops on
 * them). Prints one line per failed
 * check and a summary; exit status 1 on any failure.
 *   preload_sizes [THRESHOLD]   (default 131072, the library's default) */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;
#define CHECK(cond, ...)                                                         \
    do {                                                                         \
        if (cond)                                                                \
            passed++;                                                            \
        else {                                                                   \
            failed++;                                                            \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                        \
            fputc('\n', stderr);                                                 \
        }                                                                        \
    } while (0)

#define PAGE ((size_t)4096)

static size_t threshold = 131072;

static unsigned char pat(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + (i >> 12)); }

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pat(i, seed);
}

static size_t first_bad(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(i, seed))
            return i;
    return SIZE_MAX;
}

static size_t round_page(size_t n) { return (n + PAGE - 1) & ~(PAGE - 1); }

/* usable size of a large block: at least n, at most n rounded to 4 KiB
 * plus 3/64 (4.7 %; a power of two would be up to 100 %) */
static int cost_ok(size_t n, size_t usable)
{
    size_t r = round_page(n) / PAGE;
    return usable >= n && usable / PAGE <= r + r * 3 / 64;
}

/* sizes at and around the boundaries: every power of two of pages from
 * the threshold up to 8 MiB, the points where the plan starts rounding
 * (64 pages and multiples), each +-1 byte and +-1 page */
static size_t sizes[512];
static unsigned nsizes;

static void add(size_t n)
{
    if (n >= threshold && nsizes < sizeof sizes / sizeof *sizes)
        sizes[nsizes++] = n;
}

static void make_sizes(void)
{
    add(threshold);
    add(threshold + 1);
    for (size_t pages = 32; pages <= ((size_t)8 << 20) / PAGE; pages *= 2) {
        size_t b = pages * PAGE;
        size_t around[] = {b - PAGE - 1, b - PAGE, b - PAGE + 1, b - 1, b, b + 1, b + PAGE - 1,
                           b + PAGE, b + PAGE + 1, b + b / 2 + 12345, b + b / 32, b + b / 32 + 1};
        for (unsigned i = 0; i < sizeof around / sizeof *around; i++)
            add(around[i]);
    }
    /* where six leading bits stop being exact: 64..66 pages, 127..130 */
    for (size_t pages = 63; pages <= 131; pages++)
        add(pages * PAGE - 1);
    add(700u << 20 >> 4); /* 43.75 MiB: a power of two would take 64 */
}

static void test_sizes(void)
{
    unsigned char *held[sizeof sizes / sizeof *sizes];
    for (unsigned i = 0; i < nsizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        held[i] = p;
        CHECK(p != NULL, "malloc(%zu)", n);
        if (!p)
            continue;
        size_t u = malloc_usable_size(p);
        CHECK(cost_ok(n, u), "malloc(%zu): usable %zu", n, u);
        CHECK((uintptr_t)p % 16 == 0, "malloc(%zu) = %p", n, (void *)p);
        fill(p, u, i);
    }
    /* all held at once: no block overlaps another */
    for (unsigned i = 0; i < nsizes; i++) {
        if (!held[i])
            continue;
        size_t u = malloc_usable_size(held[i]), bad = first_bad(held[i], u, i);
        CHECK(bad == SIZE_MAX, "block of %zu bytes: byte %zu changed", sizes[i], bad);
    }
    for (unsigned i = 0; i < nsizes; i++)
        free(held[i]);
    /* again, one at a time: reused blocks fit as well */
    for (unsigned i = 0; i < nsizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = malloc(n);
        if (!p) {
            CHECK(p != NULL, "malloc(%zu) again", n);
            continue;
        }
        CHECK(cost_ok(n, malloc_usable_size(p)), "malloc(%zu) again: usable %zu", n,
              malloc_usable_size(p));
        fill(p, n, i + 1);
        CHECK(first_bad(p, n, i + 1) == SIZE_MAX, "block of %zu bytes again", n);
        free(p);
    }
}

static int zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static void test_calloc(void)
{
    for (unsigned i = 0; i < nsizes; i += 3) {
        size_t n = sizes[i];
        if (n > ((size_t)16 << 20))
            continue;
        unsigned char *p = malloc(n);
        if (p)
            memset(p, 0xEE, malloc_usable_size(p));
        free(p); /* kept: the next block of this size is this one */
        unsigned char *z = calloc(1, n);
        CHECK(z && zero(z, n), "calloc(1, %zu) after a dirty free", n);
        free(z);
    }
}

static void test_realloc(void)
{
    /* grow in place: 300 KB is 64+8+2+1 pages, its first block 256 KiB, so
     * its slot holds 512 KiB */
    size_t a = 300 * 1000;
    unsigned char *p = malloc(a);
    fill(p, a, 1);
    uintptr_t was = (uintptr_t)p;
    unsigned char *q = realloc(p, 500 * 1000);
    CHECK((uintptr_t)q == was, "realloc 300 KB -> 500 KB moved (%#lx -> %p)", (unsigned long)was,
          (void *)q);
    CHECK(q && first_bad(q, a, 1) == SIZE_MAX, "realloc 300 KB -> 500 KB lost bytes");
    CHECK(q && cost_ok(500 * 1000, malloc_usable_size(q)), "after growing: usable %zu",
          malloc_usable_size(q));
    fill(q, 500 * 1000, 2);
    /* shrink in place: the trailing pieces go back */
    was = (uintptr_t)q;
    p = realloc(q, 280 * 1000);
    CHECK((uintptr_t)p == was, "realloc 500 KB -> 280 KB moved");
    CHECK(p && first_bad(p, 280 * 1000, 2) == SIZE_MAX, "shrinking lost bytes");
    CHECK(p && malloc_usable_size(p) < 500 * 1000, "shrinking kept %zu bytes", malloc_usable_size(p));
    /* beyond the slot: moves, bytes kept */
    q = realloc(p, 3 << 20);
    CHECK(q && first_bad(q, 280 * 1000, 2) == SIZE_MAX, "realloc to 3 MiB lost bytes");
    CHECK(q && cost_ok(3 << 20, malloc_usable_size(q)), "3 MiB: usable %zu", malloc_usable_size(q));
    /* a series of small steps, as a growing buffer: bytes kept throughout,
     * and most steps in place */
    size_t n = threshold, moves = 0;
    unsigned char *r = malloc(n);
    fill(r, n, 3);
    while (n < ((size_t)8 << 20)) {
        size_t m = n + n / 8 + 1000;
        uintptr_t before = (uintptr_t)r;
        unsigned char *s = realloc(r, m);
        if (!s) {
            CHECK(s != NULL, "realloc(%zu)", m);
            break;
        }
        moves += (uintptr_t)s != before;
        CHECK(first_bad(s, n, 3) == SIZE_MAX, "realloc %zu -> %zu lost bytes", n, m);
        CHECK(cost_ok(m, malloc_usable_size(s)), "realloc to %zu: usable %zu", m,
              malloc_usable_size(s));
        fill(s, m, 3);
        r = s;
        n = m;
    }
    CHECK(moves <= 12, "growing by 1/8 moved the buffer %zu times of ~36", moves);
    free(r);
    free(q);
    /* from the system allocator into a block and back */
    p = malloc(1000);
    fill(p, 1000, 4);
    q = realloc(p, 700 * 1000);
    CHECK(q && first_bad(q, 1000, 4) == SIZE_MAX, "system -> block lost bytes");
    p = realloc(q, 1000);
    CHECK(p && first_bad(p, 1000, 4) == SIZE_MAX, "block -> system lost bytes");
    free(p);
}

static void test_aligned(void)
{
    size_t aligns[] = {64, 4096, 8192, 65536, (size_t)1 << 20, (size_t)4 << 20};
    for (unsigned i = 0; i < sizeof aligns / sizeof *aligns; i++) {
        void *p = NULL;
        size_t n = 300 * 1000;
        int rc = posix_memalign(&p, aligns[i], n);
        CHECK(rc == 0 && p && (uintptr_t)p % aligns[i] == 0, "posix_memalign(%zu, %zu)",
              aligns[i], n);
        if (p) {
            fill(p, n, 5);
            CHECK(first_bad(p, n, 5) == SIZE_MAX, "aligned block");
        }
        free(p);
    }
}

/* the child sees blocks of several pieces as of the fork; writes on
 * either side stay apart */
static int by_addr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Blocks whose sizes fill a power of two exactly, live at once: none ends
 * where the next begins. */
static void test_apart(void)
{
    static const size_t sizes[] = {128 << 10, 256 << 10, 1 << 20, 4 << 20, 200 << 10};
    enum { EACH = 6, N = EACH * sizeof sizes / sizeof sizes[0] };
    uintptr_t span[N][2];
    void *p[N];
    for (unsigned i = 0; i < N; i++) {
        size_t n = sizes[i / EACH];
        if (n < threshold)
            n = threshold;
        p[i] = malloc(n);
        CHECK(p[i] != NULL, "malloc(%zu)", n);
        if (p[i])
            memset(p[i], 1, n);
        span[i][0] = (uintptr_t)p[i];
        span[i][1] = (uintptr_t)p[i] + n;
    }
    qsort(span, N, sizeof span[0], by_addr);
    unsigned touching = 0;
    for (unsigned i = 0; i + 1 < N; i++)
        touching += span[i][1] >= span[i + 1][0];
    CHECK(touching == 0, "%u of %u blocks end where the next begins", touching, N);
    for (unsigned i = 0; i < N; i++)
        free(p[i]);
    /* nor once realloc has grown them to a power of two */
    enum { G = 12 };
    uintptr_t grown[G][2];
    void *q[G];
    for (unsigned i = 0; i < G; i++)
        q[i] = malloc(768 << 10 >= threshold ? 768 << 10 : threshold);
    for (unsigned i = 0; i < G; i++) {
        void *r = q[i] ? realloc(q[i], 1 << 20) : NULL;
        CHECK(r != NULL, "realloc to 1 MiB");
        q[i] = r ? r : q[i];
        grown[i][0] = (uintptr_t)q[i];
        grown[i][1] = (uintptr_t)q[i] + (1 << 20);
    }
    qsort(grown, G, sizeof grown[0], by_addr);
    touching = 0;
    for (unsigned i = 0; i + 1 < G; i++)
        touching += grown[i][1] >= grown[i + 1][0];
    CHECK(touching == 0, "%u of %u grown blocks end where the next begins", touching, G);
    for (unsigned i = 0; i < G; i++)
        free(q[i]);
}

static void test_fork(void)
{
    size_t n = 700 * 1000;
    unsigned char *p = malloc(n);
    fill(p, n, 6);
    pid_t pid = fork();
    if (pid == 0) {
        usleep(50000);
        int ok = first_bad(p, n, 6) == SIZE_MAX;
        fill(p, n, 8);
        unsigned char *q = realloc(p, 2 * n);
        ok = ok && q && first_bad(q, n, 8) == SIZE_MAX;
        free(q);
        _exit(ok ? 0 : 1);
    }
    fill(p, n, 7);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "fork child");
    CHECK(first_bad(p, n, 7) == SIZE_MAX, "parent's block after the child wrote");
    free(p);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        threshold = strtoul(argv[1], NULL, 0);
    make_sizes();
    test_sizes();
    test_calloc();
    test_realloc();
    test_aligned();
    test_apart();
    test_fork();
    printf("preload_sizes: %d passed, %d failed (%u sizes)\n", passed, failed, nsizes);
    return failed != 0;
}
