/* preload_check.c - run under libfmem-preload.so (preload.sh): the malloc
 * family behaves as the C library specifies for small (system) and large
 * (pool) blocks, across threads and fork(). A block is "in the pool" when
 * /proc/self/maps shows it in the pool's data file, $PRELOAD_CHECK_FILE
 * (preload.sh runs it on a named pool). Prints one line per
 * failed check and a summary; exit status 1 on any failure. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;
#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond)                                                                \
            passed++;                                                            \
        else {                                                                   \
            failed++;                                                            \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

#define BIG ((size_t)1 << 20)
#define SMALL ((size_t)1000)

/* Is p inside a shared mapping of the pool's data file? (A block of the
 * parent's seen by a fork child is a private, copy-on-write one.) */
static int in_pool(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && (uintptr_t)p >= lo &&
            (uintptr_t)p < hi) {
            const char *file = getenv("PRELOAD_CHECK_FILE");
            /* writable: a fork child's read-only view of its parent's
             * block, until its first write, is no way into the pool */
            found = file && *file && perms[1] == 'w' && perms[3] == 's' &&
                    strstr(line, file) != NULL;
            break;
        }
    }
    if (f)
        fclose(f);
    return found;
}

static int all(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static void test_kinds(void)
{
    unsigned char *big = malloc(BIG), *small = malloc(SMALL);
    CHECK(big && small);
    CHECK(in_pool(big));
    CHECK(!in_pool(small));
    CHECK(malloc_usable_size(big) >= BIG);
    CHECK(malloc_usable_size(small) >= SMALL);
    CHECK(malloc_usable_size(NULL) == 0);
    memset(big, 0xAB, BIG);
    free(big);
    free(small);
    free(NULL);
    /* a reused block is zero through calloc */
    unsigned char *z = calloc(BIG / 16, 16);
    CHECK(z && in_pool(z) && all(z, BIG, 0));
    free(z);
    volatile size_t huge = SIZE_MAX / 2; /* hidden from the compiler's size checks */
    errno = 0;
    CHECK(calloc(huge, 4) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(reallocarray(NULL, huge, 4) == NULL && errno == ENOMEM);
}

static void fill(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + 3);
}

static int filled(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 7 + 3))
            return 0;
    return 1;
}

static void test_realloc(void)
{
    unsigned char *p = malloc(SMALL);
    fill(p, SMALL);
    p = realloc(p, BIG); /* system -> pool */
    CHECK(p && in_pool(p) && filled(p, SMALL));
    fill(p, BIG);
    p = realloc(p, 3 * BIG); /* grow in the pool */
    CHECK(p && in_pool(p) && filled(p, BIG));
    fill(p, 3 * BIG);
    unsigned char *q = realloc(p, 3 * BIG - 4096); /* shrink: in place */
    CHECK(q == p && filled(q, 3 * BIG - 4096));
    p = realloc(q, SMALL); /* pool -> system */
    CHECK(p && !in_pool(p) && filled(p, SMALL));
    free(p);
    p = malloc(BIG);
    CHECK(realloc(p, 0) == NULL); /* frees, as glibc */
    p = reallocarray(NULL, 256, 4096);
    CHECK(p && in_pool(p));
    free(p);
}

static void test_aligned(void)
{
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, BIG) == 0 && in_pool(p) && (uintptr_t)p % 64 == 0);
    free(p);
    CHECK(posix_memalign(&p, BIG, BIG) == 0 && in_pool(p) && (uintptr_t)p % BIG == 0);
    free(p);
    CHECK(posix_memalign(&p, 4 * BIG, BIG) == 0 && (uintptr_t)p % (4 * BIG) == 0);
    free(p);
    CHECK(posix_memalign(&p, 24, BIG) == EINVAL);
    CHECK(posix_memalign(&p, 64, SMALL) == 0 && !in_pool(p) && (uintptr_t)p % 64 == 0);
    free(p);
    p = aligned_alloc(8192, BIG);
    CHECK(p && in_pool(p) && (uintptr_t)p % 8192 == 0);
    free(p);
    p = memalign(65536, BIG);
    CHECK(p && in_pool(p) && (uintptr_t)p % 65536 == 0);
    free(p);
    p = valloc(BIG);
    CHECK(p && in_pool(p) && (uintptr_t)p % 4096 == 0);
    free(p);
    p = pvalloc(BIG - 100);
    CHECK(p && in_pool(p) && malloc_usable_size(p) >= BIG);
    free(p);
}

