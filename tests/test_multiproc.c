/* test_multiproc.c - several processes share one named pool, each with its
 * own client and user id; a shadow ownership map in shared memory checks
 * that no chunk is ever handed to two owners at once. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fmem.h"
#include "shadow.h"
#include "stress.h"

#define MAX_CHILDREN 8

struct mp_shared {
    struct stress_shared s;
    uint32_t uids[MAX_CHILDREN];
    atomic_int ready; /* children attached, for the start barrier */
    atomic_int go;
    atomic_int attached; /* children holding their client open */
};

static char pool_path[96]; /* /dev/shm/fmem-test-<pid> */
static char pool_uri[160];

static void mp_init(void)
{
    snprintf(pool_path, sizeof pool_path, "/dev/shm/fmem-test-%d", (int)getpid());
    snprintf(pool_uri, sizeof pool_uri, "shm:%s?size=64M", pool_path + 8);
    pool_unlink(pool_path);
}

static void mp_fini(void)
{
    pool_unlink(pool_path); /* also after a failed assertion */
}

TestSuite(multiproc, .init = mp_init, .fini = mp_fini, .timeout = 60);

static struct mp_shared *mp_shared_new(void)
{
    struct mp_shared *m = shared_alloc(sizeof *m);
    cr_assert_not_null(m);
    cr_assert(shadow_init(&m->s.sh, 1, UINT64_C(64) << 20));
    return m;
}

static void mp_shared_free(struct mp_shared *m)
{
    shadow_destroy(&m->s.sh);
    shared_free(m, sizeof *m);
}

/* ---- children ------------------------------------------------------------
 * A child never returns into Criterion: it reports through the shared
 * failure record and its exit status. */

static int child_churn(struct mp_shared *m, int idx, int threads)
{
    fmem_pool *p;
    int rc = fmem_open(pool_uri, &p);
    if (rc) {
        failure_record(&m->s.fail, "child %d: fmem_open: %s", idx, fmem_strerror(rc));
        return 2;
    }
    fmem_stats_t st;
    fmem_stats(p, &st);
    m->uids[idx] = st.user_id;
    pthread_t t[8];
    struct stress_worker w[8];
    for (int i = 0; i < threads; i++) {
        w[i] = (struct stress_worker){.s = &m->s, .p = p, .owner = ((uint32_t)idx + 1) << 8 | (uint32_t)(i + 1)};
        if (pthread_create(&t[i], NULL, stress_worker_run, &w[i]) != 0) {
            failure_record(&m->s.fail, "child %d: pthread_create", idx);
            threads = i;
            break;
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    fmem_close(p);
    return atomic_load(&m->s.fail.count) ? 1 : 0;
}

/* Fork n children running fn; wait for all; returns how many failed. */
static int run_children(struct mp_shared *m, int n, int (*fn)(struct mp_shared *, int, int),
                        int arg)
{
    pid_t pids[MAX_CHILDREN];
    int failed = 0;
    cr_assert_leq(n, MAX_CHILDREN);
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0)
            _exit(fn(m, i, arg));
        if (pids[i] < 0) {
            failure_record(&m->s.fail, "fork: child %d", i);
            n = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        int status;
        if (waitpid(pids[i], &status, 0) != pids[i] || !WIFEXITED(status) || WEXITSTATUS(status)) {
            failed++;
            if (WIFSIGNALED(status))
                failure_record(&m->s.fail, "child %d killed by signal %d", i, WTERMSIG(status));
            else
                failure_record(&m->s.fail, "child %d exited with %d", i, WEXITSTATUS(status));
        }
    }
    return failed;
}

static void check_pool_drained(fmem_pool *p, struct mp_shared *m)
{
    cr_assert_eq(shadow_owned_chunks(&m->s.sh), 0);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.allocated_bytes, 0, "%llu bytes still allocated",
                 (unsigned long long)st.allocated_bytes);
    fmem_handle all;
    int rc = fmem_alloc(p, 64u << 20, &all);
    cr_assert_eq(rc, 0, "whole-pool allocation after the children: %s", fmem_strerror(rc));
    cr_assert_eq(fmem_free(p, &all), 0);
}

