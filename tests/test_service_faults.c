/* test_service_faults.c - bad input and faults: hostile clients on the
 * socket and in the ring (malformed, truncated, oversized messages, stray
 * descriptors, out-of-range requests, forged and stale handles, floods),
 * applications killed mid-traffic, fmemd killed and restarted, the memory
 * node restarted. In each case the service keeps serving the others, the
 * metadata is not changed by bad input, and nothing leaks. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/client.h"
#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"
#include "test_service_env.h"

static struct svc_env E;

static void teardown(void)
{
    env_stop(&E);
}

TestSuite(faults, .fini = teardown, .timeout = 90);

static void start(unsigned n, const char *extra)
{
    env_start_or_fail(&E, n, extra);
}

static fmem_pool *app(unsigned i)
{
    return env_app(&E, i);
}

/* Send raw bytes; return the error code fmemd answers with (0: none / EOF). */
static int raw_exchange(int fd, const void *buf, size_t len, const int *fds, unsigned nfds)
{
    if (sock_send(fd, buf, len, fds, nfds) < 0)
        return 1;
    uint8_t in[MSG_MAX_BYTES];
    ssize_t n = sock_recv_timeout(fd, in, sizeof in, NULL, 0, NULL, 2000);
    struct msg m;
    if (n <= 0 || msg_decode(in, (size_t)n, &m) || m.type != MSG_ERROR)
        return 0;
    return m.u.error.code;
}

Test(faults, hostile_socket_messages)
{
    start(1, NULL);
    fmem_pool *good = app(0);
    fmem_handle keep;
    cr_assert_eq(fmem_alloc(good, 4096, &keep), 0);
    uint64_t before = env_pool_allocated(&E);
    unsigned fds_before = env_count_fds(E.fmemd[0]);

    uint8_t buf[MSG_MAX_BYTES + 4096];
    struct msg_app_hello hello = {0};
    strcpy(hello.name, "hostile");
    int junk_fd = dup(0);
    for (int c = 0; c < 9; c++) {
        int fd = sock_connect(E.fmemd_sock[0]);
        cr_assert_geq(fd, 0);
        size_t len = 0;
        int rc;
        switch (c) {
        case 0: /* garbage */
            memset(buf, 0xA5, 100);
            rc = raw_exchange(fd, buf, 100, NULL, 0);
            break;
        case 1: /* truncated header */
            len = msg_encode(buf, MSG_APP_HELLO, 1, &hello, sizeof hello);
            rc = raw_exchange(fd, buf, 7, NULL, 0);
            break;
        case 2: /* truncated payload */
            len = msg_encode(buf, MSG_APP_HELLO, 1, &hello, sizeof hello);
            rc = raw_exchange(fd, buf, len - 3, NULL, 0);
            break;
        case 3: /* oversized datagram */
            len = msg_encode(buf, MSG_APP_HELLO, 1, &hello, sizeof hello);
            rc = raw_exchange(fd, buf, MSG_MAX_BYTES + 2048, NULL, 0);
            break;
        case 4: /* unknown type */
            len = msg_encode(buf, 999, 1, &hello, sizeof hello);
            rc = raw_exchange(fd, buf, len, NULL, 0);
            break;
        case 5: { /* name not terminated */
            struct msg_app_hello bad;
            memset(&bad, 'x', sizeof bad);
            bad.flags = 0;
            bad.pad = 0;
            len = msg_encode(buf, MSG_APP_HELLO, 1, &bad, sizeof bad);
            rc = raw_exchange(fd, buf, len, NULL, 0);
            break;
        }
        case 6: /* descriptors attached to a bad message */
            memset(buf, 0, 64);
            {
                int fds[3] = {junk_fd, junk_fd, junk_fd};
                rc = raw_exchange(fd, buf, 64, fds, 3);
            }
            break;
        case 7: /* a reply type where a request belongs */
            len = msg_encode(buf, MSG_SVC_WELCOME, 1, NULL, 0);
            rc = raw_exchange(fd, buf, len, NULL, 0);
            break;
        default: { /* wrong length field */
            len = msg_encode(buf, MSG_APP_HELLO, 1, &hello, sizeof hello);
            struct msg_hdr h;
            memcpy(&h, buf, sizeof h);
            h.len += 100;
            memcpy(buf, &h, sizeof h);
            rc = raw_exchange(fd, buf, len, NULL, 0);
            break;
        }
        }
        cr_assert_lt(rc, 0, "case %d: expected an error reply, got %d", c, rc);
        close(fd);
    }
    close(junk_fd);
    /* an application sending junk after its handshake gets errors and
     * keeps its session; one that keeps at it is disconnected */
    fmem_pool *p = app(0);
    memset(buf, 0x5A, 64);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(sock_send(service_socket(p), buf, 64, NULL, 0), 0);
    cr_assert_eq(service_ping(p), 0);
    fmem_pool *pest = app(0);
    fmem_handle ph;
    cr_assert_eq(fmem_alloc(pest, 4096, &ph), 0);
    for (int i = 0; i < 400; i++)
        if (sock_send(service_socket(pest), buf, 64, NULL, 0))
            break;
    int prc = 0;
    for (int t = 0; t < 500 && prc == 0; t++) {
        prc = service_ping(pest);
        env_nap_ms(20);
    }
    cr_assert_eq(prc, FMEM_EIO, "a flooding application is disconnected");
    fmem_close(pest);
    cr_assert_eq(fmem_alloc(good, 4096, &keep) == 0 && fmem_free(good, &keep) == 0, 1);
    fmem_close(p);
    /* the flooder's block goes back when fmemd sees it leave */
    cr_assert(env_wait_allocated(&E, before, 10000), "bad input changed the metadata");
    cr_assert_leq(env_count_fds(E.fmemd[0]), fds_before + 1, "fmemd leaked descriptors");
    cr_assert(env_status_has(E.fmemd_sock[0], "rejected messages"));
    fmem_close(good);
}

