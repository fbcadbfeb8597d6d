/* test_service_rdma.c - applications of an fmemd whose memory node is
 * served over RDMA (tests/rdma/vm-check.sh starts both): allocation goes
 * through fmemd, data moves through the application's own queue pair with
 * the block's window key, and an application that dies loses its keys.
 *   FMEM_TEST_SVC=unix:SOCKET   FMEM_TEST_RDMA="HOST PORT TOKEN_FILE" */
#include <criterion/criterion.h>
#include <fmem.h>
#include <fmem_admin.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pool_internal.h"
#include "transport.h"
#include "verbs/transport_verbs.h"
#include "wkeys.h"

#include "service_env.h"

TestSuite(service_rdma, .timeout = 120);

Test(service_rdma, data_through_the_applications_queue_pair)
{
    fmem_pool *p = app();
    for (size_t size = 4096; size <= (1u << 20); size <<= 2) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(p, size, &h), 0);
        cr_assert_eq(h.length, size);
        char *buf = malloc(size), *back = malloc(size);
        for (size_t i = 0; i < size; i++)
            buf[i] = (char)(i * 7 + size);
        cr_assert_eq(fmem_write(p, &h, 0, buf, size), 0);
        cr_assert_eq(fmem_read(p, &h, 0, back, size), 0);
        cr_assert_eq(memcmp(buf, back, size), 0, "%zu bytes came back different", size);
        void *ptr;
        cr_assert_eq(fmem_map(p, &h, &ptr), FMEM_ENOTSUP, "no mapping over RDMA");
        uint64_t ra = 0;
        cr_assert_eq(fmem_remote(p, &h, &ra), 0);
        cr_assert(ra != 0 && (ra & 4095) == 0, "remote address %#llx", (unsigned long long)ra);
        cr_assert_eq(fmem_read(p, &h, size - 4, back, 8), FMEM_ERANGE);
        cr_assert_eq(fmem_free(p, &h), 0);
        cr_assert_eq(fmem_read(p, &h, 0, back, 8), FMEM_EBADHANDLE);
        cr_assert_eq(fmem_remote(p, &h, &ra), FMEM_EBADHANDLE);
        free(buf);
        free(back);
    }
    fmem_close(p);
}

Test(service_rdma, two_applications)
{
    fmem_pool *a = app(), *b = app();
    fmem_handle ha, hb;
    cr_assert_eq(fmem_alloc(a, 8192, &ha), 0);
    cr_assert_eq(fmem_alloc(b, 8192, &hb), 0);
    uint64_t va = 0xa, vb = 0xb, got;
    cr_assert_eq(fmem_write(a, &ha, 0, &va, 8), 0);
    cr_assert_eq(fmem_write(b, &hb, 0, &vb, 8), 0);
    /* b cannot use a's handle through the library, nor free it */
    cr_assert_neq(fmem_read(b, &ha, 0, &got, 8), 0);
    cr_assert_neq(fmem_free(b, &ha), 0);
    cr_assert_eq(fmem_read(a, &ha, 0, &got, 8), 0);
    cr_assert_eq(got, 0xa);
    cr_assert_eq(fmem_free(a, &ha), 0);
    cr_assert_eq(fmem_free(b, &hb), 0);
    fmem_close(a);
    fmem_close(b);
}

/* A child allocates, hands its handle over and is killed; fmemd frees its
 * blocks, and the NIC refuses the dead child's key from then on. */
Test(service_rdma, killed_application_loses_its_keys)
{
    memory_node();
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        fmem_pool *p;
        fmem_handle h[64];
        if (fmem_open(svc(), &p))
            _exit(1);
        for (int i = 0; i < 64; i++)
            if (fmem_alloc(p, 4096, &h[i]))
                _exit(2);
        if (write(fds[1], h, sizeof h) != sizeof h)
            _exit(3);
        pause();
        _exit(0);
    }
    fmem_handle h[64];
    cr_assert_eq(read(fds[0], h, sizeof h), (ssize_t)sizeof h);
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_APP};
    struct transport *t;
    cr_assert_eq(verbs_transport_connect(&cp, &t), 0);
    uint64_t v;
    struct tp_op op = {.kind = TP_READ, .off = t->meta_size + h[0].addr, .buf = &v, .len = 8,
                       .rkey = h[0].rkey};
    cr_assert_eq(tp_batch(t, &op, 1), 0, "the live key works (type-1 windows)");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    /* wait for fmemd's reaper: every one of the 64 keys must die */
    for (int i = 0; i < 64; i++) {
        op.off = t->meta_size + h[i].addr;
        op.rkey = h[i].rkey;
        int rc = 0;
        for (int tries = 0; tries < 500 && (rc = tp_batch(t, &op, 1)) == 0; tries++)
            usleep(20000);
        cr_assert_eq(rc, FMEM_EACCES, "key %d of the dead application still works", i);
    }
    tp_close(t);
    close(fds[0]);
    close(fds[1]);
}

