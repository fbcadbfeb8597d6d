/* daemon.c - fmemd's control thread: the loop that polls the application
 * socket, the clients (daemon_conns.c) and the memory nodes' sockets
 * (daemon_nodes.c), and starting and stopping everything. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/notify.h"
#include "service/sock.h"
#include "session_table.h"

void dsay(const struct fmemd *d, const char *fmt, ...)
{
    (void)d;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fmemd: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static void control_loop(struct fmemd *d)
{
    struct pollfd *pf = calloc(1 + SVC_MAX_NODES + d->pend_cap + d->max_apps, sizeof *pf);
    if (!pf)
        return;
    uint64_t next_hb = 0, next_trim = 0;
    while (!atomic_load(d->cfg->stop)) {
        uint64_t now = ring_now_ns();
        unsigned k = 0, nn = d->nnodes, np = d->npend, na = d->napps;
        pf[k++] = (struct pollfd){.fd = listener_paused(&d->ls, now) ? -1 : d->ls.fd,
                                  .events = POLLIN};
        for (unsigned i = 0; i < nn; i++)
            pf[k++] = (struct pollfd){.fd = d->nodes[i].fd, .events = POLLIN};
        /* a client with a reply waiting is polled for room, not requests */
        for (unsigned i = 0; i < np; i++)
            pf[k++] = (struct pollfd){.fd = d->pend[i].fd,
                                      .events = peer_busy(&d->pend[i]) ? POLLOUT : POLLIN};
        for (unsigned i = 0; i < na; i++)
            pf[k++] = (struct pollfd){.fd = d->apps[i]->peer.fd,
                                      .events = peer_busy(&d->apps[i]->peer) ? POLLOUT : POLLIN};
        int r = poll(pf, k, 50);
        now = ring_now_ns();
        if (r > 0) {
            for (unsigned i = 0; i < nn; i++)
                if (pf[1 + i].revents && d->nodes[i].fd >= 0)
                    nodes_on_message(d, i);
            /* backwards: removing i moves the last entry into i; at most
             * one message of each client per turn */
            for (unsigned i = na; i-- > 0;)
                if (pf[1 + nn + np + i].revents)
                    app_event(d, i, pf[1 + nn + np + i].revents, now);
            for (unsigned i = np; i-- > 0;)
                if (pf[1 + nn + i].revents)
                    pending_event(d, i, pf[1 + nn + i].revents, now);
            if (pf[0].revents & POLLIN)
                conns_accept(d, now);
        }
        conns_expire(d, now);
        if (now >= next_trim) {
            uidtab_trim(&d->uids, now);
            next_trim = now + 1000000000u;
        }
        if (now >= next_hb) {
            nodes_heartbeat(d);
            unsigned hb = d->nodes[0].heartbeat_ms ? d->nodes[0].heartbeat_ms : 1000;
            next_hb = now + (uint64_t)hb * 1000000u;
        }
        nodes_reconnect(d);
    }
    free(pf);
}

int fmemd_run(const struct fmemd_config *cfg)
{
    struct fmemd *d = calloc(1, sizeof *d);
    if (!d)
        return 1;
    d->cfg = cfg;
    d->ls.fd = d->ls.spare = -1;
    d->started_ns = ring_now_ns();
    d->nnodes = cfg->nmnodes;
    int status = 1;
    bool reaper = false;
    if (cfg->nmnodes == 0 || cfg->nmnodes > SVC_MAX_NODES) {
        dsay(d, cfg->nmnodes ? "too many memory nodes" : "no memory node given");
        goto out;
    }
    for (unsigned i = 0; i < d->nnodes; i++) {
        d->nodes[i].path = cfg->mnode_sockets[i];
        d->nodes[i].fd = -1;
    }
    if (nodes_connect_all(d))
        goto out;
    if (reaper_start(d) || workers_start(d)) {
        dsay(d, "cannot start threads");
        goto out;
    }
    reaper = true;
    if (conns_start(d)) {
        dsay(d, "out of memory");
        goto out;
    }
    if (listener_open(&d->ls, cfg->socket_path, cfg->socket_mode) < 0) {
        dsay(d, "%s: %s", cfg->socket_path, strerror(errno));
        goto out;
    }
    dsay(d, "serving %s: %u memory node(s), %u workers, at most %u applications (%u per user)",
         cfg->socket_path, d->nnodes, d->nworkers, d->max_apps, d->max_apps_per_uid);
    svc_notify("READY=1\nSTATUS=serving applications");
    control_loop(d);
    status = atomic_load(cfg->stop) == 2 ? 3 : 0;
    dsay(d, "shutting down");
    svc_notify("STOPPING=1");
out:
    listener_close(&d->ls, cfg->socket_path);
    /* every application goes: their blocks are given back before the
     * memory nodes hear that we leave, after their handles stopped working
     * and a use of one that passed the check just before has finished */
    for (unsigned i = 0; i < d->napps; i++)
        atomic_store(&d->apps[i]->ring->revoked, 1);
    if (d->napps)
        session_grace();
    while (d->napps)
        app_gone(d, d->napps - 1);
    conns_stop(d);
    if (reaper)
        reaper_stop(d);
    workers_stop(d);
    nodes_close(d);
    free(d->apps);
    free(d);
    return status;
}
