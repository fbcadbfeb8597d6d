/* daemon_conns.c - fmemd's clients on its control thread: who may connect
 * (the socket file's mode, then SO_PEERCRED against our uid, root, and the
 * configured uid/gid), connections before their hello, handshakes that hand
 * each application its ring and the pool's data files (never the metadata),
 * the applications' socket messages, and departures.
 *
 * No client may hold up the others for more than a bounded, small delay:
 * - every socket is non-blocking and every reply waits in its peer's
 *   outbox rather than in a send (peer.h): a client that does not read is
 *   dropped, nobody waits for it;
 * - each turn of the control loop takes at most ACCEPT_BATCH connections
 *   off the backlog and reads at most one message per client;
 * - a user (SO_PEERCRED uid) has at most PENDING_PER_UID connections that
 *   have not said hello, and max_apps_per_uid sessions (root and our own
 *   user: up to max_apps); when the pending table is full, the user
 *   holding most of it loses its least recently active connection.
 *   Connections that say nothing can only push out each other, never a
 *   newcomer;
 * - a connection has PENDING_NS to say hello (or, for status tools,
 *   between requests), and status and map requests, which scan the whole
 *   pool, are rate-limited per user (uidtab.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/sock.h"

#define PENDING_NS 5000000000u /* to say hello, or between status requests */
#define MAX_BAD_MSGS 256       /* junk an application may send on its socket */
#define ACCEPT_BATCH 32        /* connections taken off the backlog per turn */

static bool cred_allowed(const struct fmemd_config *c, const struct peer *p)
{
    uid_t u = p->uid;
    if (u == 0 || u == geteuid() || (c->allow_uid != (uid_t)-1 && u == c->allow_uid))
        return true;
    /* a member of the group: as its primary or a supplementary group */
    return c->allow_gid != (gid_t)-1 &&
           (p->gid == c->allow_gid || sock_peer_in_group(p->fd, c->allow_gid));
}

int conns_start(struct fmemd *d)
{
    unsigned m = d->cfg->max_apps ? d->cfg->max_apps : 256;
    unsigned cap = d->nworkers * 127; /* a worker sleeps on at most 127 rings */
    if (m > cap)
        m = cap;
    d->max_apps = m > MAX_APPS_HARD ? MAX_APPS_HARD : m;
    unsigned per = d->cfg->max_apps_per_uid ? d->cfg->max_apps_per_uid : d->max_apps / 4;
    d->max_apps_per_uid = per < 1 ? 1 : per > d->max_apps ? d->max_apps : per;
    /* what is left of the descriptors after the applications, the memory
     * nodes (socket, metadata and data file each) and some slack */
    unsigned fds = peer_fd_budget(), used = d->max_apps + 3 * SVC_MAX_NODES + 32;
    unsigned pc = fds > used + 16 ? fds - used : 16;
    d->pend_cap = pc > PENDING_MAX ? PENDING_MAX : pc;
    d->apps = calloc(d->max_apps, sizeof *d->apps);
    d->pend = calloc(d->pend_cap, sizeof *d->pend);
    return d->apps && d->pend ? 0 : FMEM_ENOMEM;
}

void conns_stop(struct fmemd *d)
{
    for (unsigned i = 0; i < d->npend; i++)
        peer_close(&d->pend[i]);
    d->npend = 0;
    free(d->pend);
    d->pend = NULL;
    uidtab_free(&d->uids);
}

/* ---- connections before their hello ------------------------------------ */

static void pending_remove(struct fmemd *d, unsigned i, uint64_t now)
{
    uidtab_sub(&d->uids, d->pend[i].uid, true, now);
    d->pend[i] = d->pend[--d->npend];
}

static void pending_drop(struct fmemd *d, unsigned i, uint64_t now)
{
    peer_close(&d->pend[i]);
    pending_remove(d, i, now);
}

/* The least recently active pending connection of uid (or of anyone when
 * uid is -1). */
static unsigned stalest_pending(const struct fmemd *d, uid_t uid)
{
    unsigned best = d->npend;
    for (unsigned i = 0; i < d->npend; i++)
        if ((uid == (uid_t)-1 || d->pend[i].uid == uid) &&
            (best == d->npend || d->pend[i].active < d->pend[best].active))
            best = i;
    return best;
}

