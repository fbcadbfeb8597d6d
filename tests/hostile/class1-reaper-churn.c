/* class1-reaper-churn - fmemd's memory safety under churn (class 1 of the
 * hardening issue), played against real daemons.
 *
 * One application takes a large part of an 8 GiB pool in 4 KiB blocks (up
 * to 1.5 million, as many as it gets in ALLOC_BUDGET_NS) and is killed:
 * fmemd's reaper needs a second or more to give them back. Meanwhile
 * churners connect and hang up as fast as they can, one after its hello
 * alone, one after taking a block, so that thousands of departed
 * applications queue behind that teardown (more than the 4096 the old
 * queue held). Expected: fmemd stays up and keeps serving, every block
 * comes back, the pool verifies clean. A round in which fewer than 4097
 * applications left during the teardown (a slow machine) is played again,
 * once. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "hostile.h"
#include "service/proto.h"
#include "service/ring.h" /* ring_now_ns */
#include "service/sock.h"
#include "test_service_env.h"

#define BIG_BLOCKS 1500000u
#define ALLOC_BUDGET_NS 25000000000u
#define OLD_QUEUE 4096 /* what fmemd's queue of departed applications held */
#define CHURNERS 3      /* one leaving a block behind, two with hellos alone */

struct shared {
    _Atomic uint64_t churns;
    _Atomic int stop;
    _Atomic uint64_t big_blocks;
    _Atomic int big_ready;
};

static struct svc_env E;

/* Takes blocks until BIG_BLOCKS, the pool is full or the time is up, then
 * waits to be killed. */
static void big_app(struct shared *sh)
{
    fmem_pool *p;
    if (fmem_open(E.app_uri[0], &p))
        _exit(1);
    fmem_handle h;
    uint64_t n = 0, t0 = ring_now_ns();
    while (n < BIG_BLOCKS && fmem_alloc(p, 4096, &h) == 0) {
        n++;
        if ((n & 4095) == 0 && ring_now_ns() - t0 > ALLOC_BUDGET_NS)
            break;
    }
    atomic_store(&sh->big_blocks, n);
    atomic_store(&sh->big_ready, 1);
    for (;;)
        pause();
}

static bool fmemd_alive(void)
{
    int st;
    return E.fmemd[0] > 0 && waitpid(E.fmemd[0], &st, WNOHANG) == 0;
}

/* Hello, welcome, hang up: the cheapest sessions there are, RAW_BATCH at
 * a time so that the churn is not bound by one round trip after another
 * (on a loaded machine each one waits for the scheduler). */
#define RAW_BATCH 32
static unsigned raw_sessions(const char *path)
{
    static uint8_t buf[MSG_MAX_BYTES];
    int socks[RAW_BATCH];
    unsigned n = 0, done = 0;
    struct msg_app_hello h = {0};
    strcpy(h.name, "churn");
    for (; n < RAW_BATCH; n++) {
        if ((socks[n] = sock_connect(path)) < 0)
            break;
        sock_send_msg(socks[n], MSG_APP_HELLO, 1, &h, sizeof h, NULL, 0);
    }
    for (unsigned i = 0; i < n; i++) {
        int fds[SVC_MAX_FDS];
        unsigned nfds = 0;
        ssize_t r = sock_recv_timeout(socks[i], buf, sizeof buf, fds, SVC_MAX_FDS, &nfds, 5000);
        for (unsigned k = 0; k < nfds; k++)
            close(fds[k]);
        close(socks[i]);
        done += r > 0;
    }
    return done;
}

/* A session that leaves a block behind for fmemd to give back. */
static unsigned block_session(void)
{
    fmem_pool *p;
    if (fmem_open(E.app_uri[0], &p))
        return 0;
    fmem_handle h;
    fmem_alloc(p, 4096, &h);
    fmem_close(p);
    return 1;
}

