/* daemon.c - fmemd's control thread: the application socket (who may
 * connect: the socket file's mode, then SO_PEERCRED against our uid, root,
 * and the configured uid/gid), handshakes that hand each application its
 * ring and the pool's data files (never the metadata), departures, status
 * queries, and the memory nodes' heartbeats. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/sock.h"
#include "session_table.h"

#define MAX_PENDING 64
#define PENDING_NS 5000000000u /* a connection has 5 s to say hello */
#define MAX_BAD_MSGS 256     /* junk an application may send on its socket */

struct pending {
    int fd;
    pid_t pid;
    uid_t uid;
    uint64_t since;
};

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

static bool cred_allowed(const struct fmemd_config *c, uid_t u, gid_t g)
{
    return u == 0 || u == geteuid() || (c->allow_uid != (uid_t)-1 && u == c->allow_uid) ||
           (c->allow_gid != (gid_t)-1 && g == c->allow_gid);
}

static unsigned max_apps(const struct fmemd *d)
{
    unsigned m = d->cfg->max_apps ? d->cfg->max_apps : 256;
    /* a worker sleeps on at most 127 rings at once */
    unsigned cap = d->nworkers * 127;
    if (m > cap)
        m = cap;
    return m > MAX_APPS_HARD ? MAX_APPS_HARD : m;
}

static void welcome(struct fmemd *d, struct pending *p, const struct msg *m)
{
    if (d->napps >= max_apps(d)) {
        sock_send_error(p->fd, m->seq, FMEM_EBUSY, "too many applications");
        close(p->fd);
        return;
    }
    struct app *a = calloc(1, sizeof *a);
    int rfd = -1;
    if (!a || ring_create(&rfd, &a->ring)) {
        sock_send_error(p->fd, m->seq, FMEM_ENOMEM, "cannot make a ring");
        close(p->fd);
        free(a);
        return;
    }
    a->sock = p->fd;
    a->pid = p->pid;
    a->uid = p->uid;
    a->id = ++d->next_app_id;
    snprintf(a->name, sizeof a->name, "%s", m->u.hello.name);
    pthread_mutex_init(&a->mu, NULL);
    struct msg_app_welcome w = {.app_id = a->id, .nnodes = d->nnodes, .nslots = RING_SLOTS,
                                .ring_bytes = RING_BYTES, .max_bytes = d->cfg->app_max_bytes,
                                .max_allocs = d->cfg->app_max_allocs};
    int fds[SVC_MAX_FDS];
    unsigned nfds = 0;
    fds[nfds++] = rfd;
    for (unsigned i = 0; i < d->nnodes; i++) {
        w.data_bytes[i] = d->nodes[i].data_bytes;
        if (d->nodes[i].rdma) {
            snprintf(w.rdma_addr[i], sizeof w.rdma_addr[i], "%s", d->nodes[i].rdma_addr);
        } else {
            fds[nfds++] = shm_transport_data_fd(d->nodes[i].tp);
            fds[nfds++] = d->nodes[i].sess_fd;
            w.svc_uid[i] = d->nodes[i].uid;
            w.session[i] = d->nodes[i].session;
        }
    }
    int rc = sock_reply_msg(p->fd, MSG_APP_WELCOME, m->seq, &w, sizeof w, fds, nfds);
    close(rfd);
    if (rc < 0) {
        ring_unmap(a->ring);
        close(a->sock);
        pthread_mutex_destroy(&a->mu);
        free(a);
        return;
    }
    struct worker *best = &d->workers[0];
    for (unsigned i = 1; i < d->nworkers; i++)
        if (d->workers[i].napps < best->napps)
            best = &d->workers[i];
    d->apps[d->napps++] = a;
    worker_attach(best, a);
    if (d->cfg->verbose)
        dsay(d, "app %u (%s, pid %d, uid %d) connected", a->id, a->name, (int)a->pid, (int)a->uid);
}

