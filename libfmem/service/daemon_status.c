/* daemon_status.c - fmemd's answers to fmem status: a text report (memory
 * nodes, applications, workers, counters) and a node's span states. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/map_stream.h"
#include "service/occupancy.h"
#include "service/sock.h"

int status_send(struct fmemd *d, struct peer *p, uint32_t seq)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return peer_send_error(p, seq, FMEM_ENOMEM, "out of memory");
    fprintf(f, "allocation service %s (pid %d, up %.0f s): %u workers, %u applications\n",
            d->cfg->socket_path, (int)getpid(), (ring_now_ns() - d->started_ns) / 1e9, d->nworkers,
            d->napps);
    fprintf(f, "  per-application limits: %llu bytes, %llu allocations (0: none)\n",
            (unsigned long long)d->cfg->app_max_bytes, (unsigned long long)d->cfg->app_max_allocs);
    pthread_mutex_lock(&d->rmu);
    unsigned queued = d->ndead + d->reaping;
    pthread_mutex_unlock(&d->rmu);
    fprintf(f, "  departed applications %llu (blocks given back %llu, %u being torn down), "
               "rejected messages %llu\n",
            (unsigned long long)atomic_load(&d->apps_reaped),
            (unsigned long long)atomic_load(&d->blocks_reaped), queued,
            (unsigned long long)atomic_load(&d->bad_messages));
    fprintf(f, "  connections: %u applications (at most %u, %u per user), %u opening (at most "
               "%u, %u per user)\n",
            d->napps, d->max_apps, d->max_apps_per_uid, d->npend, d->pend_cap, PENDING_PER_UID);
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[i];
        fprintf(f, "memory node %u: %s via %s, user %u, %s\n", i, dn->pool, dn->path, dn->uid,
                dn->fd >= 0 ? "connected" : "reconnecting");
        struct occ_report r;
        occ_scan(&dn->n->g, dn->tp->base, &r, NULL);
        occ_print(&r, f);
    }
    fprintf(f, "applications:\n");
    for (unsigned i = 0; i < d->napps; i++) {
        struct app *a = d->apps[i];
        pthread_mutex_lock(&a->mu);
        fprintf(f, "  app %u: %s pid %d uid %d, holds %llu blocks (%llu bytes); %llu allocs, "
                   "%llu frees, %llu pings, %llu errors, %llu over quota\n",
                a->id, a->name, (int)a->peer.pid, (int)a->peer.uid, (unsigned long long)a->blocks,
                (unsigned long long)a->bytes, (unsigned long long)a->allocs,
                (unsigned long long)a->frees, (unsigned long long)a->pings,
                (unsigned long long)a->errors, (unsigned long long)a->refused_quota);
        fprintf(f, "    block cache: %llu refills, %llu trims, %llu blocks revoked\n",
                (unsigned long long)a->refills, (unsigned long long)a->trims,
                (unsigned long long)a->revoked);
        pthread_mutex_unlock(&a->mu);
    }
    for (unsigned i = 0; i < d->nworkers; i++)
        fprintf(f, "worker %u: %u applications, %llu requests served, %llu sleeps, idle spin %llu us\n",
                i, d->workers[i].napps, (unsigned long long)atomic_load(&d->workers[i].served),
                (unsigned long long)atomic_load(&d->workers[i].sleeps),
                (unsigned long long)atomic_load(&d->workers[i].spin_ns) / 1000);
    fclose(f);
    if (len > MSG_TEXT_MAX)
        len = MSG_TEXT_MAX;
    int rc = peer_send(p, MSG_STATUS_TEXT, seq, text, len);
    free(text);
    return rc;
}

int status_send_map(struct fmemd *d, struct peer *p, uint32_t seq, unsigned node, uint64_t now)
{
    if (node >= d->nnodes)
        return peer_send_error(p, seq, FMEM_EINVAL, "no such memory node");
    struct dnode *dn = &d->nodes[node];
    return map_stream_start(p, seq, node, &dn->n->g, dn->tp->base, now);
}