Test(multiproc, processes_share_a_pool_without_double_handouts)
{
    enum { CHILDREN = 4, THREADS = 2 };
    struct mp_shared *m = mp_shared_new();
    m->s.max_live = 16;
    /* the parent creates the pool and keeps a client to check it after */
    fmem_pool *p;
    int rc = fmem_open(pool_uri, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", pool_uri, fmem_strerror(rc));
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    uint32_t parent_uid = st.user_id;

    m->s.deadline = now_seconds() + 1.5;
    m->s.hard_deadline = m->s.deadline + 20;
    m->s.min_allocs = 2000;
    int failed = run_children(m, CHILDREN, child_churn, THREADS);
    cr_log_info("%d processes x %d threads: %llu allocations, %llu ENOMEM",
                CHILDREN, THREADS, (unsigned long long)m->s.allocs,
                (unsigned long long)m->s.enomem);
    cr_assert_eq(failed, 0, "%d children failed; first failure: %s", failed, m->s.fail.msg);
    cr_assert_eq(atomic_load(&m->s.fail.count), 0, "%s", m->s.fail.msg);
    cr_assert_eq(m->s.allocs, m->s.frees);
    cr_assert_geq(m->s.allocs, 2000, "only %llu allocations", (unsigned long long)m->s.allocs);
    for (int i = 0; i < CHILDREN; i++) {
        cr_assert_neq(m->uids[i], 0);
        cr_assert_neq(m->uids[i], parent_uid, "child %d shares the parent's user id", i);
        for (int j = 0; j < i; j++)
            cr_assert_neq(m->uids[i], m->uids[j], "children %d and %d share user id %u", i, j,
                          m->uids[i]);
    }
    check_pool_drained(p, m);
    fmem_close(p);
    mp_shared_free(m);
}

/* Every child opens the pool that nobody has created yet, at the same
 * moment: one creates it, the others must wait for it, not fail. */
static int child_race_open(struct mp_shared *m, int idx, int nchildren)
{
    atomic_fetch_add(&m->ready, 1);
    while (!atomic_load(&m->go))
        ;
    fmem_pool *p;
    int rc = fmem_open(pool_uri, &p);
    if (rc) {
        failure_record(&m->s.fail, "child %d: fmem_open during creation: %s", idx,
                       fmem_strerror(rc));
        return 2;
    }
    fmem_stats_t st;
    fmem_stats(p, &st);
    m->uids[idx] = st.user_id;
    if (st.capacity_bytes != UINT64_C(64) << 20) {
        failure_record(&m->s.fail, "child %d sees a pool of %llu bytes", idx,
                       (unsigned long long)st.capacity_bytes);
        return 3;
    }
    /* a little work on it, checked in the shadow map */
    struct stress_worker w = {.s = &m->s, .p = p, .owner = (uint32_t)idx + 1};
    struct test_rng r;
    rng_seed(&r, (uint64_t)idx);
    struct live_block b[8];
    int n = 0;
    for (int i = 0; i < 8; i++)
        if (stress_alloc_and_claim(&w, &r, &b[n], (uint64_t)i + 1))
            n++;
    while (n > 0)
        stress_release_and_free(&w, &b[--n]);
    /* user ids are only unique among clients open at the same time: stay
     * open until every child has recorded its own */
    atomic_fetch_add(&m->attached, 1);
    for (int i = 0; i < 2000 && atomic_load(&m->attached) < nchildren; i++)
        usleep(1000);
    fmem_close(p);
    return atomic_load(&m->s.fail.count) ? 1 : 0;
}

Test(multiproc, concurrent_creation)
{
    enum { CHILDREN = 6 };
    struct mp_shared *m = mp_shared_new();
    pid_t starter = fork();
    if (starter == 0) { /* releases the children once all are spinning */
        while (atomic_load(&m->ready) < CHILDREN)
            usleep(100);
        atomic_store(&m->go, 1);
        _exit(0);
    }
    cr_assert_gt(starter, 0);
    int failed = run_children(m, CHILDREN, child_race_open, CHILDREN);
    waitpid(starter, NULL, 0);
    cr_assert_eq(failed, 0, "%d children failed; first failure: %s", failed, m->s.fail.msg);
    for (int i = 0; i < CHILDREN; i++)
        for (int j = 0; j < i; j++)
            cr_assert_neq(m->uids[i], m->uids[j], "children %d and %d share user id %u", i, j,
                          m->uids[i]);
    char uri[200];
    snprintf(uri, sizeof uri, "shm:%s?create=0", pool_path + 8);
    fmem_pool *p;
    int rc = fmem_open(uri, &p);
    cr_assert_eq(rc, 0, "reopen: %s", fmem_strerror(rc));
    check_pool_drained(p, m);
    fmem_close(p);
    mp_shared_free(m);
}

/* A child that dies holding blocks leaves them allocated (until recovery):
 * the others are not disturbed and never get those chunks. */
static int child_die_holding(struct mp_shared *m, int idx, int unused)
{
    (void)unused;
    fmem_pool *p;
    if (fmem_open(pool_uri, &p))
        return 2;
    struct stress_worker w = {.s = &m->s, .p = p, .owner = 0x7F00u + (uint32_t)idx};
    struct test_rng r;
    rng_seed(&r, 99);
    struct live_block b;
    for (int i = 0; i < 16; i++)
        if (!stress_alloc_and_claim(&w, &r, &b, (uint64_t)i + 1))
            return 3;
    raise(SIGKILL);
    return 4;
}

Test(multiproc, survivors_never_get_a_dead_clients_blocks)
{
    struct mp_shared *m = mp_shared_new();
    m->s.max_live = 16;
    fmem_pool *p;
    cr_assert_eq(fmem_open(pool_uri, &p), 0);
    pid_t dead = fork();
    if (dead == 0)
        _exit(child_die_holding(m, 0, 0));
    int status;
    cr_assert_eq(waitpid(dead, &status, 0), dead);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child did not die as planned");
    uint64_t held = shadow_owned_chunks(&m->s.sh) * FMEM_CHUNK_SIZE;
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.allocated_bytes, held, "pool says %llu, the dead child held %llu",
                 (unsigned long long)st.allocated_bytes, (unsigned long long)held);

    m->s.deadline = now_seconds() + 1.0;
    m->s.hard_deadline = m->s.deadline + 20;
    m->s.min_allocs = 1000;
    int failed = run_children(m, 3, child_churn, 2);
    cr_assert_eq(failed, 0, "%d children failed; first failure: %s", failed, m->s.fail.msg);
    cr_assert_eq(shadow_owned_chunks(&m->s.sh) * FMEM_CHUNK_SIZE, held);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_assert_eq(st.allocated_bytes, held);
    fmem_close(p);
    mp_shared_free(m);
}
