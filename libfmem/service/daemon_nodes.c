/* daemon_nodes.c - fmemd's links to its memory nodes: registration (user
 * id and the pool's files), heartbeats, and resuming the same user id after
 * the memory node restarts. While a memory node is away its pool stays
 * mapped and in use; only key regeneration and recovery wait for it. */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "service/daemon_internal.h"
#include "service/sock.h"
#include "session_table.h"
#include "uri.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif

/* A memory node served over RDMA (rdma://HOST:PORT?token=FILE): we run the
 * allocation protocol on it with the services' token and claim a user id
 * in its pool; applications get its address and reach their blocks with
 * queue pairs of their own. There is no socket: no heartbeats either, so
 * reclaiming a dead service there is `fmem recover` (see docs/service.md). */
static int open_rdma_node(struct fmemd *d, unsigned i)
{
    struct dnode *dn = &d->nodes[i];
#ifdef HAVE_RDMA
    struct node_uri u;
    if (uri_parse(dn->path, &u, 1) != 1 || u.kind != URI_RDMA || !u.token[0] ||
        strlen(u.path) + strlen(u.port) + 2 > sizeof dn->rdma_addr)
        return FMEM_EURI;
    struct verbs_connect_params cp = {.host = u.path, .port = u.port,
                                      .src = u.src[0] ? u.src : NULL,
                                      .role = VERBS_ROLE_SERVICE, .token_path = u.token};
    struct transport *tp;
    int rc = verbs_transport_connect(&cp, &tp);
    if (rc)
        return rc;
    struct node *nd;
    rc = node_open(tp, false, 0, &nd); /* claims a user id */
    if (rc) {
        tp_close(tp);
        return rc;
    }
    nd->index = i;
    nd->remote_regen = true;
    dn->rdma = true;
    dn->mw2 = verbs_transport_mw_type(tp) == 2; /* the memory node's mode */
    strcat(strcat(strcpy(dn->rdma_addr, u.path), ":"), u.port);
    dn->tp = tp;
    /* the heartbeat on queue pairs of its own (same session, fenced
     * together): on tp's it would wait behind workers' round trips, a
     * type-2 bind answering in up to 5 s, longer than --miss periods */
    cp.session = verbs_transport_session(tp);
    if (verbs_transport_connect(&cp, &dn->hb_tp))
        dn->hb_tp = NULL;
    dn->n = nd;
    dn->uid = nd->uid;
    dn->data_bytes = nd->g.data_size;
    if (dn->data_bytes > d->max_block)
        d->max_block = dn->data_bytes;
    memcpy(dn->pool, dn->rdma_addr, sizeof dn->pool); /* same size */
    dn->fd = -1;
    return 0;
#else
    (void)d;
    (void)dn;
    return FMEM_ENOTSUP; /* built without rdma-core */
#endif
}

