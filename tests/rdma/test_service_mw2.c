/* test_service_mw2.c - applications of an fmemd whose memory node runs
 * mw=type2 (tests/rdma/vm-check.sh starts both): each block's key is a
 * type-2B window bound to the application's own queue pair, so the NIC
 * refuses it from any other queue pair; fmemd invalidates it before the
 * block is freed, and when the application dies.
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

/* Another application's queue pair (no key of its own). */
static struct transport *other_qp(void)
{
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_APP};
    struct transport *t;
    cr_assert_eq(verbs_transport_connect(&cp, &t), 0);
    cr_assert_eq(verbs_transport_mw_type(t), 2, "the memory node does not run mw=type2");
    return t;
}

static int raw_read(struct transport *t, const fmem_handle *h, uint64_t *v)
{
    struct tp_op op = {.kind = TP_READ, .off = t->meta_size + h->addr, .buf = v, .len = 8,
                       .rkey = h->rkey};
    return tp_batch(t, &op, 1);
}

TestSuite(service_mw2, .timeout = 120);

/* The owner reaches its blocks through its own queue pair; the same key
 * from another application's queue pair is refused by the NIC (a remote
 * access error, counted by the transport), and so is a write. */
Test(service_mw2, stolen_key_is_refused_from_another_applications_queue_pair)
{
    memory_node();
    fmem_pool *a = app();
    struct transport *t = other_qp();
    for (size_t size = 4096; size <= (1u << 20); size <<= 4) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(a, size, &h), 0);
        uint64_t mine = 0x5ec7e7 + size, got = 0;
        cr_assert_eq(fmem_write(a, &h, size - 8, &mine, 8), 0);
        cr_assert_eq(fmem_read(a, &h, size - 8, &got, 8), 0);
        cr_assert_eq(got, mine, "the owner's own queue pair must work");
        uint64_t refused = verbs_transport_refused(t);
        cr_assert_eq(raw_read(t, &h, &got), FMEM_EACCES,
                     "a live %zu-byte block's key works from another queue pair", size);
        cr_assert_eq(verbs_transport_refused(t), refused + 1, "not refused by the NIC");
        struct tp_op w = {.kind = TP_WRITE, .off = t->meta_size + h.addr, .buf = "stolen",
                          .len = 6, .rkey = h.rkey};
        cr_assert_eq(tp_batch(t, &w, 1), FMEM_EACCES);
        cr_assert_eq(fmem_read(a, &h, size - 8, &got, 8), 0);
        cr_assert_eq(got, mine, "the block was changed from another queue pair");
        cr_assert_eq(fmem_free(a, &h), 0);
    }
    tp_close(t);
    fmem_close(a);
}

/* Two applications of one fmemd: neither's key works from the other's
 * queue pair, while both work from their own. */
Test(service_mw2, two_applications_each_with_its_own_keys)
{
    memory_node();
    fmem_pool *a = app(), *b = app();
    fmem_handle ha, hb;
    cr_assert_eq(fmem_alloc(a, 8192, &ha), 0);
    cr_assert_eq(fmem_alloc(b, 8192, &hb), 0);
    uint64_t va = 0xa, vb = 0xb, got = 0;
    cr_assert_eq(fmem_write(a, &ha, 0, &va, 8), 0);
    cr_assert_eq(fmem_write(b, &hb, 0, &vb, 8), 0);
    cr_assert_neq(fmem_read(b, &ha, 0, &got, 8), 0);
    cr_assert_neq(fmem_free(b, &ha), 0);
    cr_assert_eq(fmem_read(a, &ha, 0, &got, 8), 0);
    cr_assert_eq(got, 0xa);
    cr_assert_eq(fmem_read(b, &hb, 0, &got, 8), 0);
    cr_assert_eq(got, 0xb);
    cr_assert_eq(fmem_free(a, &ha), 0);
    cr_assert_eq(fmem_free(b, &hb), 0);
    fmem_close(a);
    fmem_close(b);
}

