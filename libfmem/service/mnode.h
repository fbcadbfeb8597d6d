/* mnode.h - the memory node daemon (fmem-mnode): owns one pool, hands it to
 * the allocation services that register (their user ids, the pool's files
 * over the socket), refills revoked keys in the background, watches the
 * services' heartbeats and recovers the user id of one that dies. */
#ifndef FMEM_SVC_MNODE_H
#define FMEM_SVC_MNODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct node;

struct mnode_config {
    const char *pool_uri;      /* shm:/NAME?size=... or file:/PATH?size=... */
    const char *socket_path;   /* where services and fmem status connect */
    unsigned socket_mode;      /* file mode of the socket (default 0660) */
    unsigned heartbeat_ms;     /* expected heartbeat period (default 1000) */
    unsigned miss_limit;       /* missed heartbeats that mean death (3) */
    unsigned regen_ms;         /* regenerator scan period (default 100) */
    unsigned sweep_ms;         /* dead-user sweep period (default 5000) */
    bool no_fence;             /* do not SIGKILL a silent service first */
    uid_t allow_uid;           /* besides root and our own uid; -1: none */
    const char *rdma_addr;     /* ADDR:PORT: serve the pool over RDMA verbs */
    const char *token_path;    /*  and write the services' token here */
    bool mw_type2;             /*  applications' windows are type 2B, bound to
                                *  their queue pair (--mw type2) */
    bool verbose;
    _Atomic int *stop;         /* set non-zero to shut down cleanly */
};

/* Run until *cfg->stop. Returns 0 on clean shutdown, else an exit code. */
int mnode_run(const struct mnode_config *cfg);

/* ---- key regeneration (mnode_regen.c) ----------------------------------- */
struct regen_stats {
    _Atomic uint64_t keys;      /* backup keys issued */
    _Atomic uint64_t scans;     /* full passes over the capability table */
    _Atomic uint64_t work_ns;   /* time spent in passes that issued keys */
    _Atomic uint64_t last_keys; /* keys issued by the last pass */
};
/* One pass over the capability table of n: give every entry whose backup
 * key is empty a fresh one. Returns the keys issued. */
uint64_t regen_pass(struct node *n, struct regen_stats *st);

#endif
