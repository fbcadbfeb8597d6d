/* test_users.c - user ids and their blocks: closing a pool gives back what
 * it holds, user=N claims its slot, blocks of a user id nobody holds are
 * reported as leaked and recovered, a user whose process is gone is told
 * apart from a live one, and the administrative open needs no user slot. */
#include <criterion/criterion.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crashpoint.h"
#include "pool_internal.h"

static char path[96], uri[160], bare[128];

static void setup(void)
{
    snprintf(path, sizeof path, "/dev/shm/fmem-test-users-%d", (int)getpid());
    snprintf(bare, sizeof bare, "shm:%s", path + 8);
    snprintf(uri, sizeof uri, "%s?size=8M", bare);
    fmem_unlink(uri);
}

static void teardown(void)
{
    fmem_unlink(uri);
}

TestSuite(users, .init = setup, .fini = teardown, .timeout = 60);

static fmem_pool *open_uri(const char *u)
{
    fmem_pool *p = NULL;
    int rc = fmem_open(u, &p);
    cr_assert_eq(rc, 0, "fmem_open(%s): %s", u, fmem_strerror(rc));
    return p;
}

static fmem_pool *open_admin(void)
{
    fmem_pool *p = NULL;
    int rc = fmem_open_admin(bare, &p);
    cr_assert_eq(rc, 0, "fmem_open_admin(%s): %s", bare, fmem_strerror(rc));
    return p;
}

static uint64_t pool_allocated(void)
{
    fmem_pool *a = open_admin();
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(a, &st), 0);
    fmem_close(a);
    return st.allocated_bytes;
}

static fmem_verify_report verify_now(void)
{
    fmem_pool *a = open_admin();
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(a, &r, stderr), 0);
    fmem_close(a);
    return r;
}

/* ---- class 5: blocks of user ids nobody holds --------------------------- */

Test(users, close_gives_back_what_the_pool_still_holds)
{
    fmem_pool *keep = open_uri(uri), *p = open_uri(uri);
    fmem_handle kept, h;
    cr_assert_eq(fmem_alloc(keep, 4096, &kept), 0);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(fmem_alloc(p, (size_t)4096 << i, &h), 0);
    unsigned uid = fmem_user_id(p, 0);
    fmem_close(p);
    cr_assert_eq(pool_allocated(), 4096, "a closed client's blocks stayed allocated");
    fmem_user_info_t u;
    fmem_pool *a = open_admin();
    cr_assert_eq(fmem_user_info(a, 0, uid, &u), 0);
    cr_assert_eq(u.pid, 0, "the slot is released");
    cr_assert_eq(u.blocks, 0, "and nothing is left under its id");
    fmem_close(a);
    /* the other client's block is untouched */
    cr_assert_eq(fmem_write(keep, &kept, 0, "x", 1), 0);
    fmem_close(keep);
    fmem_verify_report r = verify_now();
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.chunks_allocated, 0);
}

Test(users, explicit_user_id_claims_its_slot)
{
    char u5[192];
    snprintf(u5, sizeof u5, "%s&user=5", uri);
    fmem_pool *p = open_uri(u5), *q = (fmem_pool *)&q;
    cr_assert_eq(fmem_user_id(p, 0), 5);
    fmem_pool *a = open_admin();
    fmem_user_info_t u;
    cr_assert_eq(fmem_user_info(a, 0, 5, &u), 0);
    cr_assert_eq(u.pid, (uint32_t)getpid(), "user=5 must be recorded in the user table");
    cr_assert_eq(u.alive, 1);
    cr_assert_eq(fmem_open(u5, &q), FMEM_EBUSY, "two clients logging as one user id");
    cr_assert_null(q);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 8192, &h), 0);
    fmem_close(p);
    cr_assert_eq(fmem_user_info(a, 0, 5, &u), 0);
    cr_assert_eq(u.pid, 0);
    cr_assert_eq(u.blocks, 0);
    fmem_close(a);
    q = open_uri(u5); /* free again */
    fmem_close(q);
}

/* Blocks left under a user id whose slot was released (how the previous
 * fmem_close and user=N left them): verify reports them, recovery of that
 * id takes them back. */
