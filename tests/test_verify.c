/* test_verify.c - the verifier tells the truth on a pool in use: threads of
 * this process and other processes allocate and free blocks of every layer
 * (chunks, spans, whole sections, span moves between the layers) while
 * fmem_verify runs again and again, and every report must be free of
 * errors; a damage made on purpose in the middle of the churn must still
 * be found. */
#include <criterion/criterion.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pool_internal.h"

static char path[96], uri[160];

static void setup(void)
{
    snprintf(path, sizeof path, "/dev/shm/fmem-test-verify-%d", (int)getpid());
    snprintf(uri, sizeof uri, "shm:%s?size=256M", path + 8);
    fmem_unlink(uri);
}

static void teardown(void)
{
    fmem_unlink(uri);
}

TestSuite(verify_busy, .init = setup, .fini = teardown, .timeout = 120);

static atomic_int *mmap_shared_stop(void)
{
    atomic_int *s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(s, MAP_FAILED);
    atomic_init(s, 0);
    return s;
}

/* Random churn: up to 24 live blocks of 4 KiB .. 4 MiB (chunk, span and
 * multi-section layers), until *stop. */
static void churn(fmem_pool *p, atomic_int *stop, unsigned seed)
{
    fmem_handle live[24];
    int n = 0;
    while (!atomic_load(stop)) {
        seed = seed * 1103515245u + 12345u;
        unsigned r = seed >> 8;
        if (n > 0 && (n == 24 || r % 3 == 0)) {
            int i = (int)(r / 3 % (unsigned)n);
            if (fmem_free(p, &live[i]))
                abort();
            live[i] = live[--n];
            continue;
        }
        unsigned k = r % 100 < 70 ? r / 100 % 5 : r % 100 < 97 ? 5 + r / 100 % 5 : 10;
        if (fmem_alloc(p, (size_t)4096 << k, &live[n]) == 0)
            n++;
    }
    while (n > 0)
        if (fmem_free(p, &live[--n]))
            abort();
}

struct worker {
    fmem_pool *p;
    atomic_int *stop;
    unsigned seed;
};

static void *churn_thread(void *arg)
{
    struct worker *w = arg;
    churn(w->p, w->stop, w->seed);
    return NULL;
}

/* Errors of one verification (what it said goes to stderr). */
static uint64_t verify_errors(fmem_pool *p, uint64_t *busy)
{
    fmem_verify_report r;
    if (fmem_verify(p, &r, stderr))
        return UINT64_MAX;
    *busy += r.busy_sections;
    return r.errors;
}

/* Churning children die with the test even if it fails, and stop by
 * themselves after a while. */
static pid_t spawn_churner(atomic_int *stop, unsigned seed)
{
    pid_t parent = getpid(), pid = fork();
    cr_assert_geq(pid, 0);
    if (pid)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    alarm(60);
    fmem_pool *q;
    if (fmem_open(uri, &q))
        _exit(2);
    churn(q, stop, seed);
    fmem_close(q);
    _exit(0);
}

Test(verify_busy, no_false_alarms_while_threads_and_processes_allocate)
{
    enum { PROCS = 2, THREADS = 2, ROUNDS = 150 };
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0);
    atomic_int *stop = mmap_shared_stop();
    pid_t kids[PROCS];
    for (int i = 0; i < PROCS; i++)
        kids[i] = spawn_churner(stop, 77u + (unsigned)i);
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){p, stop, 991u * (unsigned)(i + 1)};
        cr_assert_eq(pthread_create(&t[i], NULL, churn_thread, &w[i]), 0);
    }
    usleep(100000);
    uint64_t busy = 0, worst = 0;
    int dirty = 0;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t e = verify_errors(p, &busy);
        dirty += e != 0;
        worst = e > worst ? e : worst;
    }
    atomic_store(stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < PROCS; i++) {
        int st;
        cr_assert_eq(waitpid(kids[i], &st, 0), kids[i]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x", i, st);
    }
    cr_log_info("busy sections over %d verifications: %llu of %llu", ROUNDS,
                (unsigned long long)busy, (unsigned long long)ROUNDS * 128);
    cr_assert_eq(dirty, 0, "%d of %d verifications of a busy pool reported errors (up to %llu)",
                 dirty, ROUNDS, (unsigned long long)worst);
    cr_expect_lt(busy, ROUNDS * 128 / 4, "the verifier gave up on most of the pool");
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(p, &r, stderr), 0);
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.busy_sections, 0, "a quiet pool is checked whole");
    cr_assert_eq(r.chunks_allocated, 0);
    fmem_close(p);
}

/* A real inconsistency made while others allocate is still reported. */
Test(verify_busy, real_damage_is_found_under_load)
{
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0);
    atomic_int *stop = mmap_shared_stop();
    pthread_t t;
    struct worker w = {p, stop, 4242u};
    cr_assert_eq(pthread_create(&t, NULL, churn_thread, &w), 0);
    /* a block whose log entry is wiped: allocated with no owner (a second
     * block in its span takes the span header's temporary log, which would
     * otherwise rightly restore the entry) */
    fmem_handle h, next;
    cr_assert_eq(fmem_alloc(p, 8192, &h), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &next), 0);
    cr_assert_eq(h.addr / FMEM_SPAN_SIZE, next.addr / FMEM_SPAN_SIZE);
    struct node *n = p->nodes[0];
    uint64_t zero = 0;
    cr_assert_eq(tp_write(n->tp, log_off(n, h.addr >> CHUNK_SHIFT), &zero, 8), 0);
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(p, &r, NULL), 0);
    atomic_store(stop, 1);
    pthread_join(t, NULL);
    cr_assert_geq(r.alloc_without_owner, 2, "the wiped entry's two chunks were not reported");
    cr_assert_eq(r.errors, r.alloc_without_owner, "%llu other errors",
                 (unsigned long long)(r.errors - r.alloc_without_owner));
    fmem_close(p);
}