/* Raw requests straight into this application's ring. */
static int raw_req(fmem_pool *p, struct ring_req req)
{
    struct ring_rsp rsp;
    int rc = ring_call(service_ring(p), &req, &rsp, NULL, NULL, 100000);
    cr_assert_eq(rc, 0);
    cr_assert_eq(rsp.cookie, req.cookie);
    return rsp.rc;
}

Test(faults, hostile_ring_requests)
{
    start(1, NULL);
    fmem_pool *victim = app(0), *p = app(0);
    fmem_handle v, mine;
    cr_assert_eq(fmem_alloc(victim, 16384, &v), 0);
    cr_assert_eq(fmem_write(victim, &v, 0, "victim", 7), 0);
    cr_assert_eq(fmem_alloc(p, 8192, &mine), 0);
    uint64_t before = env_pool_allocated(&E);
    struct ring_req r = {.cookie = 1};
    r.op = 0;
    cr_assert_eq(raw_req(p, r), FMEM_EINVAL, "op 0");
    r.op = 77;
    cr_assert_eq(raw_req(p, r), FMEM_EINVAL, "unknown op");
    r = (struct ring_req){.op = RING_PING, .flags = 1, .cookie = 2};
    cr_assert_eq(raw_req(p, r), FMEM_EINVAL, "flags");
    r = (struct ring_req){.op = RING_ALLOC, .size = 0, .cookie = 3};
    cr_assert_eq(raw_req(p, r), FMEM_ESIZE, "size 0");
    r.size = UINT64_MAX;
    cr_assert_eq(raw_req(p, r), FMEM_ESIZE, "size 2^64-1");
    r.size = (uint64_t)1 << 40;
    cr_assert_eq(raw_req(p, r), FMEM_ESIZE, "size 1 TiB");
    /* forged and foreign handles */
    r = (struct ring_req){.op = RING_FREE, .h = v, .cookie = 4};
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "another application's block");
    r.h = mine;
    r.h.node = 9;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "node out of range");
    r.h = mine;
    r.h.addr += 4096;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "misaligned");
    r.h = mine;
    r.h.length = 4096;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "wrong length");
    r.h = mine;
    r.h.length = 3 * 4096;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "length not a power of two");
    r.h = mine;
    r.h.flags = 5;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "flags");
    r.h = mine;
    r.h.rkey ^= 0x10;
    cr_assert_eq(raw_req(p, r), FMEM_EACCES, "forged key");
    r.h = mine;
    r.h.addr = UINT64_MAX & ~(uint64_t)8191;
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "address out of range");
    /* stray posted bits for slots that hold no request */
    struct ring_hdr *ring = service_ring(p);
    atomic_fetch_or(&ring->posted, ~UINT64_C(0));
    atomic_fetch_add(&ring->bell, 1);
    futex_wake_shared(&ring->bell, 1);
    cr_assert_eq(service_ping(p), 0);
    cr_assert_eq(env_pool_allocated(&E), before, "bad requests changed the metadata");
    /* stale handle: freed, then presented again */
    fmem_handle stale = mine;
    cr_assert_eq(fmem_free(p, &mine), 0);
    r = (struct ring_req){.op = RING_FREE, .h = stale, .cookie = 5};
    cr_assert_eq(raw_req(p, r), FMEM_EBADHANDLE, "stale handle");
    char buf[8];
    cr_assert_eq(fmem_read(victim, &v, 0, buf, 7), 0);
    cr_assert_str_eq(buf, "victim");
    fmem_close(p);
    fmem_close(victim);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

