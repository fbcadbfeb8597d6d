/* class2-idle-and-flood - denial of service by idle and misbehaving clients
 * (class 2 of the hardening issue), played against real daemons.
 *
 * An attacker (uid 65534; the program runs as root) at once:
 * - holds 300 connections to fmemd and 300 to the memory node that never
 *   say a word, replacing one of them every 10 ms so that they stay fresh;
 * - fills 8 sockets to each daemon with status and occupancy-map requests
 *   (of a 1 GiB pool) and never reads a reply;
 * - opens a session and floods its socket with requests it never reads;
 * - connects and hangs up in a loop.
 * Meanwhile a victim keeps opening sessions, allocating, writing, reading
 * and freeing, asks both daemons for their status, and a second fmemd
 * registers with the memory node. Expected: every victim operation
 * succeeds and no open takes more than a second; both daemons stay up with
 * their descriptors and memory bounded, and let go of everything the
 * attacker held once it is gone. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "hostile.h"
#include "service/client.h"
#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"
#include "test_service_env.h"

#define IDLE 300
#define FLOODERS 8
#define VICTIM_NS 6000000000u
/* a bounded, small delay: on a machine shared with other work a session
 * may wait for the scheduler now and then, never for the attacker */
#define P95_OPEN_MS 250
#define MAX_OPEN_MS 2500
#define MAX_SESSIONS 100000

static struct svc_env E;
static int stop_pipe[2], ready_pipe[2];