/* Every free invalidates its window (SEND_WITH_INV) and the next
 * allocation binds one again: many rounds neither leak windows nor blocks,
 * and no key handed out twice in a row is the same. */
Test(service_mw2, free_and_alloc_many_rounds)
{
    memory_node();
    fmem_pool *observer;
    cr_assert_eq(fmem_open(node, &observer), 0);
    uint64_t before = pool_bytes(observer);
    fmem_pool *a = app();
    uint32_t last = 0;
    for (int i = 0; i < 300; i++) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(a, 4096u << (i % 5), &h), 0, "round %d", i);
        cr_assert_neq(h.rkey, last, "round %d: the same key again", i);
        last = h.rkey;
        uint64_t v = (uint64_t)i, got = 0;
        cr_assert_eq(fmem_write(a, &h, 0, &v, 8), 0);
        cr_assert_eq(fmem_read(a, &h, 0, &got, 8), 0);
        cr_assert_eq(got, v);
        cr_assert_eq(fmem_free(a, &h), 0, "round %d", i);
    }
    fmem_close(a);
    /* quarantined blocks go back once their windows died */
    uint64_t now = wait_pool_bytes(observer, before, 100, 50000);
    cr_assert_eq(now, before, "%llu bytes still held", (unsigned long long)(now - before));
    fmem_close(observer);
}

/* A killed application's blocks: fmemd's reaper invalidates every key and
 * frees the blocks; the pool holds what it held before. */
Test(service_mw2, killed_application_is_revoked_and_freed)
{
    memory_node();
    int fds[2], go[2];
    cr_assert_eq(pipe(fds), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork(); /* before this process opens a pool of its own */
    if (pid == 0) {
        fmem_pool *p;
        fmem_handle h[32];
        char c;
        if (read(go[0], &c, 1) != 1 || fmem_open(svc(), &p))
            _exit(1);
        for (int i = 0; i < 32; i++)
            if (fmem_alloc(p, 4096u << (i % 3), &h[i]) || fmem_write(p, &h[i], 0, "x", 1))
                _exit(2);
        if (write(fds[1], h, sizeof h) != sizeof h)
            _exit(3);
        pause();
        _exit(0);
    }
    fmem_pool *observer;
    cr_assert_eq(fmem_open(node, &observer), 0);
    uint64_t before = pool_bytes(observer);
    cr_assert_eq(write(go[1], "g", 1), 1);
    fmem_handle h[32];
    cr_assert_eq(read(fds[0], h, sizeof h), (ssize_t)sizeof h);
    cr_assert_gt(pool_bytes(observer), before);
    struct transport *t = other_qp();
    uint64_t v;
    for (int i = 0; i < 32; i++)
        cr_assert_eq(raw_read(t, &h[i], &v), FMEM_EACCES, "key %d works from another QP", i);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    uint64_t now = wait_pool_bytes(observer, before, 300, 50000);
    cr_assert_eq(now, before, "the dead application's blocks were not freed (%llu bytes)",
                 (unsigned long long)(now - before));
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(observer, &r, NULL), 0);
    cr_assert_eq(r.errors, 0, "verifier: %llu errors", (unsigned long long)r.errors);
    tp_close(t);
    close(fds[0]);
    close(fds[1]);
    close(go[0]);
    close(go[1]);
    fmem_close(observer);
}

/* A service that dies between binding an application's window and
 * revoking it (fmemd killed with blocks handed out): the memory node fences
 * its session and destroys every window bound at its request before it
 * recovers the blocks, so the application's key, live on its own queue
 * pair until then, is refused from that very queue pair afterwards. The
 * test plays both: the service (a pool over RDMA writing fmemd's heartbeat
 * and session words, then falling silent) and the application (a queue
 * pair of its own). */