/* fmemd itself is SIGKILLed while its application holds blocks: it stops
 * writing its heartbeat word, the memory node recovers its user id through
 * the NIC, and a restarted fmemd serves again.
 *   FMEM_TEST_FMEMD=path of fmemd */
static pid_t spawn_fmemd(const char *fmemd, const char *node, const char *sock)
{
    unlink(sock);
    pid_t pid = fork();
    if (pid == 0) {
        execl(fmemd, fmemd, "--mnode", node, "--socket", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300 && access(sock, F_OK) != 0; i++)
        usleep(20000);
    return pid;
}

/* An fmemd on the memory node at `sock`, an application of it holding n
 * blocks (4-32 KiB), and an observer of the pool; *before: the pool's bytes
 * before the blocks. */
static pid_t fmemd_holding_blocks(const char *sock, int n, fmem_pool **observer,
                                  fmem_pool **app_pool, uint64_t *before)
{
    char uri[128];
    snprintf(uri, sizeof uri, "unix:%s", sock);
    cr_assert_eq(fmem_open(node, observer), 0);
    *before = pool_bytes(*observer);
    pid_t d = spawn_fmemd(fmemd_path(), node, sock);
    cr_assert_eq(fmem_open(uri, app_pool), 0, "fmemd did not come up");
    fmem_handle h;
    for (int i = 0; i < n; i++)
        cr_assert_eq(fmem_alloc(*app_pool, 4096u << (i % 4), &h), 0);
    cr_assert_gt(pool_bytes(*observer), *before);
    return d;
}

Test(service_rdma, killed_fmemd_is_recovered_by_the_memory_node)
{
    memory_node();
    const char *sock = "/tmp/fmemd-kill.sock";
    fmem_pool *observer, *p;
    uint64_t before;
    pid_t d = fmemd_holding_blocks(sock, 32, &observer, &p, &before);
    fmem_handle h;
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "the dead fmemd's blocks were not recovered (%llu bytes left)",
                 (unsigned long long)(now - before));
    cr_assert_neq(fmem_alloc(p, 4096, &h), 0, "an application of a dead fmemd cannot allocate");
    fmem_close(p);

    d = spawn_fmemd(fmemd_path(), node, sock);
    char uri[128];
    snprintf(uri, sizeof uri, "unix:%s", sock);
    cr_assert_eq(fmem_open(uri, &p), 0, "a restarted fmemd must serve");
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    cr_assert_eq(fmem_free(p, &h), 0);
    fmem_close(p);
    kill(d, SIGTERM);
    waitpid(d, NULL, 0);
    fmem_close(observer);
}

/* A service that falls silent is fenced before the memory node recovers
 * it: the test plays the service (a pool over RDMA that writes heartbeat
 * and session words like fmemd), holds blocks, stops its heartbeats, and
 * must find its queue pairs shut and its session refused, so nothing it
 * would still send can reach the pool that was recovered under it. */
Test(service_rdma, silent_service_is_fenced_before_recovery)
{
    fmem_pool *observer, *svc;
    uint64_t before;
    uint64_t session = play_service_open(&observer, &before, &svc);
    struct node *n = svc->nodes[0];
    fmem_handle h[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(fmem_alloc(svc, 4096u << i, &h[i]), 0);
    cr_assert_gt(pool_bytes(observer), before);
    play_service_heartbeats(svc, session, 4);
    /* silent from here: the memory node takes us for dead */
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "the silent service was not recovered");
    uint64_t v = 0;
    cr_assert_neq(fmem_read(svc, &h[0], 0, &v, 8), 0, "a fenced service still reaches the pool");
    cr_assert_neq(tp_read(n->tp, n->g.users_off, &v, 8), 0, "a fenced service still reads metadata");
    cr_assert(verbs_transport_fenced(n->tp), "the reconnect was not refused as fenced");
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_SERVICE,
                                      .token_path = token, .session = session};
    struct transport *t = NULL;
    cr_assert_eq(verbs_transport_connect(&cp, &t), FMEM_EACCES, "the fenced session came back");
    cp.session = 0; /* a fresh session is welcome */
    cr_assert_eq(verbs_transport_connect(&cp, &t), 0);
    tp_close(t);
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(observer, &r, NULL), 0);
    cr_assert_eq(r.errors, 0, "verifier: %llu errors", (unsigned long long)r.errors);
    cr_assert_eq(pool_bytes(observer), before);
    fmem_close(svc);
    fmem_close(observer);
}

