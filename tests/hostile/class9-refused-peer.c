/* class9-refused-peer - a peer that SO_PEERCRED does not admit is told so
 * (class 9 of the hardening issue), played against real daemons.
 *
 * Both sockets are world-writable (mode 0666), so admission rests on
 * SO_PEERCRED alone; uid 65534 is not on either daemon's list. As that
 * user: fmem_open fails with FMEM_EACCES (errno EACCES) every time, never
 * with a reset connection; a raw client that connects, waits until the
 * daemon has refused and closed, then speaks, still reads the reason;
 * `fmem status` prints it; the Python binding raises its access error.
 * The service goes on serving admitted users throughout. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "hostile.h"
#include "service/proto.h"
#include "service/sock.h"
#include "test_service_env.h"

#define OPENS 200

static struct svc_env E;

static int refused_opens(void *arg)
{
    (void)arg;
    unsigned eacces = 0, other = 0;
    int first = 0;
    for (int i = 0; i < OPENS; i++) {
        fmem_pool *p;
        errno = 0;
        int rc = fmem_open(E.app_uri[0], &p);
        if (rc == FMEM_EACCES && errno == EACCES) {
            eacces++;
        } else {
            if (!other++)
                first = rc;
            if (rc == 0)
                fmem_close(p);
        }
    }
    if (other)
        fprintf(stderr, "  %u of %d opens did not fail with FMEM_EACCES/EACCES (first: %d %s)\n",
                other, OPENS, first, fmem_strerror(first));
    return other ? 1 : 0;
}

/* Connect, let the daemon refuse and close, then speak: the reason is
 * still there to read, then the end of the connection. */
static int late_speaker(void *arg)
{
    const char *path = arg;
    int fd = sock_connect(path);
    if (fd < 0)
        return 10;
    env_nap_ms(200);
    struct msg_app_hello h = {0};
    sock_send_msg(fd, MSG_APP_HELLO, 1, &h, sizeof h, NULL, 0); /* EPIPE: that is fine */
    uint8_t in[MSG_MAX_BYTES];
    ssize_t n = sock_recv_timeout(fd, in, sizeof in, NULL, 0, NULL, 2000);
    struct msg m;
    if (n <= 0 || msg_decode(in, (size_t)n, &m) || m.type != MSG_ERROR) {
        fprintf(stderr, "  %s: no refusal to read (%zd, %s)\n", path, n, strerror(errno));
        return 11;
    }
    if (m.u.error.code != FMEM_EACCES || !strstr(m.u.error.text, "65534 may not use")) {
        fprintf(stderr, "  %s: refusal %d '%s'\n", path, m.u.error.code, m.u.error.text);
        return 12;
    }
    fprintf(stderr, "  %s says: %s\n", path, m.u.error.text);
    close(fd);
    return 0;
}

static int status_as_refused(void *arg)
{
    const char *sock = arg;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "'%s/tools/fmem' status 'unix:%s' 2>&1 | grep -q 'may not use'",
             getenv("top_builddir") ? getenv("top_builddir") : ".", sock);
    return system(cmd) == 0 ? 0 : 1;
}

static int python_as_refused(void *arg)
{
    (void)arg;
    char cmd[1024];
    const char *b = getenv("top_builddir") ? getenv("top_builddir") : ".";
    snprintf(cmd, sizeof cmd,
             "'%s/bindings/python/pyrun' -c \"import fmem, errno\n"
             "try:\n    fmem.open('%s')\nexcept PermissionError as e:\n"
             "    assert e.errno == errno.EACCES, e.errno\n    print('python:', e)\n"
             "else:\n    raise SystemExit('opened')\" >&2",
             b, E.app_uri[0]);
    return system(cmd) == 0 ? 0 : 1;
}

int main(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "needs root to play a user that is not admitted\n");
        return HOSTILE_SKIP;
    }
    hostile_watchdog(120, "a refused client waited for an answer that did not come");
    if (!env_start(&E, 1, "--mode 0666")) {
        env_dump_logs(&E);
        env_stop(&E);
        fprintf(stderr, "  daemons did not start\n");
        return 1;
    }
    chmod(E.dir, 0711);
    chmod(E.mnode_sock, 0666);
    CHECK(hostile_as_user(HOSTILE_UID, refused_opens, NULL) == 0,
          "fmem_open by a refused user must fail with FMEM_EACCES, errno EACCES, every time");
    CHECK(hostile_as_user(HOSTILE_UID, late_speaker, E.fmemd_sock[0]) == 0,
          "fmemd's refusal cannot be read");
    CHECK(hostile_as_user(HOSTILE_UID, late_speaker, E.mnode_sock) == 0,
          "the memory node's refusal cannot be read");
    CHECK(hostile_as_user(HOSTILE_UID, status_as_refused, E.fmemd_sock[0]) == 0,
          "fmem status does not print fmemd's refusal");
    CHECK(hostile_as_user(HOSTILE_UID, status_as_refused, E.mnode_sock) == 0,
          "fmem status does not print the memory node's refusal");
    char pyrun[512];
    snprintf(pyrun, sizeof pyrun, "%s/bindings/python/stage/fmem/__init__.py",
             getenv("top_builddir") ? getenv("top_builddir") : ".");
    if (access(pyrun, R_OK) == 0)
        CHECK(hostile_as_user(HOSTILE_UID, python_as_refused, NULL) == 0,
              "Python's fmem.open does not raise PermissionError (EACCES)");
    else
        NOTE("python module not built: its part skipped");
    fmem_pool *p;
    int rc = fmem_open(E.app_uri[0], &p);
    CHECK(rc == 0, "an admitted user cannot open: %s", fmem_strerror(rc));
    if (rc == 0)
        fmem_close(p);
    if (hostile_failures)
        env_dump_logs(&E);
    env_stop(&E);
    return hostile_result();
}