Test(service_mw2, fenced_services_keys_die_before_its_blocks_are_recovered)
{
    fmem_pool *observer, *svc_pool;
    uint64_t before;
    uint64_t session = play_service_open(&observer, &before, &svc_pool);
    struct node *n = svc_pool->nodes[0];
    /* one application queue pair per key: a refusal breaks its queue
     * pair, and each key must be tried on the very one it is bound to */
    struct transport *t[4];
    fmem_handle h[4];
    uint32_t key[4];
    uint64_t v = 0;
    for (int i = 0; i < 4; i++) {
        t[i] = other_qp();
        uint32_t qp = verbs_transport_peer_qp(t[i]);
        cr_assert_neq(qp, 0);
        cr_assert_eq(fmem_alloc(svc_pool, 4096u << i, &h[i]), 0);
        cr_assert_eq(verbs_transport_bind2(n->tp, n->tp->meta_size + h[i].addr, h[i].length, qp,
                                           &key[i]),
                     0);
        struct tp_op op = {.kind = TP_READ, .off = t[i]->meta_size + h[i].addr, .buf = &v,
                           .len = 8, .rkey = key[i]};
        cr_assert_eq(tp_batch(t[i], &op, 1), 0, "the bound key must work from its queue pair");
    }
    play_service_heartbeats(svc_pool, session, 3);
    /* silent from here: fenced, then recovered */
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "the silent service was not recovered");
    for (int i = 0; i < 4; i++) {
        struct tp_op op = {.kind = TP_READ, .off = t[i]->meta_size + h[i].addr, .buf = &v,
                           .len = 8, .rkey = key[i]};
        cr_assert_eq(tp_batch(t[i], &op, 1), FMEM_EACCES,
                     "key %d of a recovered block still works from the application's QP", i);
        tp_close(t[i]);
    }
    fmem_close(svc_pool);
    fmem_close(observer);
}

/* Applications killed at random moments while they allocate, write and
 * free through fmemd (FMEM_TEST_MW2_KILLS of them, 40 by default): fmemd
 * must revoke every key of each and free its blocks, and at the end the
 * pool holds what it held before and the verifier is clean. */
Test(service_mw2, applications_killed_at_random, .timeout = 1800)
{
    memory_node();
    const char *e = getenv("FMEM_TEST_MW2_KILLS");
    int kills = e && atoi(e) > 0 ? atoi(e) : 40;
    fmem_pool *observer;
    cr_assert_eq(fmem_open(node, &observer), 0);
    uint64_t before = pool_bytes(observer);
    fmem_close(observer); /* no connection of ours in the children */
    srand(1234);
    /* every `wave` kills, wait until fmemd has reaped them all, so that
     * its queue of departed applications (and its per-user limit of
     * connections) stays short */
    const int wave = 20;
    int started = 0;
    for (int k = 0; k < kills; k++) {
        int ready[2];
        cr_assert_eq(pipe(ready), 0);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            close(ready[0]);
            fmem_pool *p;
            if (fmem_open(svc(), &p))
                _exit(1);
            if (write(ready[1], "r", 1) != 1)
                _exit(2);
            fmem_handle h[16];
            unsigned held = 0, seed = (unsigned)getpid();
            for (;;) {
                if (held < 16 && (held == 0 || rand_r(&seed) % 3)) {
                    if (fmem_alloc(p, 4096u << (rand_r(&seed) % 5), &h[held]) == 0) {
                        uint64_t v = held;
                        fmem_write(p, &h[held], 0, &v, 8);
                        held++;
                    }
                } else {
                    unsigned i = rand_r(&seed) % held;
                    if (fmem_free(p, &h[i]) != 0)
                        _exit(3);
                    h[i] = h[--held];
                }
            }
        }
        close(ready[1]);
        char c;
        started += read(ready[0], &c, 1) == 1;
        close(ready[0]);
        usleep((useconds_t)(rand() % 40000));
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        cr_assert(WIFSIGNALED(st), "application %d exited by itself (status %#x)", k, st);
        if ((k + 1) % wave == 0) {
            cr_assert_eq(fmem_open(node, &observer), 0);
            uint64_t now = wait_pool_bytes(observer, before, 600, 100000);
            fmem_close(observer);
            cr_assert_eq(now, before, "after %d kills %llu bytes are still held", k + 1,
                         (unsigned long long)(now - before));
        }
    }
    cr_assert_eq(started, kills);
    cr_assert_eq(fmem_open(node, &observer), 0);
    uint64_t now = wait_pool_bytes(observer, before, 600, 100000);
    cr_assert_eq(now, before, "after %d kills %llu bytes are still held", kills,
                 (unsigned long long)(now - before));
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(observer, &r, NULL), 0);
    cr_assert_eq(r.errors, 0, "verifier: %llu errors", (unsigned long long)r.errors);
    printf("service_mw2: %d applications killed, pool back to %llu bytes, verifier clean\n", kills,
           (unsigned long long)before);
    fmem_close(observer);
}

