/* mnode.c - the memory node daemon's core: the pool, the socket where
 * services register and tools ask for status, heartbeat watching, and the
 * regenerator and recovery threads.
 *
 * A service that stops answering (socket closed, or `miss_limit` heartbeat
 * periods without one) is fenced first: on shared memory the service maps
 * the metadata and nothing but its exit stops it from writing, so the memory
 * node kills it (SIGKILL through a pidfd taken at registration) and waits
 * for it to be gone, ends its session in the session table (its
 * applications' handles stop working) and waits a grace period; then its
 * user id is recovered while the other services keep allocating. */
#include "service/mnode.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "service/map_stream.h"
#include "service/notify.h"
#include "service/occupancy.h"
#include "service/peer.h"
#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"
#include "service/status_wire.h"
#include "session_table.h"
#include "service/uidtab.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif

#define MAX_HISTORY 16
/* Connections that have not registered (status tools, services about to):
 * PENDING_PER_UID of one user, PENDING_MAX in all; a newcomer pushes out
 * the least recently active one of the user holding most. Registered
 * services are bounded by the pool's user slots. */
#define PENDING_PER_UID 16
#define PENDING_MAX 64
#define ACCEPT_BATCH 16 /* connections taken off the backlog per turn */
#define STRANGER_NS 10000000000u /* to register, or between status requests */

struct conn {
    struct peer p;    /* socket, credentials, replies waiting */
    bool service;     /* registered */
    unsigned uid;     /* its user id */
    int pidfd;
    char name[MSG_NAME_MAX];
    uint64_t last_hb_ns, heartbeats;
    uint32_t napps;
    uint64_t app_bytes;
};

struct recovery_job {
    unsigned uid;
    int pidfd; /* -1: nothing to wait for */
    bool fence;
    bool remote; /* a service over RDMA: recover through the NIC (rpool) */
    char name[MSG_NAME_MAX];
};

struct history {
    unsigned uid;
    char name[MSG_NAME_MAX];
    char why[32];
    fmem_recovery_stats st;
    int rc;
};

struct remote_user {
    uint32_t pid;     /* the slot's holder when tracking began */
    uint64_t hb, ns;  /* its last heartbeat word, and when it changed */
    bool armed;       /* the word carries this holder's pid: a service */
    bool pending;     /* recovery queued */
};

struct mnode {
    const struct mnode_config *cfg;
    struct verbs_server *vs; /* serving over RDMA */
    pthread_t vs_thr;
    bool vs_started;
    atomic_int vs_stop;
    fmem_pool *rpool;        /* the pool through our own RDMA service, for
                              * recovering remote services with NIC atomics */
    struct remote_user *ru;  /* per user id: heartbeat tracking */
    fmem_pool *pool;
    struct node *node;
    struct session_table *sess; /* services' sessions (shm services only) */
    struct listener ls;
    struct conn *conns; /* services and strangers: conns_cap at most */
    unsigned nconns, conns_cap, nstrangers;
    struct uidtab uids;
    struct regen_stats regen;
    pthread_t regen_thr, rec_thr;
    bool regen_started, rec_started;
    _Atomic int quit;
    /* recovery queue (a ring of at most one job per user id: it holds
     * every user the pool has) and history */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct recovery_job *jobs;
    bool *queued; /* per user id: a job waits for it */
    unsigned jobs_head, njobs, recovering, recovering_uid;
    struct history hist[MAX_HISTORY];
    unsigned nhist;
    uint64_t recoveries;
    uint64_t started_ns;
};