static unsigned long rss_kib(pid_t pid)
{
    char path[64], line[128];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %lu", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static bool alive(pid_t pid)
{
    int st;
    return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
}

/* Attacker's part: report ready, then hold until the victim is done. */
static void hold(void)
{
    if (write(ready_pipe[1], "x", 1) != 1)
        _exit(2);
    char c;
    while (read(stop_pipe[0], &c, 1) > 0)
        ;
    _exit(0);
}

/* IDLE silent connections, kept fresh: every 10 ms the oldest is replaced
 * by a new one, so none of them ever reaches its hello timeout. */
static void idle_connections(const char *path)
{
    int fds[IDLE];
    for (int i = 0; i < IDLE; i++)
        if ((fds[i] = sock_connect(path)) < 0)
            _exit(3);
    if (write(ready_pipe[1], "x", 1) != 1)
        _exit(2);
    struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
    for (unsigned k = 0; poll(&p, 1, 10) == 0; k = (k + 1) % IDLE) {
        close(fds[k]);
        if ((fds[k] = sock_connect(path)) < 0)
            _exit(3);
    }
    _exit(0);
}

static void unread_requests(const char *path)
{
    struct msg_status_req q = {0};
    uint8_t buf[64];
    for (int i = 0; i < FLOODERS; i++) {
        int fd = sock_connect(path);
        if (fd < 0)
            _exit(4);
        for (unsigned k = 0; k < 100000; k++) {
            size_t len = msg_encode(buf, k & 1 ? MSG_MAP_REQ : MSG_STATUS_REQ, k, &q, sizeof q);
            if (send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                break; /* our side is full: the daemon stopped reading us */
        }
    }
    hold();
}

static void session_flood(void)
{
    fmem_pool *p;
    if (fmem_open(E.app_uri[0], &p))
        _exit(5);
    uint8_t buf[64];
    int fd = service_socket(p);
    struct msg_status_req q = {0};
    for (unsigned k = 0; k < 100000; k++) {
        size_t len = k % 3 ? msg_encode(buf, MSG_STATS_REQ, k, NULL, 0)
                           : msg_encode(buf, MSG_STATUS_REQ, k, &q, sizeof q);
        if (send(fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
            break; /* our side is full: fmemd stopped reading us */
    }
    hold();
}

static void connect_churn(void)
{
    if (write(ready_pipe[1], "x", 1) != 1)
        _exit(2);
    struct pollfd p = {.fd = stop_pipe[0], .events = POLLIN};
    while (poll(&p, 1, 0) == 0) {
        int fd = sock_connect(E.fmemd_sock[0]);
        if (fd >= 0)
            close(fd);
    }
    _exit(0);
}

static pid_t attacker(void (*part)(const char *), const char *arg, unsigned uid)
{
    pid_t pid = fork();
    if (pid == 0) {
        close(stop_pipe[1]);
        if (uid != geteuid() && !hostile_become(uid))
            _exit(99);
        hostile_die_with_parent();
        part(arg);
    }
    return pid;
}

static void session_flood_(const char *unused)
{
    (void)unused;
    session_flood();
}

static void connect_churn_(const char *unused)
{
    (void)unused;
    connect_churn();
}

/* One victim session: open, allocate, write, read, free, close. The open
 * time in ms, or -1 with the failure in *rc. */
static double victim_session(int *rc)
{
    uint64_t t0 = ring_now_ns();
    fmem_pool *p;
    if ((*rc = fmem_open(E.app_uri[0], &p)))
        return -1;
    double ms = (ring_now_ns() - t0) / 1e6;
    fmem_handle h;
    char out[6] = {0};
    if ((*rc = fmem_alloc(p, 65536, &h)) == 0) {
        if ((*rc = fmem_write(p, &h, 100, "victim", 6)) == 0 &&
            (*rc = fmem_read(p, &h, 100, out, 6)) == 0 && memcmp(out, "victim", 6))
            *rc = FMEM_ECORRUPT;
        int frc = fmem_free(p, &h);
        if (*rc == 0)
            *rc = frc;
    }
    fmem_close(p);
    return *rc ? -1 : ms;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static bool status_ok(const char *sock)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/tools/fmem' status 'unix:%s' >/dev/null 2>&1",
             getenv("top_builddir") ? getenv("top_builddir") : ".", sock);
    return system(cmd) == 0;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "needs root to play the attacker as another user\n");
        return HOSTILE_SKIP;
    }
    unsigned uid = HOSTILE_UID;
    hostile_watchdog(120, "the victim or the attack could not go on (a daemon stopped answering)");
    char extra[96];
    snprintf(extra, sizeof extra, "--workers 2 --mode 0666 --allow-uid %u", uid);
    E.pool_size = "1G";
    E.mnode_extra = extra + strlen("--workers 2 ");
    if (!env_start(&E, 2, extra)) {
        env_dump_logs(&E);
        env_stop(&E);
        fprintf(stderr, "  daemons did not start\n");
        return 1;
    }
    env_stop_pid(&E.fmemd[1], SIGTERM); /* started again under attack */
    chmod(E.dir, 0711);
    unsigned fds0 = env_count_fds(E.fmemd[0]), mfds0 = env_count_fds(E.mnode);
    if (pipe2(stop_pipe, O_CLOEXEC) || pipe2(ready_pipe, O_CLOEXEC)) /* not for the daemons */
        return 1;
    pid_t att[7];
    unsigned n = 0;
    att[n++] = attacker(idle_connections, E.fmemd_sock[0], uid);
    att[n++] = attacker(idle_connections, E.mnode_sock, uid);
    att[n++] = attacker(unread_requests, E.fmemd_sock[0], uid);
    att[n++] = attacker(unread_requests, E.mnode_sock, uid);
    att[n++] = attacker(session_flood_, NULL, uid);
    att[n++] = attacker(connect_churn_, NULL, uid);
    close(stop_pipe[0]);
    close(ready_pipe[1]);
    char c;
    unsigned ready = 0;
    while (ready < n && read(ready_pipe[0], &c, 1) == 1)
        ready++;
    CHECK(ready == n, "only %u of %u attackers got going", ready, n);
    NOTE("attacker uid %u: %u idle connections to each daemon, %u unread floods each, a "
         "flooding session, a connect loop",
         uid, IDLE, FLOODERS);

    /* the victim, while all of that holds */
    unsigned sessions = 0, failed = 0;
    static double ms_of[MAX_SESSIONS];
    int first_rc = 0;
    uint64_t t0 = ring_now_ns();
    bool second = false;
    while (ring_now_ns() - t0 < VICTIM_NS && sessions < MAX_SESSIONS) {
        int rc;
        double ms = victim_session(&rc);
        if (ms < 0 && !failed++)
            first_rc = rc;
        ms_of[sessions++] = ms;
        if (!second && ring_now_ns() - t0 > VICTIM_NS / 3) {
            uint64_t s0 = ring_now_ns();
            second = env_start_fmemd(&E, 1, "--workers 1");
            NOTE("a second fmemd registered in %.0f ms", (ring_now_ns() - s0) / 1e6);
            CHECK(second, "a second fmemd could not register with the memory node");
        }
    }
    qsort(ms_of, sessions, sizeof *ms_of, by_value);
    double p50 = ms_of[sessions / 2], p95 = ms_of[sessions * 95 / 100], worst = ms_of[sessions - 1];
    NOTE("victim: %u sessions, %u failed; open p50 %.1f ms, p95 %.1f ms, slowest %.0f ms",
         sessions, failed, p50, p95, worst);
    CHECK(failed == 0, "%u victim sessions failed, the first: %s", failed,
          fmem_strerror(first_rc));
    CHECK(p95 < P95_OPEN_MS, "opens took %.0f ms (p95) under attack", p95);
    CHECK(worst < MAX_OPEN_MS, "an open took %.0f ms under attack", worst);
    CHECK(status_ok(E.fmemd_sock[0]), "fmem status of fmemd failed under attack");
    CHECK(status_ok(E.mnode_sock), "fmem status of the memory node failed under attack");
    if (second) {
        fmem_pool *p;
        int rc = fmem_open(E.app_uri[1], &p);
        CHECK(rc == 0, "the second fmemd does not serve: %s", fmem_strerror(rc));
        if (rc == 0)
            fmem_close(p);
    }
    unsigned fds = env_count_fds(E.fmemd[0]), mfds = env_count_fds(E.mnode);
    unsigned long rss = rss_kib(E.fmemd[0]), mrss = rss_kib(E.mnode);
    NOTE("under attack: fmemd %u descriptors, %lu KiB; memory node %u descriptors, %lu KiB", fds,
         rss, mfds, mrss);
    CHECK(fds < fds0 + 64, "fmemd holds %u descriptors (from %u)", fds, fds0);
    CHECK(mfds < mfds0 + 96, "the memory node holds %u descriptors (from %u)", mfds, mfds0);
    CHECK(rss < 256 * 1024 && mrss < 256 * 1024, "memory grew: %lu and %lu KiB", rss, mrss);

    /* the attacker leaves: everything it held is let go */
    close(stop_pipe[1]);
    for (unsigned i = 0; i < n; i++)
        waitpid(att[i], NULL, 0);
    t0 = ring_now_ns();
    while ((env_count_fds(E.fmemd[0]) > fds0 + 2 || env_count_fds(E.mnode) > mfds0 + 4) &&
           ring_now_ns() - t0 < 10000000000u)
        env_nap_ms(50);
    NOTE("after the attack: fmemd %u descriptors (from %u), memory node %u (from %u, one more "
         "service)",
         env_count_fds(E.fmemd[0]), fds0, env_count_fds(E.mnode), mfds0);
    CHECK(env_count_fds(E.fmemd[0]) <= fds0 + 2, "fmemd kept the attacker's descriptors");
    CHECK(env_count_fds(E.mnode) <= mfds0 + 4, "the memory node kept the attacker's descriptors");
    CHECK(alive(E.fmemd[0]) && alive(E.mnode), "a daemon died");
    int rc;
    CHECK(victim_session(&rc) >= 0, "no service after the attack: %s", fmem_strerror(rc));
    CHECK(env_wait_allocated(&E, 0, 10000), "blocks remain allocated");
    CHECK(env_verify_errors(&E) == 0, "the pool does not verify");
    if (hostile_failures)
        env_dump_logs(&E);
    env_stop(&E);
    return hostile_result();
}