/* ---- fmemd killed inside its type-2 path -------------------------------- */

/* An fmemd of our own on the type-2 node that exits at crash point `cp`
 * (FMEM_FMEMD_CRASH); its socket's URI goes to uri. */
static pid_t crashing_fmemd(const char *cp, char *uri, size_t n)
{
    const char *bin = fmemd_path();
    char sock[128];
    snprintf(sock, sizeof sock, "/tmp/fmemd-rdmakill-crash-%s.sock", cp);
    unlink(sock);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        setenv("FMEM_FMEMD_CRASH", cp, 1);
        execl(bin, "fmemd", "--mnode", node, "--socket", sock, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 300 && access(sock, F_OK) != 0; i++)
        usleep(100000);
    cr_assert_eq(access(sock, F_OK), 0, "fmemd (crash point %s) did not start", cp);
    snprintf(uri, n, "unix:%s", sock);
    return pid;
}

/* The start of a crash test: the memory node, an observer of its pool and
 * what the pool holds (*before), and an fmemd set to crash at `cp`. */
static pid_t crash_test_start(const char *cp, fmem_pool **observer, uint64_t *before, char *uri,
                              size_t n)
{
    memory_node();
    cr_assert_eq(fmem_open(node, observer), 0);
    *before = pool_bytes(*observer);
    return crashing_fmemd(cp, uri, n);
}

static void expect_crashed(pid_t pid, const char *cp)
{
    int st = 0;
    for (int i = 0; i < 300 && waitpid(pid, &st, WNOHANG) == 0; i++)
        usleep(100000);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 86, "fmemd did not stop at %s (status %#x)",
              cp, st);
}

/* After fmemd died at a crash point, the memory node fences its session
 * (every window it had bound dies) and recovers its blocks: the pool holds
 * what it held before, and the verifier is clean. */
static void expect_recovered(fmem_pool *observer, uint64_t before, const char *cp)
{
    uint64_t now = wait_pool_bytes(observer, before, 600, 100000);
    cr_assert_eq(now, before, "crash at %s: %llu bytes lost", cp,
                 (unsigned long long)(now - before));
    fmem_verify_report r;
    cr_assert_eq(fmem_verify(observer, &r, NULL), 0);
    cr_assert_eq(r.errors, 0, "crash at %s: verifier: %llu errors", cp,
                 (unsigned long long)r.errors);
}

/* "bind": a window bound to the application's queue pair and recorded,
 * the application not answered. */
Test(service_mw2, fmemd_crash_after_bind, .timeout = 300)
{
    fmem_pool *observer;
    uint64_t before;
    char uri[160];
    pid_t d = crash_test_start("bind", &observer, &before, uri, sizeof uri);
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0);
    fmem_handle h;
    cr_assert_neq(fmem_alloc(p, 65536, &h), 0, "fmemd answered past its crash point");
    expect_crashed(d, "bind");
    expect_recovered(observer, before, "bind");
    fmem_close(p);
    fmem_close(observer);
}

/* "free": the application's key invalidated, the block not freed yet. */
Test(service_mw2, fmemd_crash_between_invalidate_and_free, .timeout = 300)
{
    fmem_pool *observer;
    uint64_t before;
    char uri[160];
    pid_t d = crash_test_start("free", &observer, &before, uri, sizeof uri);
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0);
    fmem_handle h;
    uint64_t v = 42;
    cr_assert_eq(fmem_alloc(p, 65536, &h), 0);
    cr_assert_eq(fmem_write(p, &h, 0, &v, 8), 0, "the key must work before the free");
    cr_assert_neq(fmem_free(p, &h), 0, "fmemd answered past its crash point");
    expect_crashed(d, "free");
    expect_recovered(observer, before, "free");
    fmem_close(p);
    fmem_close(observer);
}

