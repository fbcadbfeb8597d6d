/* test_daemon_limits.c - clients that do nothing or misbehave cost the
 * others at most a small delay: connections that never say hello, floods
 * of requests whose replies are never read, one user opening every session,
 * a service out of file descriptors; and a refused user is told why.
 * Real daemons; tests that need a second user run as root and skip
 * otherwise. */
#include <criterion/criterion.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"
#include "test_service_env.h"

#define OTHER_UID 65534 /* nobody: the second user of these tests */
/* the longest an open may take behind misbehaving clients: a bounded,
 * small delay, with room for a machine shared with other work */
#define MAX_OPEN_MS 2000

static struct svc_env E;

static void teardown(void)
{
    env_stop(&E);
}

TestSuite(limits, .fini = teardown, .timeout = 90);

/* Start the daemons with fmemd's socket reachable by OTHER_UID. */
static void start(const char *extra)
{
    env_start_or_fail(&E, 1, extra);
    cr_assert_eq(chmod(E.dir, 0711), 0);
}

static void need_root(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to play a second user");
}

/* Run fn as OTHER_UID in a child; returns its exit status (or -1). */
static int as_other_user(int (*fn)(void *), void *arg)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setgroups(0, NULL) || setresgid(OTHER_UID, OTHER_UID, OTHER_UID) ||
            setresuid(OTHER_UID, OTHER_UID, OTHER_UID))
            _exit(99);
        _exit(fn(arg));
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

/* Open and close the service n times; the slowest open in ms (-1: one
 * failed, its code in *rc). */
static double slowest_open(unsigned n, int *rc)
{
    double worst = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t t0 = ring_now_ns();
        fmem_pool *p;
        *rc = fmem_open(E.app_uri[0], &p);
        if (*rc)
            return -1;
        fmem_handle h;
        *rc = fmem_alloc(p, 4096, &h);
        if (*rc == 0)
            *rc = fmem_free(p, &h);
        fmem_close(p);
        if (*rc)
            return -1;
        double ms = (ring_now_ns() - t0) / 1e6;
        if (ms > worst)
            worst = ms;
    }
    return worst;
}

/* n connections that never say anything; their descriptors in fds. */
static unsigned idle_connections(int *fds, unsigned n)
{
    unsigned k = 0;
    for (; k < n; k++)
        if ((fds[k] = sock_connect(E.fmemd_sock[0])) < 0)
            break;
    return k;
}

Test(limits, idle_connections_do_not_lock_out_applications)
{
    start(NULL);
    int fds[200];
    unsigned n = idle_connections(fds, 200);
    cr_assert_eq(n, 200);
    env_nap_ms(200); /* all accepted and waiting for their hello */
    int rc = 0;
    double ms = slowest_open(20, &rc);
    cr_assert_eq(rc, 0, "an application was refused: %s", fmem_strerror(rc));
    cr_assert_lt(ms, MAX_OPEN_MS, "an open took %.0f ms behind idle connections", ms);
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
}

static int hold_idle(void *arg)
{
    int *go = arg; /* a pipe: the parent closes it when done */
    int fds[300];
    unsigned n = idle_connections(fds, 300);
    if (n < 300)
        return 1;
    if (write(go[1], "x", 1) != 1)
        return 2;
    char c;
    return read(go[0], &c, 1) == 0 ? 0 : 3;
}

/* Another user's idle connections: it holds 16 pending slots at most, and
 * never more than its share of the table. */
Test(limits, another_users_idle_connections)
{
    need_root();
    start("--allow-uid 65534 --mode 0666");
    int up[2], down[2];
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        int io[2] = {down[0], up[1]};
        if (setgroups(0, NULL) || setresgid(OTHER_UID, OTHER_UID, OTHER_UID) ||
            setresuid(OTHER_UID, OTHER_UID, OTHER_UID))
            _exit(99);
        _exit(hold_idle(io));
    }
    close(up[1]);
    close(down[0]);
    char c;
    cr_assert_eq(read(up[0], &c, 1), 1, "the other user could not connect");
    env_nap_ms(200);
    int rc = 0;
    double ms = slowest_open(20, &rc);
    cr_assert_eq(rc, 0, "an application was refused: %s", fmem_strerror(rc));
    cr_assert_lt(ms, MAX_OPEN_MS, "an open took %.0f ms behind idle connections", ms);
    cr_assert(env_status_has(E.fmemd_sock[0], "opening (at most"));
    close(down[1]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
}