/* threads mixing both kinds, each checking its own data (the first and
 * last 4 KiB of each block: enough to catch a lost or shared block) */
static void mark(unsigned char *p, size_t n, int v)
{
    size_t edge = n < 4096 ? n : 4096;
    memset(p, v, edge);
    memset(p + n - edge, v, edge);
}

static int marked(const unsigned char *p, size_t n, int v)
{
    size_t edge = n < 4096 ? n : 4096;
    return all(p, edge, (unsigned char)v) && all(p + n - edge, edge, (unsigned char)v);
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char *slot[16] = {0};
    size_t len[16] = {0};
    int bad = 0;
    for (int i = 0; i < 1500; i++) {
        int k = rand_r(&seed) % 16;
        if (slot[k]) {
            bad += !marked(slot[k], len[k], k);
            if (rand_r(&seed) % 2) {
                free(slot[k]);
                slot[k] = NULL;
                continue;
            }
            size_t n = rand_r(&seed) % 2 ? SMALL : BIG / 4 + (size_t)(rand_r(&seed) % 300000);
            slot[k] = realloc(slot[k], n);
            size_t keep = len[k] < n ? len[k] : n;
            bad += !all(slot[k], keep < 4096 ? keep : 4096, (unsigned char)k);
            len[k] = n;
        } else {
            len[k] = rand_r(&seed) % 3 ? BIG / 4 + (size_t)(rand_r(&seed) % 300000) : SMALL;
            slot[k] = malloc(len[k]);
        }
        mark(slot[k], len[k], k);
    }
    for (int k = 0; k < 16; k++)
        free(slot[k]);
    return (void *)(intptr_t)bad;
}

static void test_threads(void)
{
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (int)(intptr_t)r;
    }
    CHECK(bad == 0);
}

/* The child sees the blocks as they were at fork and owns private copies;
 * its writes and the parent's later writes stay apart. */
static void test_fork(void)
{
    unsigned char *p = malloc(BIG);
    memset(p, 'A', BIG);
    pid_t pid = fork();
    if (pid == 0) {
        int ok = all(p, BIG, 'A') && !in_pool(p);
        memset(p, 'C', BIG);
        unsigned char *q = malloc(2 * BIG); /* from a pool of its own */
        ok = ok && q && in_pool(q);
        memset(q, 'D', 2 * BIG);
        q = realloc(q, 4 * BIG);
        ok = ok && q && all(q, 2 * BIG, 'D');
        p = realloc(p, 2 * BIG); /* a private copy moves into the new pool */
        ok = ok && p && all(p, BIG, 'C') && in_pool(p);
        free(p);
        free(q);
        _exit(ok ? 0 : 1);
    }
    memset(p, 'B', BIG); /* after fork returned: invisible to the child */
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(all(p, BIG, 'B'));
    free(p);
    unsigned char *r = malloc(BIG); /* the parent's pool still works */
    CHECK(r && in_pool(r));
    free(r);
}

static _Atomic int stop;
static void *background(void *arg)
{
    (void)arg;
    while (!stop) {
        void *p = malloc(BIG);
        memset(p, 1, 4096);
        free(p);
    }
    return NULL;
}

/* forks while another thread allocates: no deadlock, children work */
static void test_fork_threads(void)
{
    pthread_t t;
    pthread_create(&t, NULL, background, NULL);
    int ok = 1;
    for (int i = 0; i < 10; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *p = malloc(BIG);
            int good = p && in_pool(p);
            free(p);
            _exit(good ? 0 : 1);
        }
        int st;
        ok = ok && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    stop = 1;
    pthread_join(t, NULL);
    CHECK(ok);
}

int main(void)
{
    test_kinds();
    test_realloc();
    test_aligned();
    test_threads();
    test_fork();
    test_fork_threads();
    printf("preload_check: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
