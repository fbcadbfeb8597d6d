/* stress_main.c - the thread and process stress tests (test_stress.c,
 * test_multiproc.c) as a plain program, for sanitizer runs: Criterion's
 * runner itself crashes under ThreadSanitizer. Not part of make check.
 *
 *   gcc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread \
 *       -Ilibfmem/include -Ilibfmem -Itests tests/stress_main.c \
 *       libfmem/[a-z]*.c libfmem/service/{msg,sock,ring,own,occupancy,client}.c \
 *       -lpthread -o /tmp/stress-tsan && /tmp/stress-tsan
 *
 * (the sources of libfmem_core: Makefile.am and libfmem/service/local.am.)
 *
 * Exit status 0 when every run passed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fmem.h"
#include "shadow.h"
#include "stress.h"

static int failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                              \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
            failures++;                                                                       \
            return;                                                                           \
        }                                                                                     \
    } while (0)

static void check_drained(const char *what, fmem_pool *p, struct stress_shared *s,
                          unsigned nodes, uint64_t node_bytes)
{
    fmem_stats_t st;
    CHECK(fmem_stats(p, &st) == 0, "%s: stats", what);
    CHECK(atomic_load(&s->fail.count) == 0, "%s: %s", what, s->fail.msg);
    CHECK(s->allocs == s->frees, "%s: %llu allocs, %llu frees", what,
          (unsigned long long)s->allocs, (unsigned long long)s->frees);
    CHECK(shadow_owned_chunks(&s->sh) == 0, "%s: shadow map not empty", what);
    CHECK(st.allocated_bytes == 0, "%s: %llu bytes left", what,
          (unsigned long long)st.allocated_bytes);
    fmem_handle all[16];
    for (unsigned i = 0; i < nodes; i++)
        CHECK(fmem_alloc(p, node_bytes, &all[i]) == 0, "%s: whole node %u", what, i);
    for (unsigned i = 0; i < nodes; i++)
        CHECK(fmem_free(p, &all[i]) == 0, "%s: free whole node %u", what, i);
    printf("ok   %s: %llu allocations, %llu ENOMEM, max retries %llu\n", what,
           (unsigned long long)s->allocs, (unsigned long long)s->enomem,
           (unsigned long long)st.max_retries);
}

static void threads(const char *uri, unsigned nodes, uint64_t node_bytes, int nthreads,
                    int max_live, double seconds, bool small_only)
{
    static struct stress_shared s;
    memset(&s, 0, sizeof s);
    s.max_live = max_live;
    s.small_only = small_only;
    fmem_pool *p;
    CHECK(fmem_open(uri, &p) == 0, "open %s", uri);
    CHECK(shadow_init(&s.sh, nodes, node_bytes), "shadow");
    pthread_t t[32];
    struct stress_worker w[32];
    s.deadline = now_seconds() + seconds;
    s.hard_deadline = s.deadline + 60;
    s.min_allocs = 2000;
    for (int i = 0; i < nthreads; i++) {
        w[i] = (struct stress_worker){.s = &s, .p = p, .owner = (uint32_t)i + 1};
        pthread_create(&t[i], NULL, stress_worker_run, &w[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    check_drained(uri, p, &s, nodes, node_bytes);
    shadow_destroy(&s.sh);
    fmem_close(p);
}

static void processes(int nchildren, int nthreads, double seconds)
{
    char path[96], uri[160];
    snprintf(path, sizeof path, "/dev/shm/fmem-test-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=64M", path + 8);
    pool_unlink(path);
    struct stress_shared *s = shared_alloc(sizeof *s);
    CHECK(s && shadow_init(&s->sh, 1, UINT64_C(64) << 20), "shared memory");
    s->max_live = 16;
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    if (rc)
        pool_unlink(path);
    CHECK(rc == 0, "open %s: %s", uri, fmem_strerror(rc));
    s->deadline = now_seconds() + seconds;
    s->hard_deadline = s->deadline + 60;
    s->min_allocs = 2000;
    pid_t pids[8];
    for (int c = 0; c < nchildren; c++) {
        fflush(NULL);
        pids[c] = fork();
        if (pids[c] == 0) {
            fmem_pool *cp;
            if (fmem_open(uri, &cp))
                _exit(2);
            pthread_t t[8];
            struct stress_worker w[8];
            for (int i = 0; i < nthreads; i++) {
                w[i] = (struct stress_worker){.s = s, .p = cp,
                                              .owner = ((uint32_t)c + 1) << 8 | (uint32_t)(i + 1)};
                pthread_create(&t[i], NULL, stress_worker_run, &w[i]);
            }
            for (int i = 0; i < nthreads; i++)
                pthread_join(t[i], NULL);
            fmem_close(cp);
            _exit(atomic_load(&s->fail.count) ? 1 : 0);
        }
    }
    int bad = 0;
    for (int c = 0; c < nchildren; c++) {
        int status;
        if (waitpid(pids[c], &status, 0) != pids[c] || !WIFEXITED(status) || WEXITSTATUS(status))
            bad++;
    }
    pool_unlink(path);
    CHECK(bad == 0, "%d children failed: %s", bad, s->fail.msg);
    check_drained("processes", p, s, 1, UINT64_C(64) << 20);
    fmem_close(p);
    shadow_destroy(&s->sh);
    shared_free(s, sizeof *s);
}

int main(void)
{
    threads("mem:?size=64M", 1, 64u << 20, 8, 24, 1.5, false);
    threads("mem:?size=64M&rtt_ns=2000", 1, 64u << 20, 16, 12, 1.5, false);
    threads("mem:?size=8M", 1, 8u << 20, 8, 16, 1.0, false);
    threads("mem:?size=2M&rtt_ns=500", 1, 2u << 20, 8, 8, 1.0, true);
    threads("mem:?size=16M&nodes=4", 4, 16u << 20, 8, 16, 1.0, false);
    processes(4, 2, 1.5);
    printf("%d passed, %d failed\n", 6 - failures, failures);
    return failures ? 1 : 0;
}