/* fmemd stopped (SIGSTOP) long enough to be taken for dead: the memory node
 * fences and recovers it; woken up, it finds itself fenced and exits
 * instead of serving from a pool state that is no longer its own. */
Test(service_rdma, stopped_fmemd_exits_when_woken)
{
    memory_node();
    fmem_pool *observer, *p;
    uint64_t before;
    pid_t d = fmemd_holding_blocks("/tmp/fmemd-stop.sock", 16, &observer, &p, &before);
    kill(d, SIGSTOP);
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "the stopped fmemd was not recovered");
    kill(d, SIGCONT);
    int st = 0;
    pid_t got = 0;
    for (int i = 0; i < 200 && (got = waitpid(d, &st, WNOHANG)) == 0; i++)
        usleep(50000);
    if (got == 0) {
        kill(d, SIGKILL);
        waitpid(d, NULL, 0);
    }
    cr_assert_eq(got, d, "the woken fmemd went on serving");
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) != 0, "status %#x", st);
    cr_assert_eq(pool_bytes(observer), before, "the woken fmemd changed the pool");
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(observer, &r, NULL), 0);
    cr_assert_eq(r.errors, 0);
    fmem_close(p);
    fmem_close(observer);
}

/* A handle of an fmemd that is gone must not reach the block once another
 * application holds it: application A of fmemd 1 holds a 4 MiB block,
 * fmemd 1 is killed, the memory node recovers it (its block keys die in the
 * NIC), fmemd 2 hands the block to application B. A's library calls fail
 * with FMEM_ESTALE, A's key posted raw on a queue pair of its own is
 * refused by the NIC, and B's data stays B's. */
Test(service_rdma, handle_of_a_killed_fmemd_is_stale)
{
    memory_node();
    const char *s1 = "/tmp/fmemd-stale1.sock", *s2 = "/tmp/fmemd-stale2.sock";
    fmem_pool *observer, *a, *b;
    uint64_t before;
    pid_t d1 = fmemd_holding_blocks(s1, 1, &observer, &a, &before);
    pid_t d2 = spawn_fmemd(fmemd_path(), node, s2);
    char uri[128];
    snprintf(uri, sizeof uri, "unix:%s", s2);
    cr_assert_eq(fmem_open(uri, &b), 0, "fmemd 2 did not come up");
    const size_t block = 4u << 20;
    fmem_handle ha, hb;
    cr_assert_eq(fmem_alloc(a, block, &ha), 0);
    cr_assert_eq(fmem_write(a, &ha, 0, "A's data", 9), 0);
    kill(d1, SIGKILL);
    waitpid(d1, NULL, 0);
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "fmemd 1's block was not recovered");
    fmem_handle other[16];
    int n = 0;
    for (;;) {
        cr_assert_eq(fmem_alloc(b, block, &hb), 0, "B never got the block back");
        if (hb.addr == ha.addr)
            break;
        cr_assert_lt(n, 16);
        other[n++] = hb;
    }
    while (n > 0)
        cr_assert_eq(fmem_free(b, &other[--n]), 0);
    cr_assert_eq(fmem_write(b, &hb, 0, "B's data", 9), 0);
    char buf[16] = {0};
    cr_assert_eq(fmem_read(a, &ha, 0, buf, 9), FMEM_ESTALE);
    cr_assert_eq(fmem_write(a, &ha, 0, "A writes", 9), FMEM_ESTALE);
    cr_assert_eq(fmem_free(a, &ha), FMEM_ESTALE);
    /* the NIC itself refuses A's key: it died with the recovery */
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_APP};
    struct transport *t;
    cr_assert_eq(verbs_transport_connect(&cp, &t), 0);
    struct tp_op op = {.kind = TP_WRITE, .off = t->meta_size + ha.addr, .buf = "A writes",
                       .len = 9, .rkey = ha.rkey};
    cr_assert_eq(tp_batch(t, &op, 1), FMEM_EACCES, "a recovered block's key still works");
    tp_close(t);
    cr_assert_eq(fmem_read(b, &hb, 0, buf, 9), 0);
    cr_assert_str_eq(buf, "B's data", "B's block was changed");
    cr_assert_eq(fmem_free(b, &hb), 0);
    fmem_close(a);
    fmem_close(b);
    kill(d2, SIGTERM);
    waitpid(d2, NULL, 0);
    fmem_close(observer);
}