/* First message of a connection. true: it stays pending (status asked). */
static bool on_pending(struct fmemd *d, struct pending *p)
{
    static uint8_t buf[MSG_MAX_BYTES];
    ssize_t n = sock_recv(p->fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == 0 || n == -1) {
        close(p->fd);
        return false;
    }
    struct msg m;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &m);
    if (rc) {
        atomic_fetch_add(&d->bad_messages, 1);
        sock_send_error(p->fd, 0, rc, n == -2 ? "message too large" : "malformed message");
        close(p->fd);
        return false;
    }
    switch (m.type) {
    case MSG_APP_HELLO:
        welcome(d, p, &m);
        return false;
    case MSG_STATUS_REQ:
        status_send(d, p->fd, m.seq);
        return true;
    case MSG_MAP_REQ:
        status_send_map(d, p->fd, m.seq, m.u.status_req.node);
        return true;
    default:
        atomic_fetch_add(&d->bad_messages, 1);
        sock_send_error(p->fd, m.seq, FMEM_EINVAL, "expected hello");
        close(p->fd);
        return false;
    }
}

static void app_gone(struct fmemd *d, unsigned i)
{
    struct app *a = d->apps[i];
    /* its handles stop working before its blocks go back to the pool */
    atomic_store(&a->ring->revoked, 1);
    d->apps[i] = d->apps[--d->napps];
    worker_detach(a->w, a);
    if (d->cfg->verbose)
        dsay(d, "app %u (%s, pid %d) disconnected", a->id, a->name, (int)a->pid);
    reaper_queue(d, a);
}

static void send_stats(struct fmemd *d, struct app *a, uint32_t seq)
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
    pthread_mutex_unlock(&a->mu);
    sock_reply_msg(a->sock, MSG_STATS, seq, &s, sizeof s, NULL, 0);
}

/* A message on an application's socket after its handshake. */
static void on_app_message(struct fmemd *d, unsigned i)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct app *a = d->apps[i];
    ssize_t n = sock_recv(a->sock, buf, sizeof buf, NULL, 0, NULL);
    if (n == 0 || n == -1) {
        app_gone(d, i);
        return;
    }
    struct msg m;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &m);
    if (rc == 0 && m.type == MSG_STATS_REQ) {
        send_stats(d, a, m.seq);
        return;
    }
    if (rc == 0 && m.type == MSG_STATUS_REQ) {
        status_send(d, a->sock, m.seq);
        return;
    }
    atomic_fetch_add(&d->bad_messages, 1);
    pthread_mutex_lock(&a->mu);
    a->errors++;
    pthread_mutex_unlock(&a->mu);
    sock_send_error(a->sock, rc ? 0 : m.seq, rc ? rc : FMEM_EINVAL,
                    n == -2 ? "message too large" : rc ? "malformed message" : "unexpected message");
    if (++a->bad_socket_msgs > MAX_BAD_MSGS) {
        dsay(d, "app %u (%s, pid %d): too many malformed messages; disconnected", a->id, a->name,
             (int)a->pid);
        app_gone(d, i);
    }
}

static void on_accept(struct fmemd *d, struct pending *pend, unsigned *npend)
{
    int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct pending p = {.fd = fd, .since = ring_now_ns()};
    gid_t g;
    if (sock_peer(fd, &p.pid, &p.uid, &g) < 0 || !cred_allowed(d->cfg, p.uid, g)) {
        sock_send_error(fd, 0, FMEM_EACCES, "not allowed to use this service");
        close(fd);
        return;
    }
    if (*npend >= MAX_PENDING) {
        sock_send_error(fd, 0, FMEM_EBUSY, "too many connections being opened");
        close(fd);
        return;
    }
    /* a client that stops reading must not block the control thread */
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    pend[(*npend)++] = p;
}

