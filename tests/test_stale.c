/* test_stale.c - a handle dies with the service that issued it. Application
 * A holds a block from fmemd 0; fmemd 0 goes (killed, stopped until the
 * memory node fences it, or shut down), its blocks are reclaimed, and fmemd
 * 1 hands the same block to application B. Every use of A's handle must
 * fail with FMEM_ESTALE, and B's data must stay B's. On shared memory this
 * is the memory node's session table (session_table.h) and fmemd's ring
 * revocation; tests/rdma/test_service_rdma.c plays it over RDMA. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "test_service_env.h"

#define BLOCK (4u << 20) /* two sections: the pool has only a few */

static struct svc_env E;

static void teardown(void)
{
    env_stop(&E);
}

TestSuite(stale, .fini = teardown, .timeout = 90);

static void start(void)
{
    E.pool_size = "16M";
    E.heartbeat_ms = 200;
    env_start_or_fail(&E, 2, NULL);
}

/* A's block, with A's data in it. */
static fmem_handle a_block(fmem_pool *a)
{
    fmem_handle h;
    cr_assert_eq(fmem_alloc(a, BLOCK, &h), 0);
    cr_assert_eq(fmem_write(a, &h, 0, "A's data", 9), 0);
    return h;
}

/* B allocates until it holds the block at `addr`, and writes its data. */
static fmem_handle b_takes(fmem_pool *b, uint64_t addr)
{
    fmem_handle got[8], h;
    int n = 0;
    for (;;) {
        cr_assert_eq(fmem_alloc(b, BLOCK, &h), 0, "B never got the block back");
        if (h.addr == addr)
            break;
        cr_assert_lt(n, 8);
        got[n++] = h;
    }
    while (n > 0)
        cr_assert_eq(fmem_free(b, &got[--n]), 0);
    cr_assert_eq(fmem_write(b, &h, 0, "B's data", 9), 0);
    return h;
}

/* Every use of A's handle fails, and B's block is untouched by them. */
static void a_is_stale(fmem_pool *a, const fmem_handle *ha, fmem_pool *b, const fmem_handle *hb)
{
    char buf[16] = "A writes here";
    void *ptr = NULL;
    int rc = fmem_read(a, ha, 0, buf, 9);
    cr_assert_eq(rc, FMEM_ESTALE, "A read its reclaimed block: rc %d (%s), read \"%.9s\"", rc,
                 fmem_strerror(rc), rc ? "" : buf);
    cr_assert_eq(fmem_write(a, ha, 0, "A writes", 9), FMEM_ESTALE);
    cr_assert_eq(fmem_map(a, ha, &ptr), FMEM_ESTALE);
    cr_assert_null(ptr);
    cr_assert_eq(fmem_free(a, ha), FMEM_ESTALE);
    fmem_handle x;
    cr_assert_eq(fmem_alloc(a, 4096, &x), FMEM_EIO, "A's service is gone");
    if (b) {
        cr_assert_eq(fmem_read(b, hb, 0, buf, 9), 0);
        cr_assert_str_eq(buf, "B's data", "B's block was changed");
    }
}

Test(stale, killed_fmemd)
{
    start();
    fmem_pool *a = env_app(&E, 0), *b = env_app(&E, 1);
    fmem_handle ha = a_block(a);
    env_stop_pid(&E.fmemd[0], SIGKILL);
    cr_assert(env_wait_allocated(&E, 0, 10000), "fmemd 0's block was not recovered");
    fmem_handle hb = b_takes(b, ha.addr);
    a_is_stale(a, &ha, b, &hb);
    fmem_close(a);
    cr_assert_eq(fmem_free(b, &hb), 0);
    fmem_close(b);
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* Nothing tells A that fmemd went, except that the memory node fenced it:
 * A's first call after the recovery must already fail. */
Test(stale, fails_as_soon_as_the_block_is_reclaimed)
{
    start();
    fmem_pool *a = env_app(&E, 0);
    fmem_handle ha = a_block(a);
    env_stop_pid(&E.fmemd[0], SIGKILL);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    char buf[16];
    cr_assert_eq(fmem_read(a, &ha, 0, buf, 9), FMEM_ESTALE);
    fmem_close(a);
}

/* A stopped fmemd keeps its socket open: the memory node takes it for dead
 * after missed heartbeats, fences it (kills it, ends its session), then
 * recovers. */
Test(stale, stopped_fmemd)
{
    start();
    fmem_pool *a = env_app(&E, 0), *b = env_app(&E, 1);
    fmem_handle ha = a_block(a);
    kill(E.fmemd[0], SIGSTOP);
    cr_assert(env_wait_allocated(&E, 0, 15000), "the stopped fmemd was not recovered");
    fmem_handle hb = b_takes(b, ha.addr);
    a_is_stale(a, &ha, b, &hb);
    env_stop_pid(&E.fmemd[0], SIGKILL);
    fmem_close(a);
    fmem_close(b);
}

/* fmemd shuts down cleanly: it gives its applications' blocks back, after
 * revoking their rings. */
Test(stale, fmemd_shut_down)
{
    start();
    fmem_pool *a = env_app(&E, 0), *b = env_app(&E, 1);
    fmem_handle ha = a_block(a);
    int st = env_stop_pid(&E.fmemd[0], SIGTERM);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fmemd did not stop cleanly: %#x", st);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    fmem_handle hb = b_takes(b, ha.addr);
    a_is_stale(a, &ha, b, &hb);
    fmem_close(a);
    fmem_close(b);
}

/* The session table outlives a memory node restart: A's handle works while
 * its fmemd resumes, and dies when the new memory node recovers that fmemd. */
Test(stale, session_survives_a_memory_node_restart)
{
    start();
    fmem_pool *a = env_app(&E, 0);
    fmem_handle ha = a_block(a);
    int st = env_stop_pid(&E.mnode, SIGTERM);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cr_assert(env_start_mnode(&E));
    cr_assert(env_wait_status(E.mnode_sock, "fmemd0 pid", 20000), "fmemd 0 did not resume");
    char buf[16];
    cr_assert_eq(fmem_read(a, &ha, 0, buf, 9), 0, "a resumed service's handle must work");
    cr_assert_str_eq(buf, "A's data");
    env_stop_pid(&E.fmemd[0], SIGKILL);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(fmem_read(a, &ha, 0, buf, 9), FMEM_ESTALE);
    fmem_close(a);
}