struct flood {
    fmem_pool *p;
    _Atomic int *stop;
    uint64_t n;
};

static void *flood_thread(void *arg)
{
    struct flood *f = arg;
    struct ring_req r = {.op = RING_ALLOC, .size = UINT64_MAX};
    while (!atomic_load(f->stop)) {
        struct ring_rsp rsp;
        ring_call(service_ring(f->p), &r, &rsp, NULL, NULL, 1000);
        f->n++;
    }
    return NULL;
}

/* One application floods its ring; another is still served promptly. */
Test(faults, flood_does_not_starve_others)
{
    start(1, "--workers 1");
    fmem_pool *bad = app(0), *good = app(0);
    _Atomic int stop = 0;
    pthread_t t[4];
    struct flood f[4];
    for (int i = 0; i < 4; i++) {
        f[i] = (struct flood){.p = bad, .stop = &stop};
        pthread_create(&t[i], NULL, flood_thread, &f[i]);
    }
    env_nap_ms(100);
    uint64_t t0 = ring_now_ns();
    for (int i = 0; i < 500; i++) {
        fmem_handle h;
        cr_assert_eq(fmem_alloc(good, 4096, &h), 0);
        cr_assert_eq(fmem_free(good, &h), 0);
    }
    uint64_t took = ring_now_ns() - t0;
    atomic_store(&stop, 1);
    uint64_t flooded = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        flooded += f[i].n;
    }
    cr_assert_gt(flooded, 1000);
    cr_assert_lt(took, 10000000000u, "500 alloc+free took %.1f ms under flood", took / 1e6);
    fmem_close(bad);
    fmem_close(good);
}

/* An application killed in the middle of allocation traffic: everything it
 * held comes back. */
Test(faults, sigkill_application)
{
    start(1, NULL);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        fmem_pool *p;
        if (fmem_open(E.app_uri[0], &p))
            _exit(1);
        fmem_handle h[2048];
        unsigned n = 0, seed = 5;
        for (unsigned it = 0;; it++) {
            unsigned r = rand_r(&seed);
            if (n < 2048 && (r % 3)) {
                if (fmem_alloc(p, 4096u << (r % 4), &h[n]) == 0)
                    n++;
            } else if (n) {
                unsigned k = r % n;
                fmem_free(p, &h[k]);
                h[k] = h[--n];
            }
            if (it == 3000 && write(pfd[1], "x", 1) != 1)
                _exit(2);
        }
    }
    close(pfd[1]);
    char c;
    cr_assert_eq(read(pfd[0], &c, 1), 1);
    close(pfd[0]);
    cr_assert_gt(env_pool_allocated(&E), 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    cr_assert(env_wait_allocated(&E, 0, 30000), "allocations of the killed application remain");
    cr_assert_eq(env_verify_errors(&E), 0);
    fmem_pool *p = app(0);
    cr_assert_eq(service_ping(p), 0);
    fmem_close(p);
}