static void control_loop(struct fmemd *d)
{
    static struct pending pend[MAX_PENDING];
    unsigned npend = 0;
    struct pollfd *pf = calloc(1 + SVC_MAX_NODES + MAX_PENDING + MAX_APPS_HARD, sizeof *pf);
    if (!pf)
        return;
    uint64_t next_hb = 0;
    while (!atomic_load(d->cfg->stop)) {
        unsigned k = 0, nn = d->nnodes, np = npend, na = d->napps;
        pf[k++] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
        for (unsigned i = 0; i < nn; i++)
            pf[k++] = (struct pollfd){.fd = d->nodes[i].fd, .events = POLLIN};
        for (unsigned i = 0; i < np; i++)
            pf[k++] = (struct pollfd){.fd = pend[i].fd, .events = POLLIN};
        for (unsigned i = 0; i < na; i++)
            pf[k++] = (struct pollfd){.fd = d->apps[i]->sock, .events = POLLIN};
        int r = poll(pf, k, 50);
        if (r > 0) {
            for (unsigned i = 0; i < nn; i++)
                if (pf[1 + i].revents && d->nodes[i].fd >= 0)
                    nodes_on_message(d, i);
            /* backwards: removing i moves the last entry into i */
            for (unsigned i = na; i-- > 0;)
                if (pf[1 + nn + np + i].revents)
                    on_app_message(d, i);
            for (unsigned i = np; i-- > 0;)
                if (pf[1 + nn + i].revents && !on_pending(d, &pend[i]))
                    pend[i] = pend[--npend];
            if (pf[0].revents & POLLIN)
                on_accept(d, pend, &npend);
        }
        uint64_t now = ring_now_ns();
        for (unsigned i = npend; i-- > 0;)
            if (now - pend[i].since > PENDING_NS) {
                close(pend[i].fd);
                pend[i] = pend[--npend];
            }
        if (now >= next_hb) {
            nodes_heartbeat(d);
            unsigned hb = d->nodes[0].heartbeat_ms ? d->nodes[0].heartbeat_ms : 1000;
            next_hb = now + (uint64_t)hb * 1000000u;
        }
        nodes_reconnect(d);
    }
    for (unsigned i = 0; i < npend; i++)
        close(pend[i].fd);
    free(pf);
}

int fmemd_run(const struct fmemd_config *cfg)
{
    struct fmemd *d = calloc(1, sizeof *d);
    if (!d)
        return 1;
    d->cfg = cfg;
    d->lfd = -1;
    d->started_ns = ring_now_ns();
    d->nnodes = cfg->nmnodes;
    int status = 1;
    bool reaper = false;
    d->apps = calloc(MAX_APPS_HARD, sizeof *d->apps);
    if (!d->apps || cfg->nmnodes == 0 || cfg->nmnodes > SVC_MAX_NODES) {
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
    d->lfd = sock_listen(cfg->socket_path, cfg->socket_mode);
    if (d->lfd < 0) {
        dsay(d, "%s: %s", cfg->socket_path, strerror(errno));
        goto out;
    }
    dsay(d, "serving %s: %u memory node(s), %u workers, at most %u applications",
         cfg->socket_path, d->nnodes, d->nworkers, max_apps(d));
    control_loop(d);
    status = atomic_load(cfg->stop) == 2 ? 3 : 0;
    dsay(d, "shutting down");
out:
    if (d->lfd >= 0) {
        close(d->lfd);
        unlink(cfg->socket_path);
    }
    /* every application goes: their blocks are given back before the
     * memory nodes hear that we leave, after their handles stopped working
     * and a use of one that passed the check just before has finished */
    for (unsigned i = 0; i < d->napps; i++)
        atomic_store(&d->apps[i]->ring->revoked, 1);
    if (d->napps)
        session_grace();
    while (d->napps)
        app_gone(d, d->napps - 1);
    if (reaper)
        reaper_stop(d);
    workers_stop(d);
    nodes_close(d);
    free(d->apps);
    free(d);
    return status;
}
