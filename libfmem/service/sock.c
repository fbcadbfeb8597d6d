/* sock.c - UNIX SEQPACKET sockets, fd passing and peer credentials. */
#include "service/sock.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "service/proto.h"

static int make_addr(const char *path, struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    if (!path || strlen(path) >= sizeof a->sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    strcpy(a->sun_path, path);
    return 0;
}

int sock_listen(const char *path, unsigned mode)
{
    struct sockaddr_un a;
    if (make_addr(path, &a) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* replace a stale socket file, but never a live daemon's */
    int probe = sock_connect(path);
    if (probe >= 0) {
        close(probe);
        close(fd);
        errno = EADDRINUSE;
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    /* Bind and listen under a private name, then link it into place: the
     * path appears only once connects to it succeed, so a client that waits
     * for the file never meets ECONNREFUSED. link() never replaces what is
     * there (another daemon that won the race, a file that is no socket).
     * The private name is bound with a restrictive umask and widened to
     * `mode` before it is published. */
    struct sockaddr_un t = a;
    int n = snprintf(t.sun_path, sizeof t.sun_path, "%s.%d", path, (int)getpid());
    bool staged = n > 0 && (size_t)n < sizeof t.sun_path;
    if (!staged)
        t = a;
    else if (lstat(t.sun_path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(t.sun_path); /* left by a crashed daemon with our pid */
    mode_t old = umask(0077);
    int rc = bind(fd, (struct sockaddr *)&t, sizeof t);
    umask(old);
    if (rc == 0 && (chmod(t.sun_path, mode) < 0 || listen(fd, 64) < 0 ||
                    (staged && link(t.sun_path, path) < 0))) {
        int e = errno == EEXIST ? EADDRINUSE : errno;
        unlink(t.sun_path);
        errno = e;
        rc = -1;
    } else if (rc == 0 && staged) {
        unlink(t.sun_path);
    }
    if (rc < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int sock_connect(const char *path)
{
    struct sockaddr_un a;
    if (make_addr(path, &a) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int send_flags(int fd, const void *buf, size_t len, const int *fds, unsigned nfds,
                      int flags);

int sock_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds)
{
    return send_flags(fd, buf, len, fds, nfds, 0);
}

static int send_flags(int fd, const void *buf, size_t len, const int *fds, unsigned nfds,
                      int flags)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    union {
        char b[CMSG_SPACE(sizeof(int) * SVC_MAX_FDS)];
        struct cmsghdr align;
    } c;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > SVC_MAX_FDS) {
        errno = EINVAL;
        return -1;
    }
    if (nfds) {
        memset(&c, 0, sizeof c);
        mh.msg_control = c.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    }
    for (;;) {
        ssize_t r = sendmsg(fd, &mh, MSG_NOSIGNAL | flags);
        if (r == (ssize_t)len)
            return 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r >= 0)
            errno = EMSGSIZE;
        return -1;
    }
}

/* Keep up to max_fds of the received fds, close the rest. */
static unsigned take_fds(struct msghdr *mh, int *fds, unsigned max_fds)
{
    unsigned kept = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int f;
            memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof f);
            if (fds && kept < max_fds)
                fds[kept++] = f;
            else
                close(f);
        }
    }
    return kept;
}

ssize_t sock_recv(int fd, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds)
{
    struct iovec iov = {.iov_base = buf, .iov_len = cap};
    union {
        char b[CMSG_SPACE(sizeof(int) * SVC_MAX_FDS)];
        struct cmsghdr align;
    } c;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.b,
                        .msg_controllen = sizeof c.b};
    if (nfds)
        *nfds = 0;
    ssize_t r;
    do
        r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    unsigned kept = take_fds(&mh, fds, max_fds);
    if ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || (r == 0 && kept)) {
        for (unsigned i = 0; i < kept; i++)
            close(fds[i]);
        return (mh.msg_flags & MSG_CTRUNC) && !(mh.msg_flags & MSG_TRUNC) ? -1 : -2;
    }
    if (nfds)
        *nfds = kept;
    return r;
}

