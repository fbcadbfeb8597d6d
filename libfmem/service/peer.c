/* peer.c - non-blocking client connections of the daemons (peer.h). */
#include "service/peer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/ring.h" /* ring_now_ns */
#include "service/sock.h"

struct peer_msg {
    struct peer_msg *next;
    size_t len;
    unsigned char data[];
};

unsigned peer_fd_budget(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return rl.rlim_cur > 1u << 20 ? 1u << 20 : (unsigned)rl.rlim_cur;
}

int listener_open(struct listener *l, const char *path, unsigned mode)
{
    l->spare = -1;
    l->paused_until = 0;
    l->fd = sock_listen(path, mode);
    if (l->fd < 0)
        return -1;
    int fl = fcntl(l->fd, F_GETFL);
    if (fl < 0 || fcntl(l->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e = errno;
        listener_close(l, path);
        errno = e;
        return -1;
    }
    l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return 0;
}

void listener_close(struct listener *l, const char *path)
{
    if (l->fd >= 0) {
        close(l->fd);
        unlink(path);
    }
    if (l->spare >= 0)
        close(l->spare);
    l->fd = l->spare = -1;
}

void listener_shed(struct listener *l, uint64_t now)
{
    if (l->spare < 0) { /* the reserve was lost too: wait a little */
        l->paused_until = now + 100000000u;
        l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
        return;
    }
    close(l->spare);
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0)
        peer_refuse(fd, FMEM_EBUSY, "the service has no file descriptor left; try again later");
    l->spare = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

int listener_accept(struct listener *l, struct peer *p, uint64_t now)
{
    for (;;) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return errno == EMFILE || errno == ENFILE ? -1 : 0;
        }
        *p = (struct peer){.fd = fd, .active = now};
        if (sock_peer(fd, &p->pid, &p->uid, &p->gid) == 0)
            return 1;
        close(fd); /* no credentials: nothing to admit it by */
    }
}

void peer_refuse(int fd, int code, const char *text)
{
    sock_send_error(fd, 0, code, text);
    /* A close with unread data in our queue resets the connection; the
     * reply stays readable first, but a client is better served by an
     * orderly end after it. */
    char junk[64];
    for (int i = 0; i < 8; i++)
        if (recv(fd, junk, sizeof junk, MSG_DONTWAIT) <= 0)
            break;
    close(fd);
}

static int queue(struct peer *p, uint16_t type, uint32_t seq, const void *payload, size_t len)
{
    if (len > MSG_MAX_BYTES - sizeof(struct msg_hdr))
        return -1;
    size_t n = sizeof(struct msg_hdr) + len;
    if (p->out_bytes + n > PEER_OUT_MAX)
        return -1;
    struct peer_msg *m = malloc(sizeof *m + n);
    if (!m)
        return -1;
    m->next = NULL;
    m->len = msg_encode(m->data, type, seq, payload, len);
    if (p->out_tail)
        p->out_tail->next = m;
    else
        p->out = m;
    p->out_tail = m;
    p->out_bytes += m->len;
    return 0;
}

/* Send queued messages. 0: all sent; 1: the socket is full; -1: error. */
static int push(struct peer *p, uint64_t now)
{
    while (p->out) {
        struct peer_msg *m = p->out;
        if (sock_send(p->fd, m->data, m->len, NULL, 0) < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                return -1;
            if (!p->stalled)
                p->stalled = now;
            return 1;
        }
        p->out = m->next;
        if (!p->out)
            p->out_tail = NULL;
        p->out_bytes -= m->len;
        free(m);
        p->stalled = 0; /* progress */
        p->active = now;
    }
    return 0;
}

int peer_send(struct peer *p, uint16_t type, uint32_t seq, const void *payload, size_t len)
{
    if (queue(p, type, seq, payload, len) < 0)
        return -1;
    return push(p, ring_now_ns()) < 0 ? -1 : 0;
}

int peer_send_error(struct peer *p, uint32_t seq, int code, const char *text)
{
    struct msg_error e = {.code = code};
    size_t i = 0;
    for (; text && text[i] && i + 1 < sizeof e.text; i++)
        e.text[i] = text[i];
    e.text[i] = 0;
    return peer_send(p, MSG_ERROR, seq, &e, sizeof e);
}

/* Queue one part of a stream: peer_send without pushing (the stream's
 * next() runs inside peer_flush, which pushes). */
int peer_queue(struct peer *p, uint16_t type, uint32_t seq, const void *payload, size_t len)
{
    return queue(p, type, seq, payload, len);
}

static void end_stream(struct peer *p)
{
    if (p->stream) {
        p->stream->release(p->stream);
        p->stream = NULL;
    }
}

int peer_flush(struct peer *p, uint64_t now)
{
    for (;;) {
        int r = push(p, now);
        if (r != 0)
            return r;
        if (!p->stream)
            return 0;
        if (!p->stream->next(p, p->stream)) {
            end_stream(p);
            return 0;
        }
    }
}

int peer_stream(struct peer *p, struct peer_stream *s, uint64_t now)
{
    if (p->stream) { /* one at a time: requests are not read meanwhile */
        s->release(s);
        return -1;
    }
    p->stream = s;
    return peer_flush(p, now) < 0 ? -1 : 0;
}

void peer_close(struct peer *p)
{
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    while (p->out) {
        struct peer_msg *m = p->out;
        p->out = m->next;
        free(m);
    }
    p->out_tail = NULL;
    p->out_bytes = 0;
    end_stream(p);
}
