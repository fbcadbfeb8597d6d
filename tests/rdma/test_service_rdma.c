/* test_service_rdma.c - applications of an fmemd whose memory node is
 * served over RDMA (tests/rdma/vm-check.sh starts both): allocation goes
 * through fmemd, data moves through the application's own queue pair with
 * the block's window key, and an application that dies loses its keys.
 *   FMEM_TEST_SVC=unix:SOCKET   FMEM_TEST_RDMA="HOST PORT TOKEN_FILE" */
#include <criterion/criterion.h>
#include <fmem.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport.h"
#include "verbs/transport_verbs.h"

static const char *svc(void)
{
    const char *s = getenv("FMEM_TEST_SVC");
    cr_assert(s && *s, "FMEM_TEST_SVC=unix:SOCKET is needed");
    return s;
}

static fmem_pool *app(void)
{
    fmem_pool *p;
    int rc = fmem_open(svc(), &p);
    cr_assert_eq(rc, 0, "connect %s: %s", svc(), fmem_strerror(rc));
    return p;
}

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
    const char *e = getenv("FMEM_TEST_RDMA");
    char host[64], port[8], token[256];
    cr_assert(e && sscanf(e, "%63s %7s %255s", host, port, token) == 3);
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

static uint64_t pool_bytes(fmem_pool *observer)
{
    fmem_stats_t st;
    cr_assert_eq(fmem_stats(observer, &st), 0);
    return st.allocated_bytes;
}

Test(service_rdma, killed_fmemd_is_recovered_by_the_memory_node)
{
    const char *e = getenv("FMEM_TEST_RDMA"), *fmemd = getenv("FMEM_TEST_FMEMD");
    char host[64], port[8], token[256], node[400], uri[128];
    cr_assert(e && fmemd && sscanf(e, "%63s %7s %255s", host, port, token) == 3,
              "FMEM_TEST_RDMA and FMEM_TEST_FMEMD are needed");
    snprintf(node, sizeof node, "rdma://%s:%s?token=%s", host, port, token);
    const char *sock = "/tmp/fmemd-kill.sock";
    snprintf(uri, sizeof uri, "unix:%s", sock);
    fmem_pool *observer;
    cr_assert_eq(fmem_open(node, &observer), 0);
    uint64_t before = pool_bytes(observer);

    pid_t d = spawn_fmemd(fmemd, node, sock);
    fmem_pool *p;
    cr_assert_eq(fmem_open(uri, &p), 0, "fmemd did not come up");
    fmem_handle h;
    for (int i = 0; i < 32; i++)
        cr_assert_eq(fmem_alloc(p, 4096u << (i % 4), &h), 0);
    cr_assert_gt(pool_bytes(observer), before);
    kill(d, SIGKILL);
    waitpid(d, NULL, 0);
    uint64_t now = 0;
    for (int i = 0; i < 300 && (now = pool_bytes(observer)) != before; i++)
        usleep(100000);
    cr_assert_eq(now, before, "the dead fmemd's blocks were not recovered (%llu bytes left)",
                 (unsigned long long)(now - before));
    cr_assert_neq(fmem_alloc(p, 4096, &h), 0, "an application of a dead fmemd cannot allocate");
    fmem_close(p);

    d = spawn_fmemd(fmemd, node, sock);
    cr_assert_eq(fmem_open(uri, &p), 0, "a restarted fmemd must serve");
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    cr_assert_eq(fmem_free(p, &h), 0);
    fmem_close(p);
    kill(d, SIGTERM);
    waitpid(d, NULL, 0);
    fmem_close(observer);
}
