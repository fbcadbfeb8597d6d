/* sock.h - UNIX SOCK_SEQPACKET sockets of the service: listen with a file
 * mode, connect, send and receive one message with file descriptors
 * (SCM_RIGHTS), and the peer's credentials (SO_PEERCRED). */
#ifndef FMEM_SVC_SOCK_H
#define FMEM_SVC_SOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Listen on `path` (an old socket file there is replaced) with permissions
 * `mode`. Returns the fd or -1 (errno). */
int sock_listen(const char *path, unsigned mode);
/* Connect to `path`. Returns the fd or -1 (errno). */
int sock_connect(const char *path);
/* Send one message with `nfds` fds. 0 or -1 (errno). */
int sock_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds);
/* Receive one message into buf (cap bytes) and up to `max_fds` fds; fds
 * beyond that, and all fds when `fds` is NULL, are closed. Returns the
 * message length, 0 on orderly close, -1 on error (errno), or -2 if the
 * message was larger than `cap` (it is dropped whole). *nfds: fds kept. */
ssize_t sock_recv(int fd, void *buf, size_t cap, int *fds, unsigned max_fds, unsigned *nfds);
/* Like sock_recv, waiting at most timeout_ms (-1: forever); -3 on timeout. */
ssize_t sock_recv_timeout(int fd, void *buf, size_t cap, int *fds, unsigned max_fds,
                          unsigned *nfds, int timeout_ms);
/* Send a request and wait (timeout_ms) for the first message back, as
 * sock_recv_timeout. A server that refused us as we connected has left its
 * reason in the socket and closed it: whether the request then fails
 * (EPIPE) or the connection reads as reset (our request was unread), that
 * reason is returned as the answer. */
ssize_t sock_ask(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen, void *buf,
                 size_t cap, int *fds, unsigned max_fds, unsigned *nfds, int timeout_ms);
/* Credentials of the connected peer. 0 or -1. */
int sock_peer(int fd, pid_t *pid, uid_t *uid, gid_t *gid);
/* Is g among the connected peer's supplementary groups (SO_PEERGROUPS,
 * as they were when it connected)? */
bool sock_peer_in_group(int fd, gid_t g);

/* Send a message of `type` (proto.h) with payload p. 0 or -1. */
int sock_send_msg(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen,
                  const int *fds, unsigned nfds);
/* The same without waiting: a peer that does not read its socket loses
 * the reply (-1, EAGAIN) instead of holding up the sender. */
int sock_reply_msg(int fd, uint16_t type, uint32_t seq, const void *p, size_t plen,
                   const int *fds, unsigned nfds);
/* Send MSG_ERROR with code and text (without waiting). */
int sock_send_error(int fd, uint32_t seq, int code, const char *text);

#endif