/* "reap": fmemd's reaper invalidated one key of a killed application and
 * died before freeing its block; the application's other blocks were
 * still bound. Everything comes back through the memory node. */
Test(service_mw2, fmemd_crash_in_reaper, .timeout = 300)
{
    fmem_pool *observer;
    uint64_t before;
    char uri[160];
    pid_t d = crash_test_start("reap", &observer, &before, uri, sizeof uri);
    int ready[2];
    cr_assert_eq(pipe(ready), 0);
    pid_t a = fork();
    cr_assert_neq(a, -1);
    if (a == 0) {
        fmem_pool *p;
        fmem_handle h[8];
        if (fmem_open(uri, &p))
            _exit(1);
        for (int i = 0; i < 8; i++)
            if (fmem_alloc(p, 4096u << (i % 4), &h[i]))
                _exit(2);
        if (write(ready[1], "r", 1) != 1)
            _exit(3);
        pause();
        _exit(0);
    }
    char c;
    cr_assert_eq(read(ready[0], &c, 1), 1, "the application did not allocate");
    cr_assert_gt(pool_bytes(observer), before);
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    expect_crashed(d, "reap");
    expect_recovered(observer, before, "reap");
    close(ready[0]);
    close(ready[1]);
    fmem_close(observer);
}

/* ---- children of a process that used RDMA before fork() ----------------- */

/* Queue pairs and memory regions on the VM's devices (`rdma resource`). */
static long rdma_objects(void)
{
    FILE *f = popen("rdma resource show qp 2>/dev/null; rdma resource show mr 2>/dev/null", "r");
    cr_assert(f, "cannot run rdma resource show");
    long n = 0;
    char line[512];
    while (fgets(line, sizeof line, f))
        n++;
    pclose(f);
    return n;
}

/* An application forked by a process that had used RDMA (its observer
 * pool) is killed: its queue pair and its registered bounce region go with
 * it. When the transport made them on librdmacm's device context, which the
 * child inherits from its parent, they stayed alive (pinned 4 MiB each)
 * until the parent exited. */
Test(service_mw2, killed_forked_applications_leave_no_rdma_objects, .timeout = 300)
{
    memory_node();
    fmem_pool *observer;
    cr_assert_eq(fmem_open(node, &observer), 0); /* this process uses RDMA */
    uint64_t before = pool_bytes(observer);
    long objs = rdma_objects();
    cr_assert_gt(objs, 0, "no rdma objects listed: is the rdma tool there?");
    for (int k = 0; k < 10; k++) {
        int ready[2];
        cr_assert_eq(pipe(ready), 0);
        pid_t pid = fork();
        cr_assert_neq(pid, -1);
        if (pid == 0) {
            fmem_pool *p;
            fmem_handle h;
            uint64_t v = 1;
            if (fmem_open(svc(), &p) || fmem_alloc(p, 4096, &h) || fmem_write(p, &h, 0, &v, 8))
                _exit(1);
            if (write(ready[1], "r", 1) != 1)
                _exit(2);
            pause();
            _exit(0);
        }
        char c;
        cr_assert_eq(read(ready[0], &c, 1), 1, "application %d did not start", k);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(ready[0]);
        close(ready[1]);
    }
    uint64_t now = wait_pool_bytes(observer, before, 300, 100000);
    cr_assert_eq(now, before, "the applications' blocks were not freed");
    long left = rdma_objects();
    for (int i = 0; i < 100 && left > objs + 2; i++) {
        usleep(100000);
        left = rdma_objects();
    }
    cr_assert_leq(left, objs + 2, "10 killed applications left %ld queue pairs and regions",
                  left - objs);
    fmem_close(observer);
}
