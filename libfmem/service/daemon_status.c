/* daemon_status.c - fmemd's answers to fmem status: its status records
 * (status_wire.h: counters, memory nodes, applications, workers) and a
 * node's span states. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/map_stream.h"
#include "service/occupancy.h"
#include "service/sock.h"
#include "service/status_wire.h"

int status_send(struct fmemd *d, struct peer *p, uint32_t seq)
{
    struct st_builder *b = calloc(1, sizeof *b);
    if (!b)
        return peer_send_error(p, seq, FMEM_ENOMEM, "out of memory");
    struct st_service s = {
        .pid = (uint64_t)getpid(),
        .uptime_ns = ring_now_ns() - d->started_ns,
        .workers = d->nworkers,
        .apps = d->napps,
        .app_max_bytes = d->cfg->app_max_bytes,
        .app_max_allocs = d->cfg->app_max_allocs,
        .apps_departed = atomic_load(&d->apps_reaped),
        .blocks_reaped = atomic_load(&d->blocks_reaped),
        .bad_messages = atomic_load(&d->bad_messages),
        .max_apps = d->max_apps,
        .max_apps_per_user = d->max_apps_per_uid,
        .opening = d->npend,
        .max_opening = d->pend_cap,
        .max_opening_per_user = PENDING_PER_UID,
    };
    snprintf(s.socket, sizeof s.socket, "%s", d->cfg->socket_path);
    pthread_mutex_lock(&d->rmu);
    s.apps_reaping = d->ndead + d->reaping;
    pthread_mutex_unlock(&d->rmu);
    /* what must be there first, so that a full report still has it */
    size_t room = sizeof b->buf - (sizeof(struct st_hdr) + sizeof s) -
                  d->nnodes * (sizeof(struct st_hdr) + sizeof(struct st_node)) -
                  d->nworkers * (sizeof(struct st_hdr) + sizeof(struct st_worker));
    unsigned listed = (unsigned)(room / (sizeof(struct st_hdr) + sizeof(struct st_app)));
    if (listed > d->napps)
        listed = d->napps;
    s.apps_unlisted = d->napps - listed;
    st_add(b, ST_SERVICE, &s);
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[i];
        struct st_node n = {.index = i, .uid = dn->uid, .connected = dn->fd >= 0 || dn->rdma};
        snprintf(n.pool, sizeof n.pool, "%s", dn->pool);
        snprintf(n.path, sizeof n.path, "%s", dn->path);
        occ_scan(&dn->n->g, dn->tp->base, &n.occ, NULL);
        st_add(b, ST_NODE, &n);
    }
    for (unsigned i = 0; i < listed; i++) {
        struct app *a = d->apps[i];
        struct st_app r = {.id = a->id, .pid = (uint64_t)a->peer.pid, .uid = (uint64_t)a->peer.uid};
        snprintf(r.name, sizeof r.name, "%s", a->name);
        pthread_mutex_lock(&a->mu);
        r.blocks = a->blocks;
        r.bytes = a->bytes;
        r.allocs = a->allocs;
        r.frees = a->frees;
        r.pings = a->pings;
        r.errors = a->errors;
        r.over_quota = a->refused_quota;
        r.refills = a->refills;
        r.trims = a->trims;
        r.revoked = a->revoked;
        pthread_mutex_unlock(&a->mu);
        st_add(b, ST_APP, &r);
    }
    for (unsigned i = 0; i < d->nworkers; i++) {
        struct st_worker w = {.index = i,
                              .apps = d->workers[i].napps,
                              .served = atomic_load(&d->workers[i].served),
                              .sleeps = atomic_load(&d->workers[i].sleeps),
                              .spin_ns = atomic_load(&d->workers[i].spin_ns)};
        st_add(b, ST_WORKER, &w);
    }
    int rc = peer_send(p, MSG_STATUS_REPORT, seq, b->buf, b->len);
    free(b);
    return rc;
}

int status_send_map(struct fmemd *d, struct peer *p, uint32_t seq, unsigned node, uint64_t now)
{
    if (node >= d->nnodes)
        return peer_send_error(p, seq, FMEM_EINVAL, "no such memory node");
    struct dnode *dn = &d->nodes[node];
    return map_stream_start(p, seq, node, &dn->n->g, dn->tp->base, now);
}
