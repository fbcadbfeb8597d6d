/* test_crash.c - crash at every protocol step, recover, verify.
 *
 * For each crash point (and for its 1st and 3rd hit) a child process opens a
 * shared pool and runs a script that passes through every step of the
 * protocol (chunk, span and multi-section allocation and free, span claims,
 * releases of empty spans under pressure); a hook kills it with SIGKILL at
 * the chosen point. The parent, which holds blocks of its own, then recovers
 * the child's user id and checks: the verifier is clean, only the parent's
 * blocks are still allocated and their data and keys are intact (nothing
 * lost, nothing owned twice), and after freeing them the whole pool can be
 * allocated at once (nothing leaked).
 *
 * The pool is a fresh shm pool per case, or $FMEM_TEST_URI (the soft-RoCE
 * harness runs this file over RDMA against one memory node; every case then
 * leaves that pool as it found it).
 *
 * Quarantine: over verbs a free commits by revoking the key and marking the
 * block quarantined, and the memory node frees it in its layer later. On shm
 * the same path runs when fmem_quarantine_local is set (the freeing client
 * then finishes the block itself): the quarantine cases crash right after
 * the mark and inside that finish (for a whole-section block: between its
 * parts, and inside a part's free before its flush). Over RDMA the free of
 * a block the process allocated is the key CAS alone, its mark held by the
 * node (sent eight at a time or with the next other call) and its doorbell
 * owed: CP_OWN_FREE_HELD kills the child with them unsent (run over RDMA
 * only). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crashpoint.h"
#include "node.h" /* fmem_quarantine_local */

#define POOL_MB 32    /* the shm pool; over RDMA, whatever the node has */
#define MAX_POOL_MB 64

static unsigned pool_mb = POOL_MB;

static enum crash_point target;
static int hits_left;

static void kill_at(enum crash_point cp)
{
    if (cp == target && --hits_left == 0)
        kill(getpid(), SIGKILL);
}

static void must(int rc, const char *what)
{
    if (rc) {
        fprintf(stderr, "child: %s: %s\n", what, fmem_strerror(rc));
        _exit(3);
    }
}

/* Passes through every crash point at least three times. */
static void child_script(const char *uri, unsigned *uid_out)
{
    fmem_pool *p;
    must(fmem_open(uri, &p), "open");
    *uid_out = fmem_user_id(p, 0);
    fmem_crash_hook = kill_at;
    for (int round = 0; round < 3; round++) {
        fmem_handle small[3], span[2], multi;
        static const size_t small_sz[3] = {4096, 8192, 65536};
        for (int i = 0; i < 3; i++)
            must(fmem_alloc(p, small_sz[i], &small[i]), "alloc small");
        must(fmem_alloc(p, 128 << 10, &span[0]), "alloc 128K");
        must(fmem_alloc(p, 1 << 20, &span[1]), "alloc 1M");
        must(fmem_alloc(p, 4 << 20, &multi), "alloc 4M");
        for (int i = 0; i < 3; i++)
            must(fmem_free(p, &small[i]), "free small");
        for (int i = 0; i < 2; i++)
            must(fmem_free(p, &span[i]), "free span");
        must(fmem_free(p, &multi), "free 4M");
    }
    /* pressure: fill with 64 KiB blocks (spans attach), free them (spans stay
     * attached but empty), then ask for 2 MiB blocks (spans are released) */
    for (int round = 0; round < 3; round++) {
        static fmem_handle h[MAX_POOL_MB * 16];
        int n = 0;
        while (n < (int)pool_mb * 16 && fmem_alloc(p, 65536, &h[n]) == 0)
            n++;
        for (int i = 0; i < n; i++)
            must(fmem_free(p, &h[i]), "free 64K");
        n = 0;
        while (n < (int)pool_mb / 2 && fmem_alloc(p, 2 << 20, &h[n]) == 0)
            n++;
        for (int i = 0; i < n; i++)
            must(fmem_free(p, &h[i]), "free 2M");
    }
    fmem_close(p);
    _exit(0); /* the crash point was never reached */
}

struct crash_case {
    enum crash_point cp;
    int hit;
    bool quarantine; /* frees take the quarantine path (on shm) */
};

/* Points inside the finish of a quarantined free (the layer's free). */
static const enum crash_point finish_points[] = {CP_CHUNK_FREE_COMMIT, CP_SPAN_FREE_COMMIT,
                                                 CP_MULTI_FREE_PART, CP_FLUSH_READ};
#define NFINISH (sizeof finish_points / sizeof finish_points[0])

ParameterizedTestParameters(crash, every_point)
{
    static struct crash_case cases[CP_COUNT * 2 + NFINISH * 2];
    for (int i = 0; i < CP_COUNT; i++) {
        /* the finish of a whole-section block is reached through
         * quarantine only */
        bool q = i == CP_FREE_QUARANTINED || i == CP_QUARANTINE_PART;
        cases[2 * i] = (struct crash_case){(enum crash_point)i, 1, q};
        cases[2 * i + 1] = (struct crash_case){(enum crash_point)i, 3, q};
    }
    for (unsigned i = 0; i < NFINISH; i++) {
        cases[CP_COUNT * 2 + 2 * i] = (struct crash_case){finish_points[i], 1, true};
        cases[CP_COUNT * 2 + 2 * i + 1] = (struct crash_case){finish_points[i], 3, true};
    }
    return cr_make_param_array(struct crash_case, cases, CP_COUNT * 2 + NFINISH * 2);
}

