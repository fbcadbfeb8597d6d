/* fuzz_handshake.c - libFuzzer target for the daemons as a hostile peer
 * sees them. A memory node and an fmemd run in this process (threads, on a
 * pool in /dev/shm), so AddressSanitizer watches them and libFuzzer sees
 * their coverage. Each input is a script played on one connection:
 *
 *   byte 0        bit 0: talk to fmemd (0) or to the memory node (1)
 *   then records  [op][len][len bytes]
 *     op % 4 == 0   send the bytes as one datagram
 *     op % 4 == 1   take a reply, waiting up to 2 ms if a datagram is not
 *                   answered yet (a welcome's ring is kept)
 *     op % 4 == 2   a request on the ring (struct ring_req), waited for
 *     op % 4 == 3   raw bytes written into the ring at an offset (the
 *                   first two bytes), then a posted bit and the bell: what
 *                   an application that ignores the library can do
 *
 * The daemons must survive whatever is said: every later input is served
 * by the same two daemons, and a crash or a hang in them is a crash or a
 * hang of the fuzzer. Built and run by tests/fuzz/fuzz.sh. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmem.h"
#include "pool_internal.h"
#include "service/daemon.h"
#include "service/mnode.h"
#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"

static char dir[80], pool_uri[128], mnode_sock[100], fmemd_sock[100];
static _Atomic int stop;
static struct mnode_config mc;
static struct fmemd_config fc;

static void *run_mnode(void *arg)
{
    (void)arg;
    mnode_run(&mc);
    return NULL;
}

static void *run_fmemd(void *arg)
{
    (void)arg;
    fmemd_run(&fc);
    return NULL;
}

static void wait_socket(const char *path)
{
    struct stat st;
    for (int i = 0; i < 1000; i++) {
        if (stat(path, &st) == 0)
            return;
        usleep(10000);
    }
    fprintf(stderr, "fuzz_handshake: %s never appeared\n", path);
    exit(1);
}

static void cleanup(void)
{
    char p[160];
    snprintf(p, sizeof p, "%s/pool", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/pool.data", dir);
    unlink(p);
    unlink(mnode_sock);
    unlink(fmemd_sock);
    rmdir(dir);
}

/* A service the input registers holds a user slot in this process's name
 * for good (no fence may kill us, and a live pid is never recovered): the
 * pool's 256 slots would soon be gone. So slots of our pid other than the
 * daemons' own are given back after each memory-node session, through a
 * handle of our own on the pool. */
static fmem_pool *watch;
static bool legit[MAX_UID + 1];

static void note_legit_slots(void)
{
    char uri[160];
    snprintf(uri, sizeof uri, "file:%s/pool?create=0", dir);
    if (fmem_open(uri, &watch))
        exit(1);
    struct node *n = watch->nodes[0];
    for (unsigned u = 1; u < n->g.nusers; u++)
        legit[u] = node_uid_pid(n, u) == (uint32_t)getpid();
}

static void free_fake_slots(void)
{
    struct node *n = watch->nodes[0];
    for (unsigned u = 1; u < n->g.nusers; u++)
        if (!legit[u] && node_uid_pid(n, u) == (uint32_t)getpid())
            node_clear_uid(n, u);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    /* fuzz.sh gives a directory it removes even after a crash */
    const char *d = getenv("FMEM_FUZZ_DIR");
    snprintf(dir, sizeof dir, "%s/fmem-fuzz-hs-XXXXXX", d && *d ? d : "/dev/shm");
    if (!mkdtemp(dir))
        exit(1);
    snprintf(pool_uri, sizeof pool_uri, "file:%s/pool?size=64M", dir);
    snprintf(mnode_sock, sizeof mnode_sock, "%s/mnode.sock", dir);
    snprintf(fmemd_sock, sizeof fmemd_sock, "%s/fmemd.sock", dir);
    atexit(cleanup);
    /* no fence: a service "dies" whenever an input hangs up, and it is
     * this very process */
    mc = (struct mnode_config){.pool_uri = pool_uri, .socket_path = mnode_sock,
                               .socket_mode = 0600, .heartbeat_ms = 1000, .miss_limit = 3,
                               .regen_ms = 100, .sweep_ms = 5000, .no_fence = true,
                               .allow_uid = (uid_t)-1, .stop = &stop};
    fc = (struct fmemd_config){.socket_path = fmemd_sock, .socket_mode = 0600,
                               .mnode_sockets = {mnode_sock}, .nmnodes = 1, .workers = 1,
                               .app_max_bytes = 64 << 20, .app_max_allocs = 256,
                               .max_apps = 64, .spin_ns = 20000, .connect_ms = 5000,
                               .allow_uid = (uid_t)-1, .allow_gid = (gid_t)-1,
                               .name = "fuzzed", .stop = &stop};
    pthread_t t;
    if (pthread_create(&t, NULL, run_mnode, NULL))
        exit(1);
    wait_socket(mnode_sock);
    if (pthread_create(&t, NULL, run_fmemd, NULL))
        exit(1);
    wait_socket(fmemd_sock);
    note_legit_slots();
    return 0;
}