/* Map requests whose replies are never read (16 clients): the service neither
 * blocks on the full sockets nor queues without bound; the readers that do
 * not read are dropped. */
Test(limits, unread_replies_do_not_stall_the_service)
{
    E.pool_size = "8G"; /* 65536 spans: a map is a reply of two 32 KiB parts */
    start(NULL);
    enum { FLOODERS = 16 };
    int fds[FLOODERS];
    struct msg_status_req q = {0};
    uint8_t buf[64];
    for (unsigned i = 0; i < FLOODERS; i++) {
        fds[i] = sock_connect(E.fmemd_sock[0]);
        cr_assert_geq(fds[i], 0);
        for (unsigned k = 0; k < 4000; k++) {
            size_t len = msg_encode(buf, MSG_MAP_REQ, k, &q, sizeof q);
            if (send(fds[i], buf, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
                break; /* our socket is full */
        }
    }
    int rc = 0;
    double ms = slowest_open(20, &rc);
    cr_assert_eq(rc, 0, "an application failed: %s", fmem_strerror(rc));
    cr_assert_lt(ms, MAX_OPEN_MS, "an open took %.0f ms behind unread replies", ms);
    /* each flooder is dropped once it has not read for a while */
    unsigned dropped = 0;
    for (unsigned i = 0; i < FLOODERS; i++) {
        uint8_t in[MSG_MAX_BYTES];
        ssize_t n;
        uint64_t t0 = ring_now_ns();
        while ((n = sock_recv_timeout(fds[i], in, sizeof in, NULL, 0, NULL, 10000)) > 0 &&
               ring_now_ns() - t0 < 20000000000u)
            ;
        dropped += n == 0 || n == -1;
        close(fds[i]);
    }
    cr_assert_eq(dropped, FLOODERS, "flooders not dropped: %u of %u", FLOODERS - dropped, FLOODERS);
    cr_assert_eq(slowest_open(1, &rc) >= 0, 1, "service gone: %s", fmem_strerror(rc));
}

static int open_sessions(void *arg)
{
    const char *uri = arg;
    fmem_pool *p[4];
    for (int i = 0; i < 3; i++)
        if (fmem_open(uri, &p[i]))
            return 10 + i;
    int rc = fmem_open(uri, &p[3]);
    return rc == FMEM_EBUSY ? 0 : rc == 0 ? 20 : 30;
}

/* One user holds at most --max-apps-per-uid sessions; others still get in. */
Test(limits, one_user_cannot_take_every_session)
{
    need_root();
    start("--allow-uid 65534 --mode 0666 --max-apps-per-uid 3");
    cr_assert_eq(as_other_user(open_sessions, E.app_uri[0]), 0,
                 "the fourth session of one user must be refused with FMEM_EBUSY");
    fmem_pool *p[4];
    for (int i = 0; i < 3; i++)
        p[i] = env_app(&E, 0);
    for (int i = 0; i < 3; i++)
        fmem_close(p[i]);
}

/* fmemd out of file descriptors, held by idle connections: a new
 * application still gets in (an idle one is closed for it), the service
 * does not spin. */
Test(limits, out_of_descriptors)
{
    start(NULL);
    struct rlimit rl = {.rlim_cur = 64, .rlim_max = 64};
    cr_assert_eq(prlimit(E.fmemd[0], RLIMIT_NOFILE, &rl, NULL), 0, "%s", strerror(errno));
    int fds[100];
    unsigned n = idle_connections(fds, 100);
    cr_assert_eq(n, 100);
    env_nap_ms(300);
    int rc = 0;
    double ms = slowest_open(5, &rc);
    cr_assert_eq(rc, 0, "an application was refused: %s", fmem_strerror(rc));
    cr_assert_lt(ms, MAX_OPEN_MS, "an open took %.0f ms", ms);
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    /* not spinning on a listener it cannot accept from */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)E.fmemd[0]);
    unsigned long t0 = 0, t1 = 0;
    FILE *f = fopen(path, "r");
    cr_assert(f && fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu", &t0) == 1);
    fclose(f);
    env_nap_ms(1000);
    f = fopen(path, "r");
    cr_assert(f && fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu", &t1) == 1);
    fclose(f);
    cr_assert_lt(t1 - t0, 50, "fmemd used %lu ticks of 100 in one idle second", t1 - t0);
}

static int refused_opens(void *arg)
{
    const char *uri = arg;
    for (int i = 0; i < 50; i++) {
        fmem_pool *p;
        errno = 0;
        int rc = fmem_open(uri, &p);
        if (rc != FMEM_EACCES)
            return rc == 0 ? 1 : 2;
        if (errno != EACCES)
            return 3;
    }
    return 0;
}

/* What a refused peer reads: the reason, then the end of the connection. */
static int refused_raw(void *arg)
{
    const char *path = arg;
    int fd = sock_connect(path);
    if (fd < 0)
        return 10;
    env_nap_ms(100); /* the daemon has refused and closed by now */
    uint8_t in[MSG_MAX_BYTES];
    struct msg_app_hello h = {0};
    sock_send_msg(fd, MSG_APP_HELLO, 1, &h, sizeof h, NULL, 0); /* may meet a closed peer */
    ssize_t n = sock_recv_timeout(fd, in, sizeof in, NULL, 0, NULL, 2000);
    struct msg m;
    if (n <= 0 || msg_decode(in, (size_t)n, &m))
        return 11;
    if (m.type != MSG_ERROR || m.u.error.code != FMEM_EACCES ||
        !strstr(m.u.error.text, "may not use"))
        return 12;
    n = sock_recv_timeout(fd, in, sizeof in, NULL, 0, NULL, 2000);
    close(fd);
    return n == 0 || (n == -1 && errno == ECONNRESET) ? 0 : 13;
}

/* A user that is not admitted is told so: FMEM_EACCES from fmem_open,
 * every time, and the daemons' refusal text on the wire. */
Test(limits, refused_user_gets_a_clear_error)
{
    need_root();
    start("--mode 0666");
    cr_assert_eq(chmod(E.mnode_sock, 0666), 0);
    cr_assert_eq(as_other_user(refused_opens, E.app_uri[0]), 0,
                 "fmem_open by a refused user must fail with FMEM_EACCES and errno EACCES");
    cr_assert_eq(as_other_user(refused_raw, E.fmemd_sock[0]), 0, "fmemd's refusal");
    cr_assert_eq(as_other_user(refused_raw, E.mnode_sock), 0, "the memory node's refusal");
    fmem_pool *p = env_app(&E, 0); /* and the service goes on */
    fmem_close(p);
}

static int open_as_member(void *arg)
{
    fmem_pool *p;
    int rc = fmem_open(arg, &p);
    if (rc == 0)
        fmem_close(p);
    return rc == 0 ? 0 : rc == FMEM_EACCES ? 1 : 2;
}

/* --allow-gid admits members of the group, whether it is their primary
 * group or one of their supplementary groups, and takes a group name. */
Test(limits, group_members_are_admitted)
{
    need_root();
    start("--mode 0666 --allow-gid 4242");
    gid_t groups[1] = {4242};
    pid_t pid = fork();
    if (pid == 0) { /* a supplementary member */
        if (setgroups(1, groups) || setresgid(OTHER_UID, OTHER_UID, OTHER_UID) ||
            setresuid(OTHER_UID, OTHER_UID, OTHER_UID))
            _exit(99);
        _exit(open_as_member(E.app_uri[0]));
    }
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a supplementary member was refused (%d)",
              WEXITSTATUS(st));
    cr_assert_eq(as_other_user(open_as_member, E.app_uri[0]), 1, "a non-member was admitted");
    /* names: the group of nobody's is admitted by name, an unknown name refused */
    env_stop(&E);
    start("--mode 0666 --allow-gid nogroup");
    cr_assert_eq(as_other_user(open_as_member, E.app_uri[0]), 0, "nogroup by name");
}

/* Root (trusted, like fmemd's own user) is held to --max-apps only. */
Test(limits, root_is_held_to_max_apps_only)
{
    need_root();
    start("--max-apps-per-uid 2 --max-apps 5");
    fmem_pool *p[6];
    for (int i = 0; i < 5; i++)
        p[i] = env_app(&E, 0);
    cr_assert_eq(fmem_open(E.app_uri[0], &p[5]), FMEM_EBUSY, "the sixth session of five");
    for (int i = 0; i < 5; i++)
        fmem_close(p[i]);
}
