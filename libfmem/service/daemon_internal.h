/* daemon_internal.h - fmemd's state, shared by its parts: the control loop
 * (daemon.c), memory-node links (daemon_nodes.c), workers and request
 * handling (daemon_worker.c), application teardown (daemon_reaper.c) and
 * status (daemon_status.c). */
#ifndef FMEM_SVC_DAEMON_INTERNAL_H
#define FMEM_SVC_DAEMON_INTERNAL_H

#include <pthread.h>

#include "node.h"
#include "service/daemon.h"
#include "service/own.h"
#include "service/peer.h"
#include "service/ring.h"
#include "service/uidtab.h"

#define MAX_APPS_HARD 4096
#define MAX_WORKERS 64
#define WORKER_BATCH 16 /* requests per ring per pass: one flooding ring
                         * cannot starve the others */
#define WORKER_SPIN_MIN_NS 1000 /* an idle spin grows back from this */
#define PENDING_PER_UID 16 /* connections of one user before their hello */
#define PENDING_MAX 1024   /* of all users (fewer when descriptors are short) */

struct app {
    struct peer peer; /* its socket and credentials; control thread only */
    unsigned id;
    char name[MSG_NAME_MAX];
    struct ring_hdr *ring;
    struct worker *w;
    pthread_mutex_t mu; /* guards everything below */
    struct own_table own;
    uint64_t bytes, blocks;            /* held now */
    uint64_t allocs, frees, pings, errors, refused_quota;
    uint64_t refills, trims, revoked; /* its block cache (daemon_cache.c) */
    struct tp_trace ops;  /* memory operations issued for its requests */
    uint64_t max_retries; /* most CAS failures of one allocation for it */
    unsigned bad_socket_msgs; /* control thread only */
    struct app *next_dead;    /* the reaper's queue */
    /* per node with type-2B windows: the memory node's end of the
     * application's queue pair (RING_SET_QP), 0 not told yet */
    uint32_t app_qp[SVC_MAX_NODES];
};

struct worker {
    pthread_t thr;
    pthread_mutex_t mu; /* guards apps[] and the pass over them */
    struct app **apps;
    unsigned napps;
    _Atomic uint32_t kick; /* private futex: the app list changed, or quit */
    _Atomic int quit;
    _Atomic uint64_t served, sleeps;
    _Atomic uint64_t spin_ns; /* its idle spin now (it adapts) */
    struct fmemd *d;
};

struct dnode {
    const char *path;   /* memory node socket, or rdma://HOST:PORT?token=FILE */
    bool rdma;          /* reached over RDMA: no socket, no data file */
    bool mw2;           /* its memory node runs mw=type2: applications get
                         * type-2B windows bound to their queue pairs */
    char rdma_addr[MSG_RDMA_ADDR_MAX]; /* HOST:PORT, for applications */
    int fd;             /* -1 while disconnected (always, over RDMA) */
    unsigned uid;
    struct transport *tp;
    struct transport *hb_tp; /* over RDMA: queue pairs of the same session
                              * that only heartbeats use (NULL: tp's) */
    struct node *n;
    uint64_t data_bytes;
    uint64_t hb_seq, next_try_ns;
    char pool[64];
    unsigned heartbeat_ms;
    /* shm: the memory node's session table (handed to applications) and
     * our session in it */
    int sess_fd;
    uint64_t session;
    const _Atomic uint64_t *sess_words;
    uint64_t sess_nusers;
    void *sess_map;
    size_t sess_len;
};

struct fmemd {
    const struct fmemd_config *cfg;
    struct dnode nodes[SVC_MAX_NODES];
    unsigned nnodes;
    uint64_t max_block; /* largest data area of a node */
    _Atomic unsigned rr;
    struct worker workers[MAX_WORKERS];
    unsigned nworkers;
    /* control thread only: the socket, connections before their hello,
     * applications, and what each user holds of them */
    struct listener ls;
    struct peer *pend;
    unsigned npend, pend_cap;
    struct app **apps;
    unsigned napps, next_app_id, max_apps, max_apps_per_uid;
    struct uidtab uids;
    /* teardown of departed applications: a queue of any length (each
     * entry is the application itself), oldest first */
    pthread_t reaper;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    struct app *dead_head, *dead_tail;
    unsigned ndead, reaping;
    /* applications whose caches may be revoked when memory runs short */
    pthread_mutex_t cmu;
    struct app **capps;
    unsigned ncapps;
    _Atomic int quit;
    _Atomic uint64_t apps_reaped, blocks_reaped, bad_messages;
    uint64_t started_ns;
};