Test(users, blocks_of_an_unclaimed_user_are_leaked_and_recoverable)
{
    fmem_pool *p = open_uri(uri);
    fmem_handle h;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(fmem_alloc(p, 16384, &h), 0);
    unsigned uid = fmem_user_id(p, 0);
    struct node *n = p->nodes[0];
    node_clear_uid(n, uid); /* the slot goes, the blocks stay */
    n->owns_uid = false;
    fmem_verify_report r = verify_now();
    cr_assert_eq(r.leaked_blocks, 3, "leaked blocks: %llu", (unsigned long long)r.leaked_blocks);
    cr_assert_eq(r.leaked_bytes, 3 * 16384);
    cr_assert_eq(r.errors, 3, "leaks are errors");
    fmem_pool *a = open_admin();
    fmem_recovery_stats st;
    cr_assert_eq(fmem_recover(a, uid, &st), 0);
    cr_assert_eq(st.blocks_freed, 3);
    fmem_close(a);
    r = verify_now();
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.chunks_allocated, 0);
    fmem_close(p);
}

/* A bit flip in a log entry's user id moves a block to a user id nobody
 * holds (here one beyond the user table): reported, and recovered by
 * fmem_recover_leaked. */
Test(users, bit_flip_in_a_log_entry_user_id)
{
    fmem_pool *p = open_uri(uri);
    fmem_handle h, other;
    cr_assert_eq(fmem_alloc(p, 65536, &h), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &other), 0);
    /* `other` holds the span header's temporary log, which would otherwise
     * rightly restore h's entry */
    cr_assert_eq(h.addr / FMEM_SPAN_SIZE, other.addr / FMEM_SPAN_SIZE);
    struct node *n = p->nodes[0];
    uint64_t off = log_off(n, h.addr >> CHUNK_SHIFT), e;
    cr_assert_eq(tp_read(n->tp, off, &e, 8), 0);
    cr_assert_eq(log_uid(e), fmem_user_id(p, 0));
    e ^= (uint64_t)1 << (17 + 13); /* user id bit 13: far beyond 64 slots */
    cr_assert_eq(tp_write(n->tp, off, &e, 8), 0);
    fmem_verify_report r = verify_now();
    cr_assert_eq(r.leaked_blocks, 1);
    cr_assert_eq(r.leaked_bytes, 65536);
    fmem_pool *a = open_admin();
    fmem_recovery_stats st;
    cr_assert_eq(fmem_recover_leaked(a, &st), 0);
    cr_assert_eq(st.blocks_freed, 1);
    cr_assert_eq(st.bytes_freed, 65536);
    fmem_close(a);
    r = verify_now();
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(pool_allocated(), 4096, "only the untouched block is left");
    fmem_close(p);
}

/* In a forked child: open the pool and allocate n blocks of size bytes
 * (the child exits 1 or 2 when that fails). */
static fmem_pool *child_allocates(int n, size_t size)
{
    fmem_pool *p;
    fmem_handle h;
    if (fmem_open(uri, &p))
        _exit(1);
    for (int i = 0; i < n; i++)
        if (fmem_alloc(p, size, &h))
            _exit(2);
    return p;
}

/* A process killed with blocks (anywhere after its fmem_open claimed a
 * slot): not a leak but a dead user, told apart and recoverable. */
Test(users, killed_user_is_reported_as_awaiting_recovery)
{
    fmem_pool *keep = open_uri(uri);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        fmem_pool *p = child_allocates(4, 8192);
        unsigned uid = fmem_user_id(p, 0);
        if (write(fds[1], &uid, sizeof uid) != sizeof uid)
            _exit(3);
        kill(getpid(), SIGKILL);
    }
    unsigned uid = 0;
    cr_assert_eq(read(fds[0], &uid, sizeof uid), (ssize_t)sizeof uid);
    waitpid(pid, NULL, 0);
    fmem_verify_report r = verify_now();
    cr_assert_eq(r.errors, 0, "a dead user's blocks are not an inconsistency");
    cr_assert_eq(r.dead_owner_blocks, 4);
    cr_assert_eq(r.dead_owner_bytes, 4 * 8192);
    cr_assert_eq(r.dead_slots, 1);
    fmem_pool *a = open_admin();
    fmem_user_info_t u;
    cr_assert_eq(fmem_user_info(a, 0, uid, &u), 0);
    cr_assert_eq(u.pid, (uint32_t)pid);
    cr_assert_eq(u.alive, 0);
    cr_assert_eq(u.blocks, 4);
    cr_assert_eq(fmem_recover(a, uid, NULL), 0);
    fmem_close(a);
    r = verify_now();
    cr_assert_eq(r.dead_slots, 0);
    cr_assert_eq(r.chunks_allocated, 0);
    fmem_close(keep);
    close(fds[0]);
    close(fds[1]);
}