ssize_t sock_recv_timeout(int fd, void *buf, size_t cap, int *fds, unsigned max_fds,
                          unsigned *nfds, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, timeout_ms);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return -1;
    if (r == 0)
        return -3;
    return sock_recv(fd, buf, cap, fds, max_fds, nfds);
}

int sock_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid)
{
    struct ucred cr;
    socklen_t l = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
        return -1;
    if (pid) *pid = cr.pid;
    if (uid) *uid = cr.uid;
    if (gid) *gid = cr.gid;
    return 0;
}

bool sock_peer_in_group(int fd, gid_t g)
{
    gid_t small[64], *gids = small;
    socklen_t len = sizeof small;
    bool in = false;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, gids, &len) < 0) {
        if (errno != ERANGE || !(gids = malloc(len)) ||
            getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, gids, &len) < 0)
            len = 0;
    }
    for (size_t i = 0; i < len / sizeof *gids; i++)
        in |= gids[i] == g;
    if (gids != small)
        free(gids);
    return in;
}

static int send_msg(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen,
                    const int *fds, unsigned nfds, int flags)
{
    if (plen > MSG_MAX_BYTES - sizeof(struct msg_hdr)) {
        errno = EMSGSIZE;
        return -1;
    }
    /* a heap buffer: a thread-local one this large would be added to every
     * thread of every program linking libfmem */
    char *buf = malloc(sizeof(struct msg_hdr) + plen);
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    size_t n = msg_encode(buf, type, seq, p, plen);
    int rc = send_flags(fd, buf, n, fds, nfds, flags);
    int e = errno;
    free(buf);
    errno = e;
    return rc;
}

int sock_send_msg(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen,
                  const int *fds, unsigned nfds)
{
    return send_msg(fd, type, seq, p, plen, fds, nfds, 0);
}

int sock_reply_msg(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen,
                   const int *fds, unsigned nfds)
{
    return send_msg(fd, type, seq, p, plen, fds, nfds, MSG_DONTWAIT);
}

/* The first message back. A peer that closed with our request unread
 * leaves ECONNRESET pending, which the kernel reports before the messages
 * the peer sent before closing (its reason): read once more after it. */
static ssize_t recv_answer(int fd, void *buf, size_t cap, int *fds, unsigned max_fds,
                           unsigned *nfds, int timeout_ms)
{
    ssize_t n = sock_recv_timeout(fd, buf, cap, fds, max_fds, nfds, timeout_ms);
    if (n == -1 && errno == ECONNRESET) {
        n = sock_recv_timeout(fd, buf, cap, fds, max_fds, nfds, 0);
        if (n == 0 || n == -1 || n == -3) {
            errno = ECONNRESET;
            return -1;
        }
    }
    return n;
}

ssize_t sock_ask(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen, void *buf,
                 size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int timeout_ms)
{
    if (nfds)
        *nfds = 0;
    if (sock_send_msg(fd, type, seq, p, plen, NULL, 0) < 0) {
        int e = errno;
        if (e != EPIPE && e != ECONNRESET)
            return -1;
        /* refused before we spoke: the reason is waiting, if it was sent */
        ssize_t n = recv_answer(fd, buf, cap, fds, max_fds, nfds, 0);
        if (n > 0 || n == -2)
            return n;
        errno = e;
        return -1;
    }
    return recv_answer(fd, buf, cap, fds, max_fds, nfds, timeout_ms);
}

int sock_send_error(int fd, uint32_t seq, int code, const char *text)
{
    struct msg_error e = {.code = code};
    snprintf(e.text, sizeof e.text, "%s", text ? text : "");
    return sock_reply_msg(fd, MSG_ERROR, seq, &e, sizeof e, NULL, 0);
}
