/* peer.h - a daemon's client connections: accepting without ever blocking
 * or spinning, and replies that never make the daemon wait.
 *
 * A daemon serves all its clients from one thread, so it must not wait for
 * any of them. Every accepted socket is non-blocking. A reply that does not
 * fit into the socket waits in the peer's outbox; while it waits the daemon
 * reads nothing more from that peer (it cannot pile up replies), and a peer
 * whose outbox makes no progress for PEER_STALL_NS is dropped: it is not
 * reading. Large replies (the occupancy map) are produced part by part as
 * the socket drains, so a peer costs at most PEER_OUT_MAX bytes here. */
#ifndef FMEM_SVC_PEER_H
#define FMEM_SVC_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "service/proto.h"

#define PEER_STALL_NS 2000000000u            /* a reply waits this long at most */
#define PEER_OUT_MAX (2 * (size_t)MSG_MAX_BYTES) /* queued bytes per peer */

struct peer;
struct peer_msg; /* one queued datagram */

/* A reply made of parts, produced as the socket drains. */
struct peer_stream {
    /* Queue the next part with peer_send(). false: nothing is left (or the
     * part could not be queued); the stream is then released. */
    bool (*next)(struct peer *p, struct peer_stream *s);
    void (*release)(struct peer_stream *s);
};

struct peer {
    int fd;
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint64_t active; /* accepted, last request read or reply sent (ns) */
    struct peer_msg *out, *out_tail;
    size_t out_bytes;
    uint64_t stalled; /* since when a reply waits for room; 0: none waits */
    struct peer_stream *stream;
};

/* A listening socket, non-blocking, and one descriptor held in reserve:
 * when the process runs out of descriptors, the reserve is given up to
 * accept and refuse the waiting connection, so that the listening socket
 * neither stays readable forever (a busy loop) nor leaves clients hanging
 * in the backlog. */
struct listener {
    int fd;
    int spare;
    uint64_t paused_until; /* out of descriptors, reserve included */
};

/* Descriptors this process may use: the soft limit raised to the hard one
 * (a daemon's connections are bounded by it). */
unsigned peer_fd_budget(void);

/* Listen on path (sock_listen). 0, or -1 (errno). */
int listener_open(struct listener *l, const char *path, unsigned mode);
void listener_close(struct listener *l, const char *path);
/* Accept one waiting connection with its credentials into *p (fd
 * non-blocking and close-on-exec, active set to now). 1: *p is
 * filled; 0: none is waiting; -1: no descriptor is left (the caller may
 * close one of its own connections and try again, or listener_shed()). */
int listener_accept(struct listener *l, struct peer *p, uint64_t now);
/* Out of descriptors: take the first waiting connection off the backlog
 * with the reserve descriptor and refuse it (EBUSY), so that it neither
 * hangs nor keeps the listener readable; without a reserve, pause. */
void listener_shed(struct listener *l, uint64_t now);

/* Do not poll the listener now: no descriptor is left to accept with. */
static inline bool listener_paused(const struct listener *l, uint64_t now)
{
    return now < l->paused_until;
}

/* Refuse a connection that is not kept: say why (one MSG_ERROR, without
 * waiting), discard what it already sent (so that closing does not reset
 * the connection under the reply), and close it. */
void peer_refuse(int fd, int code, const char *text);

/* Send a message now, or queue it behind what already waits. 0, or -1:
 * the peer must be dropped (socket error, or outbox beyond PEER_OUT_MAX). */
int peer_send(struct peer *p, uint16_t type, uint32_t seq, const void *payload, size_t len);
int peer_send_error(struct peer *p, uint32_t seq, int code, const char *text);
/* Queue without sending: for a stream's next(), which peer_flush runs. */
int peer_queue(struct peer *p, uint16_t type, uint32_t seq, const void *payload, size_t len);
/* Start a reply made of parts (the peer owns s from here on). 0 or -1. */
int peer_stream(struct peer *p, struct peer_stream *s, uint64_t now);
/* Push out what waits. 0: nothing waits any more; 1: some waits for room
 * (poll for POLLOUT); -1: drop the peer. */
int peer_flush(struct peer *p, uint64_t now);
/* Something waits to be sent: do not read the peer's next request yet. */
static inline bool peer_busy(const struct peer *p)
{
    return p->out != NULL || p->stream != NULL;
}
/* Time from `then` to `now`; 0 when `then` was taken after `now` (the
 * loop's clock is read once per turn, events may stamp later). */
static inline uint64_t peer_since(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}
/* The peer has not made room for a waiting reply for PEER_STALL_NS. */
static inline bool peer_stalled(const struct peer *p, uint64_t now)
{
    return p->stalled && peer_since(now, p->stalled) > PEER_STALL_NS;
}
/* Close the socket and free what waits. */
void peer_close(struct peer *p);

#endif