void dsay(const struct fmemd *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* daemon_nodes.c */
int nodes_connect_all(struct fmemd *d);
void nodes_heartbeat(struct fmemd *d);
void nodes_on_message(struct fmemd *d, unsigned i);
void nodes_reconnect(struct fmemd *d);
void nodes_close(struct fmemd *d);

/* daemon_worker.c */
int workers_start(struct fmemd *d);
void workers_stop(struct fmemd *d);
void worker_attach(struct worker *w, struct app *a);
void worker_detach(struct worker *w, struct app *a);
/* Allocate a block of 4 KiB << k for a (a->mu held); `reclaim`: at the
 * quota or out of memory, revoke cached blocks and try once more. */
int app_alloc(struct fmemd *d, struct app *a, unsigned k, bool reclaim, fmem_handle *out);
/* Free a decoded handle if a->own says it is a's (a->mu held). */
int app_free(struct fmemd *d, struct app *a, const fmem_handle *h);
/* Run one decoded request for application a (a->mu held). */
void handle_request(struct fmemd *d, struct app *a, const struct ring_req *req, struct ring_rsp *rsp);

/* daemon_mw2.c: type-2B windows for applications of a node with mw2 */
/* Bind a window over the block at `chunk` (2^k chunks) of node `node` to
 * the application's queue pair there: its key in *key. */
int app_bind2(struct fmemd *d, struct app *a, unsigned node, uint64_t chunk, unsigned k,
              uint32_t *key);
/* Invalidate the window of e (bound2) before its block is freed: the key
 * is dead when this returns 0. */
int app_revoke2(struct fmemd *d, unsigned node, struct own_entry *e);
/* Crash injection on the type-2 path, for tests: with FMEM_FMEMD_CRASH set
 * to a point's name ("bind", "free", "reap"), fmemd exits on the spot
 * (status 86) when it gets there (daemon_mw2.c). */
void mw2_crash_point(const char *name);

/* daemon_conns.c: the control thread's clients */
int conns_start(struct fmemd *d);
void conns_stop(struct fmemd *d);
void conns_accept(struct fmemd *d, uint64_t now);
/* A pending connection (before hello) has input or room for output.
 * false: it is gone from d->pend (index i now holds another). */
bool pending_event(struct fmemd *d, unsigned i, short revents, uint64_t now);
void app_event(struct fmemd *d, unsigned i, short revents, uint64_t now);
/* Drop idle pending connections and peers that do not read. */
void conns_expire(struct fmemd *d, uint64_t now);
/* Application i has left: off its worker, its blocks to the reaper. */
void app_gone(struct fmemd *d, unsigned i);

/* daemon_cache.c: the applications' block caches (a->mu held) */
/* Fill up to `want` empty entries of class k; 0 if at least one was. */
int cache_refill(struct fmemd *d, struct app *a, unsigned k, unsigned want, unsigned *filled);
/* Revoke the full entries of class k from entry `keep` on: blocks freed. */
unsigned cache_trim(struct fmemd *d, struct app *a, unsigned k, unsigned keep);
unsigned cache_revoke_all(struct fmemd *d, struct app *a);
/* Is h in one of a's full entries? */
bool cache_holds(const struct app *a, const fmem_handle *h);
/* Memory is short for `self`: revoke its cache and every other
 * application's whose lock is free. Blocks freed. */
unsigned caches_reclaim(struct fmemd *d, struct app *self);
/* The applications caches_reclaim() looks at (worker_attach / detach). */
void cache_register(struct fmemd *d, struct app *a);
void cache_unregister(struct fmemd *d, struct app *a);

/* daemon_reaper.c */
int reaper_start(struct fmemd *d);
void reaper_stop(struct fmemd *d);
void reaper_queue(struct fmemd *d, struct app *a);
void destroy_app(struct app *a);
/* Give back every block of `a` (a->mu held). Returns blocks freed. */
uint64_t app_release_all(struct fmemd *d, struct app *a);

/* daemon_status.c: 0, or -1 when the peer must be dropped */
int status_send(struct fmemd *d, struct peer *p, uint32_t seq);
int status_send_map(struct fmemd *d, struct peer *p, uint32_t seq, unsigned node, uint64_t now);

#endif