static void say(const struct mnode *m, const char *fmt, ...)
{
    (void)m;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fmem-mnode: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static int pidfd_open_(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

static bool pid_alive(uint32_t pid)
{
    return pid && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

/* ---- background threads ------------------------------------------------- */

static void *regen_main(void *arg)
{
    struct mnode *m = arg;
    while (!atomic_load(&m->quit)) {
        regen_pass(m->node, &m->regen);
        for (unsigned t = 0; t < m->cfg->regen_ms && !atomic_load(&m->quit); t += 10)
            usleep(10000);
    }
    return NULL;
}

/* Wait until the process behind pidfd has exited, killing it first when
 * fencing. false: it is still there after the wait. */
static bool fence(int pidfd, bool kill_it)
{
    if (pidfd < 0)
        return true;
    if (kill_it)
        syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
    struct pollfd p = {.fd = pidfd, .events = POLLIN};
    return poll(&p, 1, kill_it ? 5000 : 2000) == 1;
}

/* A remote service cannot be killed from here; its session is fenced
 * instead: its queue pairs are shut and it may not reconnect, so nothing
 * it sends after this point reaches the pool. */
static void fence_remote(struct mnode *m, const struct recovery_job *j)
{
#ifdef HAVE_RDMA
    uint64_t session = verbs_server_session(m->vs, j->uid);
    unsigned shut = verbs_server_fence(m->vs, session);
    say(m, "user %u (%s): session %016llx fenced, %u connection(s) shut", j->uid, j->name,
        (unsigned long long)session, shut);
#else
    (void)m, (void)j;
#endif
}

static void run_job(struct mnode *m, struct recovery_job *j)
{
    bool gone = fence(j->pidfd, j->fence);
    if (j->pidfd >= 0)
        close(j->pidfd);
    struct history h = {.uid = j->uid};
    snprintf(h.name, sizeof h.name, "%s", j->name);
    if (!gone) {
        /* neither exited nor killable: recovering now would race with it */
        snprintf(h.why, sizeof h.why, "still alive: skipped");
        h.rc = FMEM_EBUSY;
        say(m, "user %u (%s) did not exit; not recovered", j->uid, j->name);
    } else {
        if (j->remote)
            fence_remote(m, j);
        /* its applications' handles fail from now on; any use of one that
         * passed the check just before has finished after the grace */
        else if (m->sess && session_end(m->sess, j->uid))
            session_grace();
        h.rc = fmem_recover(j->remote ? m->rpool : m->pool, j->uid, &h.st);
        snprintf(h.why, sizeof h.why, "%s", h.rc ? fmem_strerror(h.rc) : "recovered");
        say(m, "user %u (%s) recovered: %llu blocks, %llu bytes in %.3f ms", j->uid, j->name,
            (unsigned long long)h.st.blocks_freed, (unsigned long long)h.st.bytes_freed,
            h.st.elapsed_ns / 1e6);
    }
    pthread_mutex_lock(&m->mu);
    memmove(&m->hist[1], &m->hist[0], sizeof m->hist[0] * (MAX_HISTORY - 1));
    m->hist[0] = h;
    if (m->nhist < MAX_HISTORY)
        m->nhist++;
    m->recoveries++;
    pthread_mutex_unlock(&m->mu);
}

static void *recovery_main(void *arg)
{
    struct mnode *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (m->njobs == 0 && !atomic_load(&m->quit))
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->njobs == 0)
            break;
        struct recovery_job j = m->jobs[m->jobs_head];
        m->jobs_head = (m->jobs_head + 1) % (unsigned)m->node->g.nusers;
        m->njobs--;
        m->queued[j.uid] = false;
        m->recovering++;
        m->recovering_uid = j.uid;
        pthread_mutex_unlock(&m->mu);
        run_job(m, &j);
        pthread_mutex_lock(&m->mu);
        m->recovering--;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* Queue recovery of user id j->uid (m->mu held). A user has one job at
 * most: a second request for it joins the waiting one (fencing if either
 * asks, the process to wait for if only one knows it), so the queue never
 * holds more than the pool has users. */
static void push_job(struct mnode *m, const struct recovery_job *j)
{
    unsigned cap = (unsigned)m->node->g.nusers;
    if (j->uid == 0 || j->uid >= cap) {
        if (j->pidfd >= 0)
            close(j->pidfd);
        return;
    }
    if (m->queued[j->uid]) {
        for (unsigned k = 0; k < m->njobs; k++) {
            struct recovery_job *q = &m->jobs[(m->jobs_head + k) % cap];
            if (q->uid != j->uid)
                continue;
            q->fence |= j->fence;
            q->remote |= j->remote;
            if (q->pidfd < 0)
                q->pidfd = j->pidfd;
            else if (j->pidfd >= 0)
                close(j->pidfd);
            return;
        }
    }
    m->jobs[(m->jobs_head + m->njobs++) % cap] = *j;
    m->queued[j->uid] = true;
    pthread_cond_broadcast(&m->cv);
}

static void queue_recovery(struct mnode *m, unsigned uid, int pidfd, bool do_fence,
                           const char *who)
{
    struct recovery_job j = {.uid = uid, .pidfd = pidfd, .fence = do_fence};
    snprintf(j.name, sizeof j.name, "%s", who); /* `who` may live inside *m */
    pthread_mutex_lock(&m->mu);
    push_job(m, &j);
    pthread_mutex_unlock(&m->mu);
}

/* ---- services over RDMA: one-sided heartbeats --------------------------- */

#ifdef HAVE_RDMA
/* A remote service writes its heartbeat word (wkeys.h) every period; one
 * whose word has not changed for miss_limit periods is recovered through
 * the NIC. The word carries the writer's pid (as in its user slot) in its
 * high half, so a stale word of an earlier holder is not taken for a live
 * one; a process that runs the protocol itself over RDMA writes none and
 * is left to `fmem recover`. Before recovery its session is fenced
 * (fence_remote); a live one that finds itself fenced stops by itself
 * (daemon_nodes.c). */
static void check_remote_heartbeats(struct mnode *m)
{
    if (!m->rpool)
        return;
    uint64_t now = ring_now_ns();
    uint64_t limit = (uint64_t)m->cfg->heartbeat_ms * m->cfg->miss_limit * 1000000u;
    unsigned own = fmem_user_id(m->rpool, 0);
    for (unsigned u = 1; u < m->node->g.nusers && u < WK_HB_SLOTS; u++) {
        uint32_t pid = node_uid_pid(m->node, u);
        struct remote_user *r = &m->ru[u];
        uint64_t hb = verbs_server_heartbeat(m->vs, u);
        bool service = (uint32_t)(hb >> 32) == pid;
        if (!(pid & NODE_PID_REMOTE) || u == own || pid != r->pid || hb != r->hb ||
            service != r->armed) { /* a new holder, or alive */
            *r = (struct remote_user){.pid = pid, .hb = hb, .ns = now, .armed = service};
            continue;
        }
        if (r->armed && now - r->ns > limit && !r->pending) {
            r->pending = true;
            say(m, "remote service user %u (pid %u there): missed heartbeats", u,
                pid & ~NODE_PID_REMOTE);
            struct recovery_job j = {.uid = u, .pidfd = -1, .remote = true};
            snprintf(j.name, sizeof j.name, "rdma service");
            pthread_mutex_lock(&m->mu);
            push_job(m, &j);
            pthread_mutex_unlock(&m->mu);
        }
    }
}
#else
static void check_remote_heartbeats(struct mnode *m) { (void)m; }
#endif

/* Recover every user slot whose process is gone and that no registered
 * service holds (dead embedded users, services of an earlier run). */
static void sweep_dead_users(struct mnode *m)
{
    for (unsigned u = 1; u < m->node->g.nusers; u++) {
        uint32_t pid = node_uid_pid(m->node, u);
        /* users over RDMA live elsewhere: fmem recover reclaims them */
        if (!pid || u == m->node->uid || (pid & NODE_PID_REMOTE) || pid_alive(pid))
            continue;
        bool held = false;
        for (unsigned i = 0; i < m->nconns; i++)
            held |= m->conns[i].service && m->conns[i].uid == u;
        pthread_mutex_lock(&m->mu);
        held |= m->queued[u];
        held |= m->recovering && m->recovering_uid == u; /* its slot clears at the end */
        pthread_mutex_unlock(&m->mu);
        if (!held)
            queue_recovery(m, u, -1, false, "dead user");
    }
}

/* ---- connections ---------------------------------------------------------- */

static void drop_conn(struct mnode *m, unsigned i, const char *why, bool clean)
{
    struct conn *c = &m->conns[i];
    if (c->service) {
        say(m, "service %s (pid %d, user %u): %s", c->name, (int)c->p.pid, c->uid, why);
        /* a clean bye: nothing held, no fence; otherwise make sure it is
         * gone before touching its user id */
        queue_recovery(m, c->uid, c->pidfd, clean ? false : !m->cfg->no_fence, c->name);
        c->pidfd = -1;
    } else {
        m->nstrangers--;
        uidtab_sub(&m->uids, c->p.uid, true, ring_now_ns());
    }
    if (c->pidfd >= 0)
        close(c->pidfd);
    peer_close(&c->p);
    m->conns[i] = m->conns[--m->nconns];
}

static bool allowed(const struct mnode *m, uid_t u)
{
    return u == 0 || u == geteuid() || (m->cfg->allow_uid != (uid_t)-1 && u == m->cfg->allow_uid);
}

static void on_register(struct mnode *m, struct conn *c, const struct msg *msg)
{
    if (c->service) {
        peer_send_error(&c->p, msg->seq, FMEM_EINVAL, "already registered");
        return;
    }
    if (m->vs) {
        /* NIC atomics and CPU atomics on one pool do not mix */
        peer_send_error(&c->p, msg->seq, FMEM_ENOTSUP,
                        "this memory node serves its pool over RDMA only");
        return;
    }
    unsigned uid = 0;
    unsigned want = msg->u.reg.resume_uid;
    if (want) {
        bool taken = false;
        for (unsigned i = 0; i < m->nconns; i++)
            taken |= m->conns[i].service && m->conns[i].uid == want;
        if (!taken && want < m->node->g.nusers && node_uid_pid(m->node, want) == (uint32_t)c->p.pid &&
            session_get(m->sess, want))
            uid = want;
        else {
            /* not its slot any more, or its session was fenced */
            peer_send_error(&c->p, msg->seq, FMEM_EBUSY, "cannot resume that user id");
            return;
        }
    } else {
        int rc = node_claim_uid_for(m->node, (uint32_t)c->p.pid, &uid);
        if (rc) {
            peer_send_error(&c->p, msg->seq, rc, "no free user id");
            return;
        }
    }
    c->pidfd = pidfd_open_(c->p.pid);
    struct msg_svc_welcome w = {.uid = uid, .heartbeat_ms = m->cfg->heartbeat_ms,
                                .miss_limit = m->cfg->miss_limit,
                                .session = want ? session_get(m->sess, uid)
                                                : session_begin(m->sess, uid)};
    snprintf(w.pool, sizeof w.pool, "%s", m->cfg->pool_uri);
    int fds[3] = {shm_transport_meta_fd(m->node->tp), shm_transport_data_fd(m->node->tp),
                  m->sess->ro_fd};
    /* descriptors go straight out: nothing else waits on this socket
     * (requests are not read while replies wait), so it has room */
    if (peer_busy(&c->p) ||
        sock_reply_msg(c->p.fd, MSG_SVC_WELCOME, msg->seq, &w, sizeof w, fds, 3) < 0) {
        if (!want) {
            session_end(m->sess, uid);
            node_clear_uid(m->node, uid);
        }
        if (c->pidfd >= 0)
            close(c->pidfd);
        c->pidfd = -1;
        return;
    }
    c->service = true;
    c->uid = uid;
    m->nstrangers--;
    uidtab_sub(&m->uids, c->p.uid, true, ring_now_ns());
    snprintf(c->name, sizeof c->name, "%s", msg->u.reg.name);
    c->last_hb_ns = ring_now_ns();
    say(m, "service %s (pid %d) %s user %u", c->name, (int)c->p.pid, want ? "resumed" : "registered as",
        uid);
}

static int send_status(struct mnode *m, struct conn *c, uint32_t seq)
{
    struct st_builder *b = calloc(1, sizeof *b);
    if (!b)
        return peer_send_error(&c->p, seq, FMEM_ENOMEM, "out of memory");
    struct st_mnode s = {.pid = (uint64_t)getpid(),
                         .uptime_ns = ring_now_ns() - m->started_ns,
                         .keys = atomic_load(&m->regen.keys),
                         .key_passes = atomic_load(&m->regen.scans),
                         .key_work_ns = atomic_load(&m->regen.work_ns),
                         .key_last_pass = atomic_load(&m->regen.last_keys)};
    snprintf(s.pool, sizeof s.pool, "%s", m->cfg->pool_uri);
    for (unsigned i = 0; i < m->nconns; i++)
        s.services += m->conns[i].service;
    pthread_mutex_lock(&m->mu);
    s.recoveries = m->recoveries;
    s.recoveries_queued = m->njobs;
    pthread_mutex_unlock(&m->mu);
    st_add(b, ST_MNODE, &s);
    struct st_node n = {.connected = 1};
    snprintf(n.pool, sizeof n.pool, "%s", m->cfg->pool_uri);
    occ_scan(&m->node->g, m->node->tp->base, &n.occ, NULL);
    st_add(b, ST_NODE, &n);
    uint64_t now = ring_now_ns();
    for (unsigned i = 0; i < m->nconns; i++) {
        struct conn *sc = &m->conns[i];
        if (!sc->service)
            continue;
        struct st_peer pr = {.uid = sc->uid, .pid = (uint64_t)sc->p.pid, .apps = sc->napps,
                             .app_bytes = sc->app_bytes, .heartbeat_age_ns = now - sc->last_hb_ns};
        snprintf(pr.name, sizeof pr.name, "%s", sc->name);
        st_add(b, ST_PEER, &pr);
    }
    pthread_mutex_lock(&m->mu);
    for (unsigned i = 0; i < m->nhist; i++) {
        struct history *h = &m->hist[i];
        struct st_recovery r = {.uid = h->uid, .blocks = h->st.blocks_freed,
                                .bytes = h->st.bytes_freed, .elapsed_ns = h->st.elapsed_ns};
        snprintf(r.name, sizeof r.name, "%s", h->name);
        snprintf(r.why, sizeof r.why, "%s", h->why);
        st_add(b, ST_RECOVERY, &r);
    }
    pthread_mutex_unlock(&m->mu);
    int rc = peer_send(&c->p, MSG_STATUS_REPORT, seq, b->buf, b->len);
    free(b);
    return rc;
}

/* Status and map requests scan the whole pool: a few per second per user. */
static int scan_request(struct mnode *m, struct conn *c, const struct msg *msg, uint64_t now)
{
    if (!uidtab_scan_allowed(&m->uids, c->p.uid, now))
        return peer_send_error(&c->p, msg->seq, FMEM_EBUSY, "too many status requests; try again");
    if (msg->type == MSG_STATUS_REQ)
        return send_status(m, c, msg->seq);
    if (msg->u.status_req.node != 0)
        return peer_send_error(&c->p, msg->seq, FMEM_EINVAL, "a memory node has node 0 only");
    return map_stream_start(&c->p, msg->seq, 0, &m->node->g, m->node->tp->base, now);
}

/* One message from connection i. false: drop the connection. */
static bool on_message(struct mnode *m, unsigned i, uint64_t now)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct conn *c = &m->conns[i];
    ssize_t n = sock_recv(c->p.fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return true; /* nothing yet */
    if (n == 0 || n == -1) {
        drop_conn(m, i, n == 0 ? "disconnected" : "socket error", false);
        return false;
    }
    c->p.active = now;
    struct msg msg;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &msg);
    if (rc) {
        int sent = peer_send_error(&c->p, 0, rc, n == -2 ? "message too large" : "malformed message");
        if (!c->service || sent < 0) { /* a stranger sending junk: hang up */
            drop_conn(m, i, "malformed message", false);
            return false;
        }
        return true;
    }
    int sent = 0;
    switch (msg.type) {
    case MSG_SVC_REGISTER:
        on_register(m, c, &msg);
        break;
    case MSG_HEARTBEAT:
        if (!c->service) {
            sent = peer_send_error(&c->p, msg.seq, FMEM_EINVAL, "unexpected message");
            break;
        }
        c->last_hb_ns = ring_now_ns();
        c->heartbeats++;
        c->napps = msg.u.heartbeat.napps;
        c->app_bytes = msg.u.heartbeat.app_bytes;
        break;
    case MSG_SVC_BYE:
        if (!c->service) {
            sent = peer_send_error(&c->p, msg.seq, FMEM_EINVAL, "unexpected message");
            break;
        }
        drop_conn(m, i, "said goodbye", true);
        return false;
    case MSG_STATUS_REQ:
    case MSG_MAP_REQ:
        sent = scan_request(m, c, &msg, now);
        break;
    default:
        sent = peer_send_error(&c->p, msg.seq, FMEM_EINVAL, "unexpected message");
        break;
    }
    if (sent < 0) {
        drop_conn(m, i, "does not read its socket", false);
        return false;
    }
    return true;
}

/* Connection i has input, or room for what waits. false: it was dropped. */
static bool on_event(struct mnode *m, unsigned i, short revents, uint64_t now)
{
    struct conn *c = &m->conns[i];
    if (peer_busy(&c->p)) {
        if (peer_flush(&c->p, now) < 0 || ((revents & (POLLERR | POLLHUP)) && peer_busy(&c->p))) {
            drop_conn(m, i, "socket error", false);
            return false;
        }
        return true; /* its next request waits until the reply is out */
    }
    return on_message(m, i, now);
}

/* The least recently active stranger of uid (of anyone when uid is -1). */
static unsigned stalest_stranger(const struct mnode *m, uid_t uid)
{
    unsigned best = m->nconns;
    for (unsigned i = 0; i < m->nconns; i++) {
        const struct conn *c = &m->conns[i];
        if (!c->service && (uid == (uid_t)-1 || c->p.uid == uid) &&
            (best == m->nconns || c->p.active < m->conns[best].p.active))
            best = i;
    }
    return best;
}

/* Push out the least recently active stranger of `loser` (of anyone if
 * it has none). false: there is none. */
static bool push_out(struct mnode *m, uid_t loser)
{
    unsigned i = stalest_stranger(m, loser);
    if (i == m->nconns)
        i = stalest_stranger(m, (uid_t)-1);
    if (i == m->nconns)
        return false;
    sock_send_error(m->conns[i].p.fd, 0, FMEM_EBUSY,
                    "too many connections being opened; this one closed");
    drop_conn(m, i, "pushed out", false);
    return true;
}

/* Make room for a new stranger of uid: the user's own oldest goes when it
 * has its share, else the oldest of the user holding most. */
static void make_room(struct mnode *m, uid_t uid)
{
    if (uidtab_peek(&m->uids, uid).pending >= PENDING_PER_UID)
        push_out(m, uid);
    else if (m->nstrangers >= PENDING_MAX || m->nconns >= m->conns_cap)
        push_out(m, uidtab_most_pending(&m->uids));
}

static void on_accept(struct mnode *m, uint64_t now)
{
    for (unsigned k = 0; k < ACCEPT_BATCH; k++) {
        struct conn c = {.pidfd = -1};
        int r = listener_accept(&m->ls, &c.p, now);
        if (r < 0 && push_out(m, uidtab_most_pending(&m->uids)))
            r = listener_accept(&m->ls, &c.p, now); /* out of descriptors */
        if (r < 0)
            listener_shed(&m->ls, now);
        if (r != 1)
            return;
        if (!allowed(m, c.p.uid)) {
            char why[64];
            snprintf(why, sizeof why, "user %u may not use this memory node", (unsigned)c.p.uid);
            peer_refuse(c.p.fd, FMEM_EACCES, why);
            continue;
        }
        make_room(m, c.p.uid);
        if (m->nconns >= m->conns_cap || !uidtab_add(&m->uids, c.p.uid, true, now)) {
            peer_refuse(c.p.fd, FMEM_EBUSY, "too many connections");
            continue;
        }
        m->conns[m->nconns++] = c;
        m->nstrangers++;
        on_message(m, m->nconns - 1, now); /* its first request is usually here */
    }
}

static void check_heartbeats(struct mnode *m, uint64_t now)
{
    uint64_t limit = (uint64_t)m->cfg->heartbeat_ms * m->cfg->miss_limit * 1000000u;
    for (unsigned i = 0; i < m->nconns;) {
        struct conn *c = &m->conns[i];
        if (c->service && peer_since(now, c->last_hb_ns) > limit)
            drop_conn(m, i, "missed heartbeats", false);
        else if (peer_stalled(&c->p, now))
            drop_conn(m, i, "does not read its socket", false);
        else if (!c->service && !peer_busy(&c->p) && peer_since(now, c->p.active) > STRANGER_NS)
            drop_conn(m, i, "idle", false);
        else
            i++;
    }
}

/* ---- RDMA ------------------------------------------------------------------ */

#ifdef HAVE_RDMA
static void *verbs_main(void *arg)
{
    struct mnode *m = arg;
    if (verbs_server_run(m->vs, &m->vs_stop))
        say(m, "rdma: connection events failed");
    return NULL;
}
#endif

static int start_rdma(struct mnode *m)
{
#ifdef HAVE_RDMA
    char addr[64], port[64];
    if (!uri_split_host_port(m->cfg->rdma_addr, addr, sizeof addr, port, sizeof port)) {
        say(m, "--rdma %s: want ADDR:PORT", m->cfg->rdma_addr);
        return FMEM_EURI;
    }
    int rc = verbs_server_start(m->node->tp, addr, port, m->cfg->token_path,
                                m->cfg->mw_type2 ? VERBS_SERVER_MW_TYPE2 : 0, &m->vs);
    if (rc) {
        say(m, "rdma %s: %s", m->cfg->rdma_addr, fmem_strerror(rc));
        return rc;
    }
    m->vs_started = pthread_create(&m->vs_thr, NULL, verbs_main, m) == 0;
    /* our own service connection, for recovering remote services */
    char uri[400];
    snprintf(uri, sizeof uri, "rdma://%s:%s?token=%s", addr, port, m->cfg->token_path);
    m->ru = calloc(m->node->g.nusers, sizeof *m->ru);
    if (!m->vs_started || !m->ru ||
        (rc = fmem_open(uri, &m->rpool))) {
        say(m, "rdma: cannot connect to ourselves (%s)", fmem_strerror(rc ? rc : FMEM_ENOMEM));
        return rc ? rc : FMEM_ENOMEM;
    }
    struct verbs_server_stats st;
    verbs_server_get_stats(m->vs, &st);
    say(m, "rdma: serving on %s, %llu windows bound in %.1f ms, token in %s, "
        "applications' windows type %u", m->cfg->rdma_addr, (unsigned long long)st.windows,
        st.setup_ns / 1e6, m->cfg->token_path, st.mw_type);
    return m->vs_started ? 0 : FMEM_EIO;
#else
    say(m, "built without rdma-core: --rdma is not available");
    return FMEM_ENOTSUP;
#endif
}

static void stop_rdma(struct mnode *m)
{
#ifdef HAVE_RDMA
    if (m->rpool)
        fmem_close(m->rpool);
    m->rpool = NULL;
    free(m->ru);
    atomic_store(&m->vs_stop, 1);
    if (m->vs_started)
        pthread_join(m->vs_thr, NULL);
    if (m->vs) {
        struct verbs_server_stats st;
        verbs_server_get_stats(m->vs, &st);
        say(m, "rdma: %llu windows re-bound after frees (%.1f us each)",
            (unsigned long long)st.regenerated,
            st.regenerated ? st.regen_ns / 1e3 / st.regenerated : 0.0);
        verbs_server_stop(m->vs);
    }
#else
    (void)m;
#endif
}

/* ---- main loop ----------------------------------------------------------- */

static int open_pool(struct mnode *m)
{
    /* whoever may write the pool's files can read and rewrite every block:
     * only files of our own user, writable by no one else, are served */
    struct embedded_opts o = {.own_files = true};
    int rc = embedded_open_opts(m->cfg->pool_uri, &o, &m->pool);
    if (rc) {
        int e = errno;
        if (rc == FMEM_EIO && e == EPERM)
            say(m, "%s: refused: a pool file belongs to another user or group or others may "
                   "write it", m->cfg->pool_uri);
        else if (rc == FMEM_EIO)
            say(m, "%s: %s (%s)", m->cfg->pool_uri, fmem_strerror(rc),
                e == ELOOP    ? "a pool file is a symbolic link"
                : e == EEXIST ? "a link or another user's file is where the new pool's data "
                                "file goes"
                              : strerror(e));
        else
            say(m, "%s: %s", m->cfg->pool_uri, fmem_strerror(rc));
        return rc;
    }
    if (m->pool->nnodes != 1 || shm_transport_meta_fd(m->pool->nodes[0]->tp) < 0) {
        say(m, "%s: a memory node serves exactly one shm: or file: pool", m->cfg->pool_uri);
        return FMEM_EURI;
    }
    m->node = m->pool->nodes[0];
    if (m->cfg->rdma_addr)
        return 0; /* no local services: no session table */
    rc = session_table_open(m->node->path, m->node->g.nusers, &m->sess);
    if (rc) {
        say(m, "%s%s: %s", m->node->path ? m->node->path : "session table",
            m->node->path ? SESSION_SUFFIX : "", fmem_strerror(rc));
        return rc;
    }
    /* a session whose user slot is free is a leftover: nobody may use it */
    for (unsigned u = 1; u < m->node->g.nusers; u++)
        if (!node_uid_pid(m->node, u))
            session_end(m->sess, u);
    return 0;
}

/* Connections: every service the user table can hold, and the strangers. */
static int conns_open(struct mnode *m)
{
    peer_fd_budget(); /* services hold a socket and a pidfd each */
    m->conns_cap = (unsigned)m->node->g.nusers + PENDING_MAX;
    m->conns = calloc(m->conns_cap, sizeof *m->conns);
    m->jobs = calloc(m->node->g.nusers, sizeof *m->jobs);
    m->queued = calloc(m->node->g.nusers, sizeof *m->queued);
    return m->conns && m->jobs && m->queued ? 0 : FMEM_ENOMEM;
}

static void serve(struct mnode *m)
{
    const struct mnode_config *cfg = m->cfg;
    uint64_t last_sweep = ring_now_ns(), next_trim = 0;
    struct pollfd *pf = calloc(m->conns_cap + 1, sizeof *pf);
    if (!pf)
        return;
    while (!atomic_load(cfg->stop)) {
        uint64_t now = ring_now_ns();
        unsigned n = m->nconns;
        pf[0] = (struct pollfd){.fd = listener_paused(&m->ls, now) ? -1 : m->ls.fd,
                                .events = POLLIN};
        /* a connection with a reply waiting is polled for room, not requests */
        for (unsigned i = 0; i < n; i++)
            pf[i + 1] = (struct pollfd){.fd = m->conns[i].p.fd,
                                        .events = peer_busy(&m->conns[i].p) ? POLLOUT : POLLIN};
        int r = poll(pf, n + 1, 100);
        now = ring_now_ns();
        if (r > 0) {
            /* walk backwards: dropping i moves the last connection into i */
            for (unsigned i = n; i-- > 0;)
                if (pf[i + 1].revents)
                    on_event(m, i, pf[i + 1].revents, now);
            if (pf[0].revents & POLLIN)
                on_accept(m, now);
        }
        check_heartbeats(m, now);
        check_remote_heartbeats(m);
        if (now >= next_trim) {
            uidtab_trim(&m->uids, now);
            next_trim = now + 1000000000u;
        }
        if (ring_now_ns() - last_sweep > (uint64_t)cfg->sweep_ms * 1000000u) {
            sweep_dead_users(m);
            last_sweep = ring_now_ns();
        }
    }
    free(pf);
}

int mnode_run(const struct mnode_config *cfg)
{
    struct mnode *m = calloc(1, sizeof *m);
    if (!m)
        return 1;
    m->cfg = cfg;
    m->ls.fd = m->ls.spare = -1;
    m->started_ns = ring_now_ns();
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    int status = 1;
    if (open_pool(m))
        goto out;
    if (conns_open(m)) {
        say(m, "out of memory");
        goto out;
    }
    if (cfg->rdma_addr && start_rdma(m))
        goto out;
    if (listener_open(&m->ls, cfg->socket_path, cfg->socket_mode) < 0) {
        say(m, "%s: %s", cfg->socket_path, strerror(errno));
        goto out;
    }
    m->rec_started = pthread_create(&m->rec_thr, NULL, recovery_main, m) == 0;
    m->regen_started = m->rec_started && pthread_create(&m->regen_thr, NULL, regen_main, m) == 0;
    if (!m->regen_started) {
        say(m, "cannot start threads");
        goto out;
    }
    sweep_dead_users(m);
    say(m, "serving %s on %s (user %u, heartbeat %u ms x %u)", cfg->pool_uri, cfg->socket_path,
        m->node->uid, cfg->heartbeat_ms, cfg->miss_limit);
    svc_notify("READY=1\nSTATUS=serving the pool");
    serve(m);
    say(m, "shutting down");
    svc_notify("STOPPING=1");
    /* services keep their user ids: a restarted memory node resumes them */
    for (unsigned i = 0; i < m->nconns; i++) {
        sock_reply_msg(m->conns[i].p.fd, MSG_SHUTDOWN, 0, NULL, 0, NULL, 0);
        if (m->conns[i].pidfd >= 0)
            close(m->conns[i].pidfd);
        peer_close(&m->conns[i].p);
    }
    m->nconns = 0;
    status = 0;
out:
    atomic_store(&m->quit, 1);
    pthread_mutex_lock(&m->mu);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->regen_started)
        pthread_join(m->regen_thr, NULL);
    if (m->rec_started)
        pthread_join(m->rec_thr, NULL); /* finishes queued recoveries */
    stop_rdma(m); /* after them: remote recoveries go through it */
    listener_close(&m->ls, cfg->socket_path);
    fmem_close(m->pool);
    session_table_close(m->sess);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    uidtab_free(&m->uids);
    free(m->conns);
    free(m->jobs);
    free(m->queued);
    free(m);
    return status;
}
