/* daemon.h - the allocation service (fmemd), one per compute node: the only
 * process there that reads or writes allocation metadata. It registers
 * with one or more memory nodes, and serves local applications: a UNIX
 * socket handshake, then a shared-memory request ring per application
 * served by one worker thread per core. It records which application holds
 * which block and frees them all when the application goes away. */
#ifndef FMEM_SVC_DAEMON_H
#define FMEM_SVC_DAEMON_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "service/proto.h"

struct fmemd_config {
    const char *socket_path;                   /* where applications connect */
    unsigned socket_mode;                      /* default 0660 */
    const char *mnode_sockets[SVC_MAX_NODES];  /* memory nodes, in node order */
    unsigned nmnodes;
    unsigned workers;          /* 0: one per online core */
    uint64_t app_max_bytes;    /* per-application quota, 0: none */
    uint64_t app_max_allocs;   /* 0: none */
    unsigned max_apps;         /* default 256 */
    unsigned max_apps_per_uid; /* sessions of one user; 0: max_apps / 4 */
    uint64_t spin_ns;          /* a worker spins at most this long before sleeping */
    unsigned worker_rt_prio;   /* SCHED_FIFO priority of the workers, 0: none */
    unsigned connect_ms;       /* how long to wait for the memory nodes */
    uid_t allow_uid;           /* besides root and our uid; -1: none */
    gid_t allow_gid;           /* -1: none */
    const char *name;          /* shown by fmem status */
    bool verbose;
    _Atomic int *stop;
};

int fmemd_run(const struct fmemd_config *cfg);

#endif