/* fmemd killed: the memory node fences and recovers its user id; the
 * applications see the service gone; a restarted fmemd serves again. */
Test(faults, kill_fmemd_and_restart)
{
    start(2, NULL);
    fmem_pool *p = app(0), *other = app(1);
    fmem_handle h[100], o;
    for (int i = 0; i < 100; i++)
        cr_assert_eq(fmem_alloc(p, 4096u << (i % 3), &h[i]), 0);
    /* 64 KiB: above the cached sizes, so the other service holds just it */
    cr_assert_eq(fmem_alloc(other, 65536, &o), 0);
    cr_assert_eq(fmem_write(other, &o, 0, "other", 6), 0);
    uint64_t other_bytes = 65536;
    env_stop_pid(&E.fmemd[0], SIGKILL);
    cr_assert(env_wait_allocated(&E, other_bytes, 5000),
              "the dead service's blocks were not recovered");
    cr_assert(env_status_has(E.mnode_sock, "recovered"));
    /* the application notices */
    fmem_handle x;
    cr_assert_eq(fmem_alloc(p, 4096, &x), FMEM_EIO);
    cr_assert_eq(fmem_read(p, &h[0], 0, &x, 1), FMEM_ESTALE);
    fmem_close(p);
    /* the other service kept going the whole time */
    char buf[8];
    cr_assert_eq(fmem_read(other, &o, 0, buf, 6), 0);
    cr_assert_str_eq(buf, "other");
    cr_assert_eq(fmem_alloc(other, 4096, &x), 0);
    cr_assert_eq(fmem_free(other, &x), 0);
    /* restart */
    cr_assert(env_start_fmemd(&E, 0, NULL));
    p = app(0);
    cr_assert_eq(fmem_alloc(p, 4096, &x), 0);
    cr_assert_eq(fmem_free(p, &x), 0);
    fmem_close(p);
    fmem_close(other);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}

/* The memory node stops cleanly and comes back: the pool is intact, the
 * service resumes its user id, blocks held across the restart still work. */
Test(faults, mnode_restart_keeps_pool)
{
    start(1, NULL);
    fmem_pool *p = app(0);
    fmem_handle h[16];
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(fmem_alloc(p, 65536, &h[i]), 0);
        cr_assert_eq(fmem_write(p, &h[i], 100, &i, sizeof i), 0);
    }
    uint64_t held = env_pool_allocated(&E);
    int st = env_stop_pid(&E.mnode, SIGTERM);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "memory node did not stop cleanly");
    /* allocation goes on while the memory node is away (64 KiB: above the
     * cached sizes, so the pool holds what it held before afterwards) */
    fmem_handle extra;
    cr_assert_eq(fmem_alloc(p, 65536, &extra), 0);
    cr_assert_eq(fmem_free(p, &extra), 0);
    cr_assert(env_start_mnode(&E));
    cr_assert(env_wait_status(E.mnode_sock, "fmemd0 pid", 20000), "fmemd did not resume");
    cr_assert_eq(env_pool_allocated(&E), held);
    for (int i = 0; i < 16; i++) {
        int v = -1;
        cr_assert_eq(fmem_read(p, &h[i], 100, &v, sizeof v), 0);
        cr_assert_eq(v, i);
        cr_assert_eq(fmem_free(p, &h[i]), 0);
    }
    fmem_close(p);
    cr_assert(env_wait_allocated(&E, 0, 10000));
    cr_assert_eq(env_verify_errors(&E), 0);
}
