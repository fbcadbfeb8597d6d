/* compact_fixture.h - shared by the compaction tests: a byte pattern per
 * object (fill, same) to check contents through merges, and crash points
 * inside fmem_heap_compact: a child process fills a compactable heap
 * (populate), its compaction is killed at one step (heap_compact_hook),
 * and the parent checks that recovery gives every chunk back and the
 * verifier is clean. Also each test file's pool (compact_pool_open in its
 * suite's init, pool_down as its fini) and its xorshift generator (xs),
 * seeded with COMPACT_RNG_SEED, which the file defines before including.
 * Include after criterion, fmem.h, fmem_admin.h, fmem_far.h and
 * heap_compact.h. */
#ifndef FMEM_TESTS_COMPACT_FIXTURE_H
#define FMEM_TESTS_COMPACT_FIXTURE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static char uri[128];
static fmem_pool *pool;

/* The suite's pool: shm:/fmem-<name>-<pid>, 256 MiB. */
static void compact_pool_open(const char *name)
{
    snprintf(uri, sizeof uri, "shm:/fmem-%s-%d?size=256M", name, getpid());
    cr_assert_eq(fmem_open(uri, &pool), 0);
}

static void pool_down(void)
{
    fmem_close(pool);
    fmem_unlink(uri);
}

static uint64_t rng = COMPACT_RNG_SEED;
static uint64_t xs(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A compactable heap on the suite's pool with the default policy. */
static inline fmem_heap *new_compactable_heap(void)
{
    fmem_heap *h;
    cr_assert_eq(fmem_heap_new_compactable(pool, NULL, &h), 0);
    return h;
}

static void fill(void *p, size_t n, uint64_t seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed * 131 + i * 7 + (seed >> 8));
}

static int same(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed * 131 + i * 7 + (seed >> 8)))
            return 0;
    return 1;
}

#define SLAB_OF(p) ((char *)((uintptr_t)(p) & ~(uintptr_t)(FMEM_HEAP_SLAB_SIZE - 1)))

/* Fill one fresh slab with its cap objects of obj bytes: each goes to o[]
 * at its index in the slab (o zeroed by the caller) with the byte pattern
 * seed + index. Returns the slab's base. */
static inline char *fill_fresh_slab(fmem_heap *h, size_t obj, size_t cap, void **o, uint64_t seed)
{
    char *base = NULL;
    for (size_t i = 0; i < cap; i++) {
        void *p = fmem_heap_malloc(h, obj);
        cr_assert_not_null(p);
        if (i == 0)
            base = SLAB_OF(p);
        cr_assert_eq(SLAB_OF(p), base, "a fresh slab per %zu objects", cap);
        size_t idx = (size_t)((char *)p - base) / obj;
        cr_assert_null(o[idx]);
        o[idx] = p;
        fill(p, obj, seed + idx);
    }
    return base;
}

/* Destroy h; the suite's pool must then hold no block at all. */
static inline void destroy_heap_pool_empty(fmem_heap *h)
{
    fmem_heap_destroy(h);
    fmem_stats_t ps;
    fmem_stats(pool, &ps);
    cr_assert_eq(ps.allocated_bytes, 0, "every chunk and block went back to the pool");
}

static int crash_step, crash_skip; /* killed at the (crash_skip+1)-th hook of that step */
static void crash_hook(int step)
{
    if (step == crash_step && crash_skip-- <= 0)
        kill(getpid(), SIGKILL);
}

static void compact_crash_at(const char *tag, int step, void (*populate)(fmem_heap *h))
{
    char u[160];
    snprintf(u, sizeof u, "shm:/fmem-%s-crash-%d-%d?size=64M", tag, getpid(), step);
    fmem_pool *p;
    cr_assert_eq(fmem_open(u, &p), 0);
    unsigned *child_uid = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(child_uid, MAP_FAILED);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        fmem_pool *cp;
        fmem_heap *h;
        if (fmem_open(u, &cp) || fmem_heap_new_compactable(cp, NULL, &h))
            _exit(3);
        *child_uid = fmem_user_id(cp, 0);
        populate(h);
        crash_step = step;
        heap_compact_hook = crash_hook;
        fmem_heap_compact(h, 0);
        _exit(5); /* the crash point was not reached */
    }
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "step %d: status %#x", step,
              status);
    cr_assert_neq(*child_uid, 0);
    fmem_stats_t st;
    fmem_stats(p, &st);
    cr_assert_gt(st.allocated_bytes, 0, "the dead child's chunks are still allocated");
    fmem_recovery_stats rs;
    cr_assert_eq(fmem_recover(p, *child_uid, &rs), 0);
    fmem_verify_report vr;
    cr_assert_eq(fmem_verify(p, &vr, stderr), 0);
    cr_expect_eq(vr.errors, 0, "verifier dirty after a crash at step %d", step);
    fmem_stats(p, &st);
    cr_expect_eq(st.allocated_bytes, 0, "step %d: %llu bytes lost", step,
                 (unsigned long long)st.allocated_bytes);
    fmem_handle all; /* every chunk is back: the whole pool is one block */
    cr_expect_eq(fmem_alloc(p, st.capacity_bytes, &all), 0);
    fmem_close(p);
    munmap(child_uid, 4096);
    fmem_unlink(u);
}

#endif