struct session {
    int sock;
    struct ring_hdr *ring;
    bool poked; /* the ring was scribbled on: our own calls may never end */
    unsigned sent; /* datagrams not yet answered (a reply is waited for) */
};

static bool alive(void *ctx)
{
    struct pollfd pf = {.fd = *(int *)ctx, .events = POLLIN};
    return !(poll(&pf, 1, 0) == 1 && (pf.revents & (POLLHUP | POLLERR)));
}

static void receive(struct session *s)
{
    static uint8_t buf[MSG_MAX_BYTES];
    int fds[SVC_MAX_FDS];
    unsigned nfds = 0;
    ssize_t n = sock_recv_timeout(s->sock, buf, sizeof buf, fds, SVC_MAX_FDS, &nfds,
                                  s->sent ? 2 : 0);
    if (n > 0 && s->sent)
        s->sent--;
    struct msg m;
    if (n > 0 && nfds > 0 && !s->ring && msg_decode(buf, (size_t)n, &m) == 0 &&
        m.type == MSG_APP_WELCOME)
        ring_map(fds[0], &s->ring); /* later records may use it */
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
}

static void ring_request(struct session *s, const uint8_t *p, size_t len)
{
    struct ring_req req = {0};
    struct ring_rsp rsp;
    memcpy(&req, p, len < sizeof req ? len : sizeof req);
    if (s->ring && !s->poked)
        ring_call(s->ring, &req, &rsp, alive, &s->sock, 20000);
}

static void ring_poke(struct session *s, const uint8_t *p, size_t len)
{
    if (!s->ring || len < 2)
        return;
    size_t at = ((size_t)p[0] | (size_t)p[1] << 8) % RING_BYTES;
    len -= 2;
    if (len > RING_BYTES - at)
        len = RING_BYTES - at;
    s->poked = true;
    memcpy((char *)s->ring + at, p + 2, len);
    atomic_fetch_or(&s->ring->posted, UINT64_C(1) << (p[0] % RING_SLOTS));
    atomic_fetch_add(&s->ring->bell, 1);
    futex_wake_shared(&s->ring->bell, 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    struct session s = {.sock = sock_connect(data[0] & 1 ? mnode_sock : fmemd_sock)};
    if (s.sock < 0)
        abort(); /* a daemon is gone */
    for (size_t i = 1; i + 2 <= size;) {
        unsigned op = data[i] % 4;
        size_t len = data[i + 1];
        i += 2;
        if (len > size - i)
            len = size - i;
        const uint8_t *p = data + i;
        i += len;
        switch (op) {
        case 0:
            if (send(s.sock, p, len, MSG_NOSIGNAL | MSG_DONTWAIT) >= 0)
                s.sent++;
            break;
        case 1:
            receive(&s);
            break;
        case 2:
            ring_request(&s, p, len);
            break;
        case 3:
            ring_poke(&s, p, len);
            break;
        }
    }
    if (data[0] & 1)
        free_fake_slots();
    if (s.ring)
        ring_unmap(s.ring);
    close(s.sock);
    return 0;
}