/* A client killed half-way through the frees of its fmem_close: its slot
 * still records it, so it is a dead user, and recovery finishes the job. */
static int frees_left;
static void kill_on_free(enum crash_point cp)
{
    if (cp == CP_CHUNK_FREE_COMMIT && --frees_left == 0)
        kill(getpid(), SIGKILL);
}

Test(users, killed_while_closing)
{
    fmem_pool *keep = open_uri(uri);
    pid_t pid = fork();
    if (pid == 0) {
        fmem_pool *p = child_allocates(6, 4096);
        frees_left = 3; /* the third free of the close, committed, not flushed */
        fmem_crash_hook = kill_on_free;
        fmem_close(p);
        _exit(3); /* not reached */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the child was not killed: %#x", st);
    fmem_verify_report r = verify_now();
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.dead_slots, 1);
    cr_assert_eq(r.dead_owner_blocks, 3, "three of six freed: %llu left",
                 (unsigned long long)r.dead_owner_blocks);
    fmem_pool *a = open_admin();
    fmem_user_info_t u;
    cr_assert_eq(fmem_user_info(a, 0, 1 + fmem_user_id(keep, 0), &u), 0);
    cr_assert_eq(u.pid, (uint32_t)pid);
    cr_assert_eq(fmem_recover(a, 1 + fmem_user_id(keep, 0), NULL), 0);
    fmem_close(a);
    r = verify_now();
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.chunks_allocated, 0);
    cr_assert_eq(r.dead_slots, 0);
    fmem_close(keep);
}

/* A fork child that closes its copy of the parent's pool leaves the
 * parent's blocks and user slot alone. */
Test(users, fork_child_closing_leaves_the_parent_alone)
{
    fmem_pool *p = open_uri(uri);
    fmem_handle h[2];
    cr_assert_eq(fmem_alloc(p, 4096, &h[0]), 0);
    cr_assert_eq(fmem_alloc(p, 65536, &h[1]), 0);
    unsigned uid = fmem_user_id(p, 0);
    pid_t pid = fork();
    if (pid == 0) {
        fmem_close(p);
        _exit(0);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    fmem_pool *a = open_admin();
    fmem_user_info_t u;
    cr_assert_eq(fmem_user_info(a, 0, uid, &u), 0);
    cr_assert_eq(u.pid, (uint32_t)getpid(), "the child released the parent's slot");
    cr_assert_eq(u.blocks, 2, "the child freed the parent's blocks");
    fmem_close(a);
    cr_assert_eq(fmem_write(p, &h[1], 0, "still mine", 11), 0);
    fmem_close(p);
    cr_assert_eq(pool_allocated(), 0);
}

/* ---- administrative opens ------------------------------------------------ */

Test(users, admin_open_needs_no_user_slot)
{
    /* an 8 MiB pool has 64 slots; slot 0 is never used */
    fmem_pool *ps[63];
    for (int i = 0; i < 63; i++)
        ps[i] = open_uri(uri);
    fmem_pool *extra = NULL;
    cr_assert_eq(fmem_open(uri, &extra), FMEM_EBUSY);
    fmem_handle h;
    cr_assert_eq(fmem_alloc(ps[7], 4096, &h), 0);
    unsigned victim = fmem_user_id(ps[7], 0);
    fmem_pool *a = open_admin();
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(a, &r, stderr), 0);
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(r.chunks_allocated, 1);
    /* it cannot allocate or free: it has no user id to log as */
    fmem_handle x;
    cr_assert_eq(fmem_alloc(a, 4096, &x), FMEM_ENOTSUP);
    cr_assert_eq(fmem_free(a, &h), FMEM_ENOTSUP);
    char buf[4];
    cr_assert_eq(fmem_read(a, &h, 0, buf, 4), 0, "reading by handle works");
    cr_assert_eq(fmem_user_id(a, 0), 0);
    fmem_close(a);
    /* never creates a pool, and wants a shared one */
    char absent[160];
    snprintf(absent, sizeof absent, "shm:/fmem-test-users-absent-%d?size=2M", (int)getpid());
    cr_assert_eq(fmem_open_admin(absent, &a), FMEM_EIO);
    cr_assert_null(a);
    cr_assert_eq(fmem_open_admin("mem:?size=2M", &a), FMEM_EURI);
    cr_assert_eq(fmem_open_admin("unix:/run/fmem/fmemd.sock", &a), FMEM_ENOTSUP);
    for (int i = 0; i < 63; i++)
        fmem_close(ps[i]);
    (void)victim;
}