static void churner(struct shared *sh, bool with_block)
{
    while (!atomic_load(&sh->stop))
        atomic_fetch_add(&sh->churns, with_block ? block_session() : raw_sessions(E.fmemd_sock[0]));
    _exit(0);
}

/* One round: a big application dies while others churn. Returns the
 * applications that left during its teardown. */
static uint64_t round_of_churn(struct shared *sh)
{
    memset(sh, 0, sizeof *sh);
    uint64_t t0 = ring_now_ns();
    pid_t big = fork();
    if (big == 0) {
        hostile_die_with_parent();
        big_app(sh);
    }
    while (!atomic_load(&sh->big_ready) && ring_now_ns() - t0 < 2 * ALLOC_BUDGET_NS)
        env_nap_ms(20);
    uint64_t blocks = atomic_load(&sh->big_blocks);
    NOTE("big application holds %llu blocks (%.1f s to allocate)", (unsigned long long)blocks,
         (ring_now_ns() - t0) / 1e9);
    pid_t ch[CHURNERS];
    for (int i = 0; i < CHURNERS; i++)
        if ((ch[i] = fork()) == 0) {
            hostile_die_with_parent();
            churner(sh, i == 0);
        }
    env_nap_ms(300); /* churning at full speed */
    uint64_t before = atomic_load(&sh->churns);
    t0 = ring_now_ns();
    kill(big, SIGKILL);
    waitpid(big, NULL, 0);
    /* churn until the big teardown is over (the pool mostly empty again) */
    uint64_t threshold = blocks * 4096 / 100 + (16u << 20), alloc = UINT64_MAX;
    while (fmemd_alive() && ring_now_ns() - t0 < 120000000000u &&
           (alloc = env_pool_allocated(&E)) > threshold)
        env_nap_ms(20);
    uint64_t during = atomic_load(&sh->churns) - before;
    atomic_store(&sh->stop, 1);
    for (int i = 0; i < CHURNERS; i++)
        waitpid(ch[i], NULL, 0);
    NOTE("teardown took %.1f s; %llu applications came and went meanwhile",
         (ring_now_ns() - t0) / 1e9, (unsigned long long)during);
    CHECK(alloc <= threshold, "the big application's blocks did not come back");
    return during;
}

int main(void)
{
    E.pool_size = "8G";
    hostile_watchdog(400, "the churn could not go on (fmemd stopped answering)");
    if (!env_start(&E, 1, "--workers 2")) {
        env_dump_logs(&E);
        env_stop(&E);
        fprintf(stderr, "  daemons did not start\n");
        return 1;
    }
    struct shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    uint64_t during = round_of_churn(sh);
    if (during <= OLD_QUEUE && fmemd_alive()) {
        NOTE("too few departures to overflow the old queue: once more");
        during = round_of_churn(sh);
    }
    CHECK(fmemd_alive(), "fmemd died under churn");
    /* still serving, and everything comes back */
    fmem_pool *p;
    int rc = fmem_open(E.app_uri[0], &p);
    CHECK(rc == 0, "fmemd does not serve after the churn: %s", fmem_strerror(rc));
    if (rc == 0) {
        fmem_handle h;
        CHECK(fmem_alloc(p, 4096, &h) == 0 && fmem_free(p, &h) == 0, "alloc/free failed");
        fmem_close(p);
    }
    CHECK(env_wait_allocated(&E, 0, 60000), "blocks of departed applications remain: %llu bytes",
          (unsigned long long)env_pool_allocated(&E));
    CHECK(env_verify_errors(&E) == 0, "the pool does not verify");
    if (hostile_failures)
        env_dump_logs(&E);
    env_stop(&E);
    if (!hostile_failures && during <= OLD_QUEUE) {
        fprintf(stderr, "could not stage the attack: only %llu departures during the teardown "
                        "(machine too loaded)\n",
                (unsigned long long)during);
        return HOSTILE_SKIP;
    }
    return hostile_result();
}