/* Register with memory node i (resume: keep our user id). 0 or FMEM_E*. */
static int register_node(struct fmemd *d, unsigned i, bool resume)
{
    struct dnode *dn = &d->nodes[i];
    int fd = sock_connect(dn->path);
    if (fd < 0)
        return FMEM_EIO;
    struct msg_svc_register r = {.resume_uid = resume ? dn->uid : 0, .pid = (uint32_t)getpid()};
    snprintf(r.name, sizeof r.name, "%s", d->cfg->name ? d->cfg->name : "fmemd");
    static uint8_t buf[MSG_MAX_BYTES];
    int fds[3];
    unsigned nfds = 0;
    ssize_t n = sock_ask(fd, MSG_SVC_REGISTER, 1, &r, sizeof r, buf, sizeof buf, fds, 3, &nfds,
                         5000);
    struct msg m;
    int rc = n > 0 ? msg_decode(buf, (size_t)n, &m) : FMEM_EIO;
    if (rc == 0 && m.type == MSG_ERROR) {
        rc = m.u.error.code;
        dsay(d, "memory node %s refused us: %s", dn->path, m.u.error.text);
    } else if (rc == 0 && (m.type != MSG_SVC_WELCOME || nfds != 3))
        rc = FMEM_EINVAL;
    if (rc) {
        for (unsigned k = 0; k < nfds; k++)
            close(fds[k]);
        close(fd);
        return rc;
    }
    if (resume) {
        /* same pool, still mapped: the new descriptors are not needed */
        close(fds[0]);
        close(fds[1]);
        close(fds[2]);
        if (m.u.svc_welcome.uid != dn->uid || m.u.svc_welcome.session != dn->session) {
            close(fd);
            return FMEM_EBUSY;
        }
    } else {
        rc = session_map(fds[2], &dn->sess_words, &dn->sess_nusers, &dn->sess_map,
                         &dn->sess_len);
        if (rc == 0 && (m.u.svc_welcome.uid >= dn->sess_nusers ||
                        atomic_load(&dn->sess_words[m.u.svc_welcome.uid]) != m.u.svc_welcome.session))
            rc = FMEM_ECORRUPT; /* not the table our session is in */
        if (rc) {
            for (unsigned k = 0; k < 3; k++)
                close(fds[k]);
            close(fd);
            return rc;
        }
        dn->sess_fd = fds[2];
        dn->session = m.u.svc_welcome.session;
        /* the files must be the memory node's (or ours), writable by no
         * one else: see pool_files.h */
        pid_t peer_pid;
        uid_t mnode_uid = geteuid();
        gid_t peer_gid;
        sock_peer(fd, &peer_pid, &mnode_uid, &peer_gid);
        struct shm_params sp = {.from_fds = true, .meta_fd = fds[0], .data_fd = fds[1],
                                .check_owner = true, .owner = mnode_uid};
        struct transport *tp;
        rc = shm_transport_open(&sp, &tp, NULL);
        if (rc) {
            int e = errno;
            if (rc == FMEM_EIO && e == EPERM)
                dsay(d, "memory node %s: refused its pool files: they belong to another user "
                        "or group or others may write them", dn->path);
            close(fds[0]);
            close(fds[1]);
            close(fd);
            errno = e;
            return rc;
        }
        struct node *nd;
        rc = node_open(tp, false, m.u.svc_welcome.uid, &nd);
        if (rc) {
            tp_close(tp);
            close(fd);
            return rc;
        }
        nd->index = i;
        nd->remote_regen = true;
        dn->tp = tp;
        dn->n = nd;
        dn->uid = m.u.svc_welcome.uid;
        dn->data_bytes = nd->g.data_size;
        if (dn->data_bytes > d->max_block)
            d->max_block = dn->data_bytes;
    }
    dn->heartbeat_ms = m.u.svc_welcome.heartbeat_ms;
    snprintf(dn->pool, sizeof dn->pool, "%s", m.u.svc_welcome.pool);
    dn->fd = fd;
    return 0;
}

int nodes_connect_all(struct fmemd *d)
{
    uint64_t deadline = ring_now_ns() + (uint64_t)d->cfg->connect_ms * 1000000u;
    for (unsigned i = 0; i < d->nnodes; i++) {
        d->nodes[i].fd = -1;
        d->nodes[i].sess_fd = -1;
        int rc;
        bool rdma = !strncmp(d->nodes[i].path, "rdma://", 7);
        while ((rc = rdma ? open_rdma_node(d, i) : register_node(d, i, false)) == FMEM_EIO &&
               errno != EPERM && ring_now_ns() < deadline && !atomic_load(d->cfg->stop))
            usleep(50000);
        if (rc) {
            dsay(d, "memory node %s: %s", d->nodes[i].path,
                 rc == FMEM_EIO ? strerror(errno) : fmem_strerror(rc));
            return rc;
        }
        dsay(d, "memory node %u: %s (%s), user %u, %llu MiB", i, d->nodes[i].pool,
             d->nodes[i].path, d->nodes[i].uid,
             (unsigned long long)(d->nodes[i].data_bytes >> 20));
    }
    return 0;
}

/* Over RDMA: write our heartbeat and session words, and make sure we may
 * go on. A memory node that took us for dead has fenced our session and
 * recovered our user slot: every block our applications held there is
 * gone, and only a restart is safe. */
static void rdma_heartbeat(struct fmemd *d, struct dnode *dn)
{
#ifdef HAVE_RDMA
    struct node *n = dn->n;
    if (!n->tp->wkeys_size)
        return;
    struct transport *tp = dn->hb_tp ? dn->hb_tp : n->tp;
    uint32_t mine = (uint32_t)getpid() | NODE_PID_REMOTE; /* as in our user slot */
    uint64_t v[2] = {((uint64_t)mine << 32) | (uint32_t)++dn->hb_seq,
                     verbs_transport_session(n->tp)};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tp_write(tp, tp->wkeys_off + wk_hb_pair(n->g.nchunks, dn->uid), v, sizeof v);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    if (ms >= 1000)
        dsay(d, "memory node %s: a heartbeat took %ld ms", dn->rdma_addr, ms);
    uint32_t pid;
    if (verbs_transport_fenced(n->tp) || verbs_transport_fenced(tp)) {
        dsay(d, "memory node %s: we were fenced (taken for dead); exiting", dn->rdma_addr);
        atomic_store(d->cfg->stop, 2);
    } else if (tp_read(tp, n->g.users_off + 4 * (uint64_t)dn->uid, &pid, 4) == 0 &&
               pid != mine) {
        dsay(d, "memory node %s: our user id was reclaimed; exiting", dn->rdma_addr);
        atomic_store(d->cfg->stop, 2);
    }
#else
    (void)d, (void)dn;
#endif
}

