/* transport_verbs.h - RDMA verbs transport (client) and the memory-node
 * side that serves a pool over RDMA. Built when configure finds rdma-core. */
#ifndef FMEM_TRANSPORT_VERBS_H
#define FMEM_TRANSPORT_VERBS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "transport.h"

#include "verbs/verbs_proto.h"

struct verbs_connect_params {
    const char *host, *port;
    const char *src;        /* local address to connect from (device), or NULL */
    enum verbs_role role;
    const char *token_path; /* services: file holding the node's token */
    uint64_t session;       /* services: 0 for a fresh random one */
};
/* Connect to the memory node at host:port (librdmacm). */
int verbs_transport_connect(const struct verbs_connect_params *p, struct transport **out);
/* The memory node's own loopback connection, made before its windows were
 * bound: use these keys for the metadata and the key table from now on. */
void verbs_transport_set_keys(struct transport *t, uint32_t meta_rkey, uint32_t wk_rkey);
/* The region key the memory node reported (it grants no remote access). */
uint32_t verbs_transport_mr_rkey(const struct transport *t);
/* Requests the NIC refused with a remote access error (the responder
 * checked the key and range), since the transport was opened. */
uint64_t verbs_transport_refused(struct transport *t);
/* A service's session id (what the memory node fences), 0 for others. */
uint64_t verbs_transport_session(const struct transport *t);
/* Has the memory node refused to reconnect us because it fenced our
 * session? Every later operation fails. */
bool verbs_transport_fenced(struct transport *t);
/* The calling thread's work requests on verbs transports (chained and
 * held posts), its ibv_post_send calls (each a system call on soft-RoCE)
 * and its time from posting each chain to its completion, since it
 * started: for profiles (bench/fmem-rdmabench). */
struct verbs_prof {
    uint64_t wrs, wait_ns, posts;
    uint64_t trails; /* of wrs, trailing requests not waited for (tp_op.trail) */
};
void verbs_transport_thread_prof(struct verbs_prof *out);
int verbs_token_read(const char *path, uint8_t token[VERBS_TOKEN_BYTES]);

/* Type-2B windows (a memory node started with mw=type2; FMEM_ENOTSUP on
 * others). The memory node's window type, and the number of its end of
 * the queue pair the calling thread uses on this transport (what a service
 * binds an application's windows to). */
unsigned verbs_transport_mw_type(const struct transport *t);
uint32_t verbs_transport_peer_qp(struct transport *t);
/* Services: bind a type-2B window over [off, off + len) of the pool (data
 * only) to the application connection whose memory-node end is app_qp;
 * its key works from that queue pair only. One round trip to the memory
 * node plus its bind. */
int verbs_transport_bind2(struct transport *t, uint64_t off, uint64_t len, uint32_t app_qp,
                          uint32_t *rkey);
/* Services: invalidate a key bind2 returned, with a SEND_WITH_INV (the
 * memory node's NIC kills it before acknowledging). Once per key. */
int verbs_transport_revoke2(struct transport *t, uint32_t rkey);

struct verbs_server;
/* Register the pool mapped by `pool` (a shm transport: metadata and data
 * back to back) as one memory region, bind a window over every aligned
 * block (two: main and backup), write a fresh token to token_path (mode
 * 0600) and listen on addr:port. Returns when the windows are bound. */
#define VERBS_SERVER_MW_TYPE2 1u /* flags: mw=type2 (verbs_mw2.c) */
int verbs_server_start(struct transport *pool, const char *addr, const char *port,
                       const char *token_path, unsigned flags, struct verbs_server **out);
/* Figures of the window regenerator. */
struct verbs_server_stats {
    uint64_t windows;      /* bound now */
    uint64_t regenerated;  /* windows destroyed and re-bound after frees */
    uint64_t passes;       /* scans of the window-key table */
    uint64_t regen_ns;     /* time spent in passes that found work */
    uint64_t setup_ns;     /* binding every window at start */
    uint64_t quarantined;  /* freed blocks released from quarantine (their
                            * old window destroyed, then freed in the layer) */
    unsigned mw_type;      /* 2: mw=type2 */
    uint64_t mw2_binds, mw2_revokes; /* type-2B windows bound, invalidated */
};
void verbs_server_get_stats(struct verbs_server *s, struct verbs_server_stats *st);
/* The heartbeat word of user id `uid` (wkeys.h), 0 if never written. */
uint64_t verbs_server_heartbeat(struct verbs_server *s, unsigned uid);
/* User uid's session word (wkeys.h), 0 if never written. */
uint64_t verbs_server_session(struct verbs_server *s, unsigned uid);
/* Fence a service's session: shut its queue pairs (requests already at
 * the NIC fail, none is served after this returns) and refuse it from now
 * on. Returns the number of connections shut. */
unsigned verbs_server_fence(struct verbs_server *s, uint64_t session);
/* Serve connection events until *stop becomes nonzero. */
int verbs_server_run(struct verbs_server *s, atomic_int *stop);
void verbs_server_stop(struct verbs_server *s);

#endif