/* Push out one pending connection: the least recently active one of
 * `loser` (of anyone if it has none). false: there is none. */
static bool push_out(struct fmemd *d, uid_t loser, uint64_t now)
{
    unsigned i = stalest_pending(d, loser);
    if (i == d->npend)
        i = stalest_pending(d, (uid_t)-1);
    if (i == d->npend)
        return false;
    struct peer *p = &d->pend[i];
    if (d->cfg->verbose)
        dsay(d, "pid %d (uid %d): too many connections being opened; closed", (int)p->pid,
             (int)p->uid);
    sock_send_error(p->fd, 0, FMEM_EBUSY, "too many connections being opened; this one closed");
    pending_drop(d, i, now);
    return true;
}

/* Make room for a new pending connection of uid: when the user has its
 * share, its own oldest goes; when the table is full, the oldest of the
 * user holding most of it. */
static void make_room(struct fmemd *d, uid_t uid, uint64_t now)
{
    if (uidtab_peek(&d->uids, uid).pending >= PENDING_PER_UID)
        push_out(d, uid, now);
    else if (d->npend >= d->pend_cap)
        push_out(d, uidtab_most_pending(&d->uids), now);
}

static void welcome(struct fmemd *d, unsigned i, const struct msg *m, uint64_t now)
{
    struct peer *p = &d->pend[i];
    struct uid_use u = uidtab_peek(&d->uids, p->uid);
    char why[64];
    /* root and our own user are trusted (they could stop us anyway): the
     * per-user share keeps the others from taking every slot */
    bool trusted = p->uid == 0 || p->uid == geteuid();
    if (!trusted && u.live >= d->max_apps_per_uid) {
        snprintf(why, sizeof why, "user %u has %u applications connected already",
                 (unsigned)p->uid, u.live);
        peer_refuse(p->fd, FMEM_EBUSY, why);
        pending_remove(d, i, now);
        return;
    }
    if (d->napps >= d->max_apps) {
        peer_refuse(p->fd, FMEM_EBUSY, "too many applications");
        pending_remove(d, i, now);
        return;
    }
    struct app *a = calloc(1, sizeof *a);
    int rfd = -1;
    if (!a || ring_create(&rfd, &a->ring)) {
        peer_refuse(p->fd, FMEM_ENOMEM, "cannot make a ring");
        pending_remove(d, i, now);
        free(a);
        return;
    }
    if (!uidtab_add(&d->uids, p->uid, false, now)) {
        peer_refuse(p->fd, FMEM_ENOMEM, "out of memory");
        pending_remove(d, i, now);
        ring_unmap(a->ring);
        close(rfd);
        free(a);
        return;
    }
    a->peer = *p;
    a->id = ++d->next_app_id;
    snprintf(a->name, sizeof a->name, "%s", m->u.hello.name);
    pthread_mutex_init(&a->mu, NULL);
    pending_remove(d, i, now); /* the connection now belongs to a */
    struct msg_app_welcome w = {.app_id = a->id, .nnodes = d->nnodes, .nslots = RING_SLOTS,
                                .ring_bytes = RING_BYTES, .max_bytes = d->cfg->app_max_bytes,
                                .max_allocs = d->cfg->app_max_allocs};
    int fds[SVC_MAX_FDS];
    unsigned nfds = 0;
    fds[nfds++] = rfd;
    for (unsigned k = 0; k < d->nnodes; k++) {
        w.data_bytes[k] = d->nodes[k].data_bytes;
        if (d->nodes[k].rdma) {
            snprintf(w.rdma_addr[k], sizeof w.rdma_addr[k], "%s", d->nodes[k].rdma_addr);
        } else {
            fds[nfds++] = shm_transport_data_fd(d->nodes[k].tp);
            fds[nfds++] = d->nodes[k].sess_fd;
            w.svc_uid[k] = d->nodes[k].uid;
            w.session[k] = d->nodes[k].session;
        }
    }
    /* the first message on a fresh socket: it fits, or the peer is gone */
    int rc = sock_reply_msg(a->peer.fd, MSG_APP_WELCOME, m->seq, &w, sizeof w, fds, nfds);
    close(rfd);
    if (rc < 0) {
        uidtab_sub(&d->uids, a->peer.uid, false, now);
        destroy_app(a);
        return;
    }
    struct worker *best = &d->workers[0];
    for (unsigned k = 1; k < d->nworkers; k++)
        if (d->workers[k].napps < best->napps)
            best = &d->workers[k];
    d->apps[d->napps++] = a;
    worker_attach(best, a);
    if (d->cfg->verbose)
        dsay(d, "app %u (%s, pid %d, uid %d) connected", a->id, a->name, (int)a->peer.pid,
             (int)a->peer.uid);
}

