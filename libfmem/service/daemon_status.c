/* daemon_status.c - fmemd's answers to fmem status: a text report (memory
 * nodes, applications, workers, counters) and a node's span states. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/occupancy.h"
#include "service/sock.h"

void status_send(struct fmemd *d, int fd, uint32_t seq)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    fprintf(f, "allocation service %s (pid %d, up %.0f s): %u workers, %u applications\n",
            d->cfg->socket_path, (int)getpid(), (ring_now_ns() - d->started_ns) / 1e9, d->nworkers,
            d->napps);
    fprintf(f, "  per-application limits: %llu bytes, %llu allocations (0: none)\n",
            (unsigned long long)d->cfg->app_max_bytes, (unsigned long long)d->cfg->app_max_allocs);
    fprintf(f, "  departed applications %llu (blocks given back %llu), rejected messages %llu\n",
            (unsigned long long)atomic_load(&d->apps_reaped),
            (unsigned long long)atomic_load(&d->blocks_reaped),
            (unsigned long long)atomic_load(&d->bad_messages));
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
                a->id, a->name, (int)a->pid, (int)a->uid, (unsigned long long)a->blocks,
                (unsigned long long)a->bytes, (unsigned long long)a->allocs,
                (unsigned long long)a->frees, (unsigned long long)a->pings,
                (unsigned long long)a->errors, (unsigned long long)a->refused_quota);
        pthread_mutex_unlock(&a->mu);
    }
    for (unsigned i = 0; i < d->nworkers; i++)
        fprintf(f, "worker %u: %u applications, %llu requests served, %llu sleeps\n", i,
                d->workers[i].napps, (unsigned long long)atomic_load(&d->workers[i].served),
                (unsigned long long)atomic_load(&d->workers[i].sleeps));
    fclose(f);
    if (len > MSG_TEXT_MAX)
        len = MSG_TEXT_MAX;
    sock_reply_msg(fd, MSG_STATUS_TEXT, seq, text, len, NULL, 0);
    free(text);
}

void status_send_map(struct fmemd *d, int fd, uint32_t seq, unsigned node)
{
    if (node >= d->nnodes) {
        sock_send_error(fd, seq, FMEM_EINVAL, "no such memory node");
        return;
    }
    struct dnode *dn = &d->nodes[node];
    uint64_t n = dn->n->g.nspans;
    uint8_t *states = malloc(n);
    uint8_t *buf = malloc(sizeof(struct msg_map_chunk) + MSG_MAP_MAX);
    if (!states || !buf) {
        free(states);
        free(buf);
        sock_send_error(fd, seq, FMEM_ENOMEM, "out of memory");
        return;
    }
    struct occ_report r;
    occ_scan(&dn->n->g, dn->tp->base, &r, states);
    for (uint64_t first = 0; first < n; first += MSG_MAP_MAX) {
        struct msg_map_chunk *mc = (struct msg_map_chunk *)buf;
        mc->nspans = n;
        mc->first = first;
        mc->count = (uint32_t)(n - first < MSG_MAP_MAX ? n - first : MSG_MAP_MAX);
        mc->node = node;
        memcpy(buf + sizeof *mc, states + first, mc->count);
        if (sock_send_msg(fd, MSG_MAP_CHUNK, seq, buf, sizeof *mc + mc->count, NULL, 0) < 0)
            break;
    }
    free(buf);
    free(states);
}