ParameterizedTest(struct crash_case *cc, crash, every_point, .timeout = 60)
{
    char name[64], uri[512], curi[512];
    const char *given = getenv("FMEM_TEST_URI");
    if (given && *given && strncmp(given, "rdma:", 5) == 0) {
        /* over verbs every free is quarantined and
         * the memory node frees the blocks in their layers: the client
         * passes no layer free and no revocation without a mark, and the
         * quarantine cases are the plain ones */
        if (cc->cp == CP_CHUNK_FREE_COMMIT || cc->cp == CP_SPAN_FREE_COMMIT ||
            cc->cp == CP_MULTI_FREE_PART || cc->cp == CP_QUARANTINE_PART ||
            cc->cp == CP_FREE_REVOKED)
            cr_skip_test("%s: the memory node commits these frees over rdma",
                         crash_point_names[cc->cp]);
        if (cc->quarantine && cc->cp != CP_FREE_QUARANTINED)
            cr_skip_test("quarantine on shm only: over rdma it is the plain case");
    } else if (cc->cp == CP_OWN_FREE_HELD) {
        /* the one-CAS free of an own allocation needs window keys */
        cr_skip_test("%s: over rdma only", crash_point_names[cc->cp]);
    }
    snprintf(name, sizeof name, "fmem-crash-%d-%d-%d%s", getpid(), cc->cp, cc->hit,
             cc->quarantine ? "q" : "");
    if (given && *given) {
        snprintf(uri, sizeof uri, "%s", given);
        snprintf(curi, sizeof curi, "%s", given);
    } else {
        snprintf(uri, sizeof uri, "shm:/%s?size=%dM", name, POOL_MB);
        snprintf(curi, sizeof curi, "shm:/%s", name);
    }
    /* the child is forked before this process opens the pool (an RDMA
     * connection must not be inherited) and starts once our blocks exist */
    unsigned *child_uid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(child_uid, MAP_FAILED);
    *child_uid = 0;
    int go[2];
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1)
            _exit(4);
        target = cc->cp;
        hits_left = cc->hit;
        fmem_quarantine_local = cc->quarantine;
        child_script(curi, child_uid);
    }
    close(go[0]);
    fmem_pool *p;
    int orc = fmem_open(uri, &p);
    if (orc)
        kill(pid, SIGKILL);
    cr_assert_eq(orc, 0, "open %s", uri);
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(p, &st), 0);
    /* over RDMA the last case's frees may still be quarantined: the memory
     * node frees them once their old windows are destroyed */
    for (int i = 0; i < 1000 && st.allocated_bytes; i++) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        cr_assert_eq(fmem_stats(p, &st), 0);
    }
    pool_mb = (unsigned)(st.capacity_bytes >> 20);
    if (st.allocated_bytes || pool_mb < 8 || pool_mb > MAX_POOL_MB)
        kill(pid, SIGKILL);
    cr_assert_eq(st.allocated_bytes, 0, "the pool must start empty");
    cr_assert(pool_mb >= 8 && pool_mb <= MAX_POOL_MB, "pool of %u MiB", pool_mb);

    /* the parent's own blocks, one per layer, stamped */
    fmem_handle mine[3];
    static const size_t mine_sz[3] = {4096, 256 << 10, 4 << 20};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(fmem_alloc(p, mine_sz[i], &mine[i]), 0);
        char stamp[16];
        snprintf(stamp, sizeof stamp, "mine-%d", i);
        cr_assert_eq(fmem_write(p, &mine[i], mine[i].length - 16, stamp, 16), 0);
    }
    cr_assert_eq(fmem_stats(p, &st), 0);
    uint64_t mine_bytes = st.allocated_bytes;
    cr_assert_eq(write(go[1], "x", 1), 1);
    close(go[1]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
              "crash point %s (hit %d) was not reached (status %#x)",
              crash_point_names[cc->cp], cc->hit, status);
    cr_assert_neq(*child_uid, 0);

    fmem_recovery_stats rs;
    cr_assert_eq(fmem_recover(p, *child_uid, &rs), 0);
    fmem_verify_report vr;
    cr_assert_eq(fmem_verify(p, &vr, stderr), 0);
    cr_expect_eq(vr.errors, 0, "verifier dirty after crash at %s (hit %d%s)",
                 crash_point_names[cc->cp], cc->hit, cc->quarantine ? ", quarantine" : "");
    cr_expect_eq(vr.claims_in_progress, 0);
    cr_assert_eq(fmem_stats(p, &st), 0);
    cr_expect_eq(st.allocated_bytes, mine_bytes, "crash at %s (hit %d%s): %llu bytes allocated, want %llu",
                 crash_point_names[cc->cp], cc->hit, cc->quarantine ? ", quarantine" : "",
                 (unsigned long long)st.allocated_bytes,
                 (unsigned long long)mine_bytes);

    for (int i = 0; i < 3; i++) {
        char stamp[16], want[16];
        snprintf(want, sizeof want, "mine-%d", i);
        cr_assert_eq(fmem_read(p, &mine[i], mine[i].length - 16, stamp, 16), 0);
        cr_expect_str_eq(stamp, want);
        cr_assert_eq(fmem_free(p, &mine[i]), 0);
    }
    fmem_handle all;
    int arc = fmem_alloc(p, (size_t)pool_mb << 20, &all);
    cr_expect_eq(arc, 0, "whole pool not allocatable after crash at %s", crash_point_names[cc->cp]);
    if (arc == 0)
        cr_assert_eq(fmem_free(p, &all), 0);
    fmem_close(p);
    munmap(child_uid, 4096);
    if (!given || !*given)
        cr_assert_eq(fmem_unlink(uri), 0);
}
