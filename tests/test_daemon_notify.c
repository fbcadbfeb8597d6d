/* test_daemon_notify.c - readiness notification for systemd (Type=notify):
 * each daemon sends READY=1 to $NOTIFY_SOCKET once its socket accepts
 * connections, and STOPPING=1 when it shuts down; a file system path and
 * an abstract name both work. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "service/sock.h"
#include "test_service_env.h"

static struct svc_env E;
static char ndir[64];

static void teardown(void)
{
    unsetenv("NOTIFY_SOCKET");
    env_stop(&E);
    if (ndir[0]) {
        char p[128];
        snprintf(p, sizeof p, "%s/notify", ndir);
        unlink(p);
        rmdir(ndir);
    }
}

TestSuite(notify, .fini = teardown, .timeout = 60);

/* A datagram socket like systemd's, with senders' credentials. */
static int notify_socket(const char *name, bool abstract)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(name);
    memcpy(a.sun_path, name, len);
    if (abstract)
        a.sun_path[0] = 0;
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + len), 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    setenv("NOTIFY_SOCKET", name, 1);
    return fd;
}

/* Wait for a notification; its text, and the sender's pid. */
static bool notification(int fd, char *text, size_t cap, pid_t *from)
{
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    union {
        char b[CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } c;
    struct iovec iov = {.iov_base = text, .iov_len = cap - 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b,
                        .msg_controllen = sizeof c.b};
    ssize_t n = recvmsg(fd, &mh, 0);
    if (n < 0)
        return false;
    text[n] = 0;
    *from = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cr;
            memcpy(&cr, CMSG_DATA(cm), sizeof cr);
            *from = cr.pid;
        }
    return true;
}

Test(notify, ready_once_serving_and_stopping_on_the_way_out)
{
    snprintf(ndir, sizeof ndir, "/tmp/fmem-notify-XXXXXX");
    cr_assert_not_null(mkdtemp(ndir));
    char path[128], text[256];
    snprintf(path, sizeof path, "%s/notify", ndir);
    int nfd = notify_socket(path, false);
    env_start_or_fail(&E, 0, NULL);
    pid_t from;
    cr_assert(notification(nfd, text, sizeof text, &from), "no word from the memory node");
    cr_assert_eq(from, E.mnode);
    cr_assert_not_null(strstr(text, "READY=1"), "%s", text);

    /* fmemd, told through an abstract socket; it is ready when it says so */
    char name[64];
    snprintf(name, sizeof name, "@fmem-notify-%d", (int)getpid());
    int afd = notify_socket(name, true);
    snprintf(E.fmemd_sock[0], sizeof E.fmemd_sock[0], "%s/fmemd0.sock", E.dir);
    snprintf(E.app_uri[0], sizeof E.app_uri[0], "unix:%s", E.fmemd_sock[0]);
    E.nfmemd = 1;
    cr_assert(env_start_fmemd(&E, 0, NULL));
    cr_assert(notification(afd, text, sizeof text, &from), "no word from fmemd");
    cr_assert_eq(from, E.fmemd[0]);
    cr_assert_not_null(strstr(text, "READY=1"), "%s", text);
    int c = sock_connect(E.fmemd_sock[0]);
    cr_assert_geq(c, 0, "ready, but its socket does not accept");
    close(c);

    kill(E.fmemd[0], SIGTERM);
    cr_assert(notification(afd, text, sizeof text, &from));
    cr_assert_eq(from, E.fmemd[0]);
    cr_assert_not_null(strstr(text, "STOPPING=1"), "%s", text);
    env_stop_pid(&E.fmemd[0], SIGTERM);
    kill(E.mnode, SIGTERM);
    cr_assert(notification(nfd, text, sizeof text, &from));
    cr_assert_not_null(strstr(text, "STOPPING=1"), "%s", text);
    close(afd);
    close(nfd);
}