/* Status and map requests scan the whole pool: a few per second per user. */
static int scan_request(struct fmemd *d, struct peer *p, const struct msg *m, uint64_t now)
{
    if (!uidtab_scan_allowed(&d->uids, p->uid, now))
        return peer_send_error(p, m->seq, FMEM_EBUSY, "too many status requests; try again");
    if (m->type == MSG_STATUS_REQ)
        return status_send(d, p, m->seq);
    return status_send_map(d, p, m->seq, m->u.status_req.node, now);
}

/* One message of pending connection i. false: it is gone from d->pend. */
static bool pending_message(struct fmemd *d, unsigned i, uint64_t now)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct peer *p = &d->pend[i];
    ssize_t n = sock_recv(p->fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true; /* nothing yet */
    if (n == 0 || n == -1) {
        pending_drop(d, i, now);
        return false;
    }
    p->active = now;
    struct msg m;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &m);
    if (rc) {
        atomic_fetch_add(&d->bad_messages, 1);
        peer_refuse(p->fd, rc, n == -2 ? "message too large" : "malformed message");
        pending_remove(d, i, now);
        return false;
    }
    switch (m.type) {
    case MSG_APP_HELLO:
        welcome(d, i, &m, now);
        return false;
    case MSG_STATUS_REQ:
    case MSG_MAP_REQ:
        if (scan_request(d, p, &m, now) == 0)
            return true;
        pending_drop(d, i, now);
        return false;
    default:
        atomic_fetch_add(&d->bad_messages, 1);
        peer_refuse(p->fd, FMEM_EINVAL, "expected hello");
        pending_remove(d, i, now);
        return false;
    }
}

bool pending_event(struct fmemd *d, unsigned i, short revents, uint64_t now)
{
    struct peer *p = &d->pend[i];
    if (peer_busy(p)) {
        if (peer_flush(p, now) < 0 || (revents & (POLLERR | POLLHUP) && peer_busy(p))) {
            pending_drop(d, i, now);
            return false;
        }
        return true; /* its next request waits until the reply is out */
    }
    return pending_message(d, i, now);
}

void conns_accept(struct fmemd *d, uint64_t now)
{
    for (unsigned k = 0; k < ACCEPT_BATCH; k++) {
        struct peer p;
        int r = listener_accept(&d->ls, &p, now);
        if (r < 0 && push_out(d, uidtab_most_pending(&d->uids), now))
            r = listener_accept(&d->ls, &p, now); /* out of descriptors */
        if (r < 0)
            listener_shed(&d->ls, now);
        if (r != 1)
            return;
        if (!cred_allowed(d->cfg, &p)) {
            char why[64];
            snprintf(why, sizeof why, "user %u may not use this service", (unsigned)p.uid);
            if (d->cfg->verbose)
                dsay(d, "pid %d (uid %d) refused: not allowed", (int)p.pid, (int)p.uid);
            peer_refuse(p.fd, FMEM_EACCES, why);
            continue;
        }
        make_room(d, p.uid, now);
        if (d->npend >= d->pend_cap || !uidtab_add(&d->uids, p.uid, true, now)) {
            peer_refuse(p.fd, FMEM_EBUSY, "too many connections being opened");
            continue;
        }
        d->pend[d->npend++] = p;
        /* a client sends its hello right after connecting: usually it is
         * here already, and the connection never waits in the table */
        pending_message(d, d->npend - 1, now);
    }
}

/* ---- applications' sockets ----------------------------------------------- */