/* A memory node that fenced our session (took us for dead, e.g. while we
 * were stopped) has recovered or is recovering our blocks: stop. */
static void shm_session_check(struct fmemd *d, struct dnode *dn)
{
    if (dn->sess_words && atomic_load(&dn->sess_words[dn->uid]) != dn->session) {
        dsay(d, "memory node %s: our session was fenced (taken for dead); exiting", dn->path);
        atomic_store(d->cfg->stop, 2);
    }
}

void nodes_heartbeat(struct fmemd *d)
{
    struct msg_heartbeat hb = {0};
    hb.napps = d->napps;
    /* a figure for the memory node's status only: an application whose
     * worker is in a round trip (holding its lock) is left out rather
     * than waited for, so that the heartbeat is never late */
    for (unsigned i = 0; i < d->napps; i++) {
        if (pthread_mutex_trylock(&d->apps[i]->mu))
            continue;
        hb.app_bytes += d->apps[i]->bytes;
        pthread_mutex_unlock(&d->apps[i]->mu);
    }
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[i];
        if (dn->rdma)
            rdma_heartbeat(d, dn);
        else
            shm_session_check(d, dn);
        if (dn->fd < 0)
            continue;
        hb.seq = ++dn->hb_seq;
        /* never wait: a memory node that does not read misses a beat */
        sock_reply_msg(dn->fd, MSG_HEARTBEAT, (uint32_t)hb.seq, &hb, sizeof hb, NULL, 0);
    }
}

static void lost(struct fmemd *d, unsigned i, const char *why)
{
    struct dnode *dn = &d->nodes[i];
    dsay(d, "memory node %u (%s): %s; reconnecting", i, dn->path, why);
    close(dn->fd);
    dn->fd = -1;
    dn->next_try_ns = ring_now_ns() + 200000000u;
}

void nodes_on_message(struct fmemd *d, unsigned i)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct dnode *dn = &d->nodes[i];
    ssize_t n = sock_recv(dn->fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == 0 || n == -1) {
        lost(d, i, "connection closed");
        return;
    }
    struct msg m;
    if (n < 0 || msg_decode(buf, (size_t)n, &m)) {
        atomic_fetch_add(&d->bad_messages, 1);
        return;
    }
    if (m.type == MSG_SHUTDOWN)
        lost(d, i, "shutting down");
    else if (m.type == MSG_ERROR)
        dsay(d, "memory node %u: %s (%s)", i, m.u.error.text, fmem_strerror(m.u.error.code));
}

void nodes_reconnect(struct fmemd *d)
{
    uint64_t now = ring_now_ns();
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[i];
        if (dn->rdma || dn->fd >= 0 || now < dn->next_try_ns)
            continue;
        int rc = register_node(d, i, true);
        if (rc == 0) {
            dsay(d, "memory node %u: resumed as user %u", i, dn->uid);
        } else if (rc == FMEM_EBUSY) {
            /* the memory node has recovered our user id: every block our
             * applications held there is gone; only a restart is safe */
            dsay(d, "memory node %u: our user id was reclaimed; exiting", i);
            atomic_store(d->cfg->stop, 2);
        } else {
            dn->next_try_ns = now + 1000000000u;
        }
    }
}

void nodes_close(struct fmemd *d)
{
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[i];
        if (dn->fd >= 0) {
            /* every application is gone and its blocks given back */
            sock_send_msg(dn->fd, MSG_SVC_BYE, 0, NULL, 0, NULL, 0);
            close(dn->fd);
            dn->fd = -1;
        }
        if (dn->n) {
            node_close(dn->n);
            tp_close(dn->tp);
            if (dn->hb_tp)
                tp_close(dn->hb_tp);
            dn->hb_tp = NULL;
            dn->n = NULL;
        }
        if (dn->sess_map)
            munmap(dn->sess_map, dn->sess_len);
        dn->sess_map = NULL;
        dn->sess_words = NULL;
        if (dn->sess_fd >= 0)
            close(dn->sess_fd);
        dn->sess_fd = -1;
    }
}