void app_gone(struct fmemd *d, unsigned i)
{
    struct app *a = d->apps[i];
    /* its handles stop working before its blocks go back to the pool */
    atomic_store(&a->ring->revoked, 1);
    d->apps[i] = d->apps[--d->napps];
    worker_detach(a->w, a);
    uidtab_sub(&d->uids, a->peer.uid, false, ring_now_ns());
    if (d->cfg->verbose)
        dsay(d, "app %u (%s, pid %d) disconnected", a->id, a->name, (int)a->peer.pid);
    /* off its worker: nothing touches its ring or socket any more, and
     * neither has to wait for the reaper */
    peer_close(&a->peer);
    ring_unmap(a->ring);
    a->ring = NULL;
    /* the reaper looks at its blocks: a worker may still hold a->mu for a
     * round trip to a memory node (a type-2 bind answers in up to 5 s),
     * and the control thread must not wait for it (heartbeats) */
    reaper_queue(d, a);
}

static int send_stats(struct fmemd *d, struct app *a, uint32_t seq)
{
    struct msg_stats s = {.nodes = d->nnodes, .user_id = d->nodes[0].uid};
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct node *n = d->nodes[i].n;
        s.capacity_bytes += n->g.data_size;
        s.metadata_bytes += n->g.metadata_bytes;
        s.allocated_bytes += node_allocated_bytes(n);
    }
    pthread_mutex_lock(&a->mu);
    s.app_bytes = a->bytes;
    s.app_allocs = a->blocks;
    s.cas_ops = a->ops.cas;
    s.cas_failures = a->ops.cas_fail;
    s.reads = a->ops.reads;
    s.writes = a->ops.writes;
    s.round_trips = a->ops.round_trips;
    s.log_flushes = a->ops.log_cas;
    s.max_retries = a->max_retries;
    pthread_mutex_unlock(&a->mu);
    return peer_send(&a->peer, MSG_STATS, seq, &s, sizeof s);
}

/* A message on an application's socket after its handshake. */
static void app_message(struct fmemd *d, unsigned i, uint64_t now)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct app *a = d->apps[i];
    ssize_t n = sock_recv(a->peer.fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return;
    if (n == 0 || n == -1) {
        app_gone(d, i);
        return;
    }
    a->peer.active = now;
    struct msg m;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &m);
    int sent;
    if (rc == 0 && m.type == MSG_STATS_REQ) {
        sent = send_stats(d, a, m.seq);
    } else if (rc == 0 && (m.type == MSG_STATUS_REQ || m.type == MSG_MAP_REQ)) {
        sent = scan_request(d, &a->peer, &m, now);
    } else {
        atomic_fetch_add(&d->bad_messages, 1);
        pthread_mutex_lock(&a->mu);
        a->errors++;
        pthread_mutex_unlock(&a->mu);
        sent = peer_send_error(&a->peer, rc ? 0 : m.seq, rc ? rc : FMEM_EINVAL,
                               n == -2 ? "message too large"
                               : rc    ? "malformed message"
                                       : "unexpected message");
        if (++a->bad_socket_msgs > MAX_BAD_MSGS) {
            dsay(d, "app %u (%s, pid %d): too many malformed messages; disconnected", a->id,
                 a->name, (int)a->peer.pid);
            sent = -1;
        }
    }
    if (sent < 0)
        app_gone(d, i);
}

void app_event(struct fmemd *d, unsigned i, short revents, uint64_t now)
{
    struct peer *p = &d->apps[i]->peer;
    if (peer_busy(p)) {
        if (peer_flush(p, now) < 0 || (revents & (POLLERR | POLLHUP) && peer_busy(p)))
            app_gone(d, i);
        return;
    }
    app_message(d, i, now);
}

void conns_expire(struct fmemd *d, uint64_t now)
{
    for (unsigned i = d->npend; i-- > 0;) {
        struct peer *p = &d->pend[i];
        if (peer_stalled(p, now) || (!peer_busy(p) && peer_since(now, p->active) > PENDING_NS))
            pending_drop(d, i, now);
    }
    for (unsigned i = d->napps; i-- > 0;)
        if (peer_stalled(&d->apps[i]->peer, now)) {
            dsay(d, "app %u (%s, pid %d) does not read its socket; disconnected",
                 d->apps[i]->id, d->apps[i]->name, (int)d->apps[i]->peer.pid);
            app_gone(d, i);
        }
}
