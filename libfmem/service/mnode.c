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
#include "service/occupancy.h"
#include "service/proto.h"
#include "service/ring.h"
#include "service/sock.h"
#include "session_table.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif

#define MAX_CONNS 256
#define MAX_HISTORY 16

struct conn {
    int fd;
    pid_t pid;
    uid_t cred_uid;
    bool service;     /* registered */
    unsigned uid;     /* its user id */
    int pidfd;
    char name[MSG_NAME_MAX];
    uint64_t last_hb_ns, heartbeats, connected_ns;
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
    int lfd;
    struct conn conns[MAX_CONNS];
    unsigned nconns;
    struct regen_stats regen;
    pthread_t regen_thr, rec_thr;
    bool regen_started, rec_started;
    _Atomic int quit;
    /* recovery queue and history */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct recovery_job jobs[MAX_CONNS];
    unsigned njobs, recovering;
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
        struct recovery_job j = m->jobs[0];
        memmove(&m->jobs[0], &m->jobs[1], sizeof j * (--m->njobs));
        m->recovering++;
        pthread_mutex_unlock(&m->mu);
        run_job(m, &j);
        pthread_mutex_lock(&m->mu);
        m->recovering--;
        pthread_cond_broadcast(&m->cv);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

static void queue_recovery(struct mnode *m, unsigned uid, int pidfd, bool do_fence,
                           const char *who)
{
    char name[MSG_NAME_MAX];
    snprintf(name, sizeof name, "%s", who); /* `who` may live inside *m */
    pthread_mutex_lock(&m->mu);
    if (m->njobs < MAX_CONNS) {
        struct recovery_job *j = &m->jobs[m->njobs++];
        j->uid = uid;
        j->pidfd = pidfd;
        j->fence = do_fence;
        snprintf(j->name, sizeof j->name, "%s", name);
        pthread_cond_broadcast(&m->cv);
    } else if (pidfd >= 0) {
        close(pidfd);
    }
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
            pthread_mutex_lock(&m->mu);
            if (m->njobs < MAX_CONNS) {
                struct recovery_job *j = &m->jobs[m->njobs++];
                *j = (struct recovery_job){.uid = u, .pidfd = -1, .remote = true};
                snprintf(j->name, sizeof j->name, "rdma service");
                pthread_cond_broadcast(&m->cv);
            } else {
                r->pending = false; /* try again next time */
            }
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
        for (unsigned i = 0; i < m->njobs; i++)
            held |= m->jobs[i].uid == u;
        held |= m->recovering > 0; /* check again when the queue is idle */
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
        say(m, "service %s (pid %d, user %u): %s", c->name, (int)c->pid, c->uid, why);
        /* a clean bye: nothing held, no fence; otherwise make sure it is
         * gone before touching its user id */
        queue_recovery(m, c->uid, c->pidfd, clean ? false : !m->cfg->no_fence, c->name);
        c->pidfd = -1;
    }
    if (c->pidfd >= 0)
        close(c->pidfd);
    close(c->fd);
    m->conns[i] = m->conns[--m->nconns];
}

static bool allowed(const struct mnode *m, uid_t u)
{
    return u == 0 || u == geteuid() || (m->cfg->allow_uid != (uid_t)-1 && u == m->cfg->allow_uid);
}

static void on_register(struct mnode *m, struct conn *c, const struct msg *msg)
{
    if (c->service) {
        sock_send_error(c->fd, msg->seq, FMEM_EINVAL, "already registered");
        return;
    }
    if (m->vs) {
        /* NIC atomics and CPU atomics on one pool do not mix */
        sock_send_error(c->fd, msg->seq, FMEM_ENOTSUP,
                        "this memory node serves its pool over RDMA only");
        return;
    }
    unsigned uid = 0;
    unsigned want = msg->u.reg.resume_uid;
    if (want) {
        bool taken = false;
        for (unsigned i = 0; i < m->nconns; i++)
            taken |= m->conns[i].service && m->conns[i].uid == want;
        if (!taken && want < m->node->g.nusers && node_uid_pid(m->node, want) == (uint32_t)c->pid &&
            session_get(m->sess, want))
            uid = want;
        else {
            /* not its slot any more, or its session was fenced */
            sock_send_error(c->fd, msg->seq, FMEM_EBUSY, "cannot resume that user id");
            return;
        }
    } else {
        int rc = node_claim_uid_for(m->node, (uint32_t)c->pid, &uid);
        if (rc) {
            sock_send_error(c->fd, msg->seq, rc, "no free user id");
            return;
        }
    }
    c->pidfd = pidfd_open_(c->pid);
    struct msg_svc_welcome w = {.uid = uid, .heartbeat_ms = m->cfg->heartbeat_ms,
                                .miss_limit = m->cfg->miss_limit,
                                .session = want ? session_get(m->sess, uid)
                                                : session_begin(m->sess, uid)};
    snprintf(w.pool, sizeof w.pool, "%s", m->cfg->pool_uri);
    int fds[3] = {shm_transport_meta_fd(m->node->tp), shm_transport_data_fd(m->node->tp),
                  m->sess->ro_fd};
    if (sock_send_msg(c->fd, MSG_SVC_WELCOME, msg->seq, &w, sizeof w, fds, 3) < 0) {
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
    snprintf(c->name, sizeof c->name, "%s", msg->u.reg.name);
    c->last_hb_ns = ring_now_ns();
    say(m, "service %s (pid %d) %s user %u", c->name, (int)c->pid, want ? "resumed" : "registered as",
        uid);
}

static void send_status(struct mnode *m, struct conn *c, uint32_t seq)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    struct occ_report r;
    occ_scan(&m->node->g, m->node->tp->base, &r, NULL);
    uint64_t now = ring_now_ns();
    fprintf(f, "memory node %s (pid %d, up %.0f s)\n", m->cfg->pool_uri, (int)getpid(),
            (now - m->started_ns) / 1e9);
    occ_print(&r, f);
    uint64_t keys = atomic_load(&m->regen.keys), wns = atomic_load(&m->regen.work_ns);
    fprintf(f, "  key regenerator: %llu keys issued in %llu passes, %.0f keys/s while working, "
               "last pass %llu\n",
            (unsigned long long)keys, (unsigned long long)atomic_load(&m->regen.scans),
            wns ? keys / (wns / 1e9) : 0.0, (unsigned long long)atomic_load(&m->regen.last_keys));
    unsigned nsvc = 0;
    for (unsigned i = 0; i < m->nconns; i++)
        nsvc += m->conns[i].service;
    fprintf(f, "services: %u\n", nsvc);
    for (unsigned i = 0; i < m->nconns; i++) {
        struct conn *s = &m->conns[i];
        if (!s->service)
            continue;
        fprintf(f, "  user %u: %s pid %d, %u applications holding %llu bytes, last heartbeat "
                   "%.0f ms ago\n",
                s->uid, s->name, (int)s->pid, s->napps, (unsigned long long)s->app_bytes,
                (now - s->last_hb_ns) / 1e6);
    }
    pthread_mutex_lock(&m->mu);
    fprintf(f, "recoveries: %llu (%u queued)\n", (unsigned long long)m->recoveries, m->njobs);
    for (unsigned i = 0; i < m->nhist; i++) {
        struct history *h = &m->hist[i];
        fprintf(f, "  user %u (%s): %s, %llu blocks, %llu bytes, %.3f ms\n", h->uid, h->name,
                h->why, (unsigned long long)h->st.blocks_freed,
                (unsigned long long)h->st.bytes_freed, h->st.elapsed_ns / 1e6);
    }
    pthread_mutex_unlock(&m->mu);
    fclose(f);
    if (len > MSG_TEXT_MAX)
        len = MSG_TEXT_MAX;
    sock_reply_msg(c->fd, MSG_STATUS_TEXT, seq, text, len, NULL, 0);
    free(text);
}

static void send_map(struct mnode *m, struct conn *c, const struct msg *msg)
{
    if (msg->u.status_req.node != 0) {
        sock_send_error(c->fd, msg->seq, FMEM_EINVAL, "a memory node has node 0 only");
        return;
    }
    uint64_t n = m->node->g.nspans;
    uint8_t *states = malloc(n);
    if (!states) {
        sock_send_error(c->fd, msg->seq, FMEM_ENOMEM, "out of memory");
        return;
    }
    struct occ_report r;
    occ_scan(&m->node->g, m->node->tp->base, &r, states);
    uint8_t *buf = malloc(sizeof(struct msg_map_chunk) + MSG_MAP_MAX);
    if (!buf) {
        free(states);
        sock_send_error(c->fd, msg->seq, FMEM_ENOMEM, "out of memory");
        return;
    }
    for (uint64_t first = 0; first < n || (n == 0 && first == 0); first += MSG_MAP_MAX) {
        struct msg_map_chunk *mc = (struct msg_map_chunk *)buf;
        mc->nspans = n;
        mc->first = first;
        mc->count = (uint32_t)(n - first < MSG_MAP_MAX ? n - first : MSG_MAP_MAX);
        mc->node = 0;
        memcpy(buf + sizeof *mc, states + first, mc->count);
        if (sock_send_msg(c->fd, MSG_MAP_CHUNK, msg->seq, buf, sizeof *mc + mc->count, NULL, 0) < 0)
            break;
        if (n == 0)
            break;
    }
    free(buf);
    free(states);
}

/* One message from connection i. false: drop the connection. */
static bool on_message(struct mnode *m, unsigned i)
{
    static uint8_t buf[MSG_MAX_BYTES];
    struct conn *c = &m->conns[i];
    ssize_t n = sock_recv(c->fd, buf, sizeof buf, NULL, 0, NULL);
    if (n == 0 || n == -1) {
        drop_conn(m, i, n == 0 ? "disconnected" : "socket error", false);
        return false;
    }
    struct msg msg;
    int rc = n == -2 ? FMEM_EINVAL : msg_decode(buf, (size_t)n, &msg);
    if (rc) {
        sock_send_error(c->fd, 0, rc, n == -2 ? "message too large" : "malformed message");
        if (!c->service) { /* a stranger sending junk: hang up */
            drop_conn(m, i, "malformed message", false);
            return false;
        }
        return true;
    }
    switch (msg.type) {
    case MSG_SVC_REGISTER:
        on_register(m, c, &msg);
        return true;
    case MSG_HEARTBEAT:
        if (!c->service)
            break;
        c->last_hb_ns = ring_now_ns();
        c->heartbeats++;
        c->napps = msg.u.heartbeat.napps;
        c->app_bytes = msg.u.heartbeat.app_bytes;
        return true;
    case MSG_SVC_BYE:
        if (!c->service)
            break;
        drop_conn(m, i, "said goodbye", true);
        return false;
    case MSG_STATUS_REQ:
        send_status(m, c, msg.seq);
        return true;
    case MSG_MAP_REQ:
        send_map(m, c, &msg);
        return true;
    default:
        break;
    }
    sock_send_error(c->fd, msg.seq, FMEM_EINVAL, "unexpected message");
    return true;
}

static void on_accept(struct mnode *m)
{
    int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    struct conn c = {.fd = fd, .pidfd = -1, .connected_ns = ring_now_ns()};
    gid_t g;
    if (sock_peer(fd, &c.pid, &c.cred_uid, &g) < 0 || !allowed(m, c.cred_uid)) {
        sock_send_error(fd, 0, FMEM_EACCES, "not allowed");
        close(fd);
        return;
    }
    if (m->nconns >= MAX_CONNS) {
        sock_send_error(fd, 0, FMEM_EBUSY, "too many connections");
        close(fd);
        return;
    }
    struct timeval tv = {.tv_sec = 1};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    m->conns[m->nconns++] = c;
}

static void check_heartbeats(struct mnode *m)
{
    uint64_t now = ring_now_ns();
    uint64_t limit = (uint64_t)m->cfg->heartbeat_ms * m->cfg->miss_limit * 1000000u;
    uint64_t stranger = 10000000000u; /* 10 s to register or ask */
    for (unsigned i = 0; i < m->nconns;) {
        struct conn *c = &m->conns[i];
        if (c->service && now - c->last_hb_ns > limit)
            drop_conn(m, i, "missed heartbeats", false);
        else if (!c->service && now - c->connected_ns > stranger)
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
    int rc = verbs_server_start(m->node->tp, addr, port, m->cfg->token_path, &m->vs);
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
    say(m, "rdma: serving on %s, %llu windows bound in %.1f ms, token in %s", m->cfg->rdma_addr,
        (unsigned long long)st.windows, st.setup_ns / 1e6, m->cfg->token_path);
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
    int rc = fmem_open(m->cfg->pool_uri, &m->pool);
    if (rc) {
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

int mnode_run(const struct mnode_config *cfg)
{
    struct mnode *m = calloc(1, sizeof *m);
    if (!m)
        return 1;
    m->cfg = cfg;
    m->lfd = -1;
    m->started_ns = ring_now_ns();
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    int status = 1;
    if (open_pool(m))
        goto out;
    if (cfg->rdma_addr && start_rdma(m))
        goto out;
    m->lfd = sock_listen(cfg->socket_path, cfg->socket_mode);
    if (m->lfd < 0) {
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
    uint64_t last_sweep = ring_now_ns();
    struct pollfd pf[MAX_CONNS + 1];
    while (!atomic_load(cfg->stop)) {
        unsigned n = m->nconns;
        pf[0] = (struct pollfd){.fd = m->lfd, .events = POLLIN};
        for (unsigned i = 0; i < n; i++)
            pf[i + 1] = (struct pollfd){.fd = m->conns[i].fd, .events = POLLIN};
        int r = poll(pf, n + 1, 100);
        if (r > 0) {
            /* walk backwards: dropping i moves the last connection into i */
            for (unsigned i = n; i-- > 0;)
                if (pf[i + 1].revents)
                    on_message(m, i);
            if (pf[0].revents & POLLIN)
                on_accept(m);
        }
        check_heartbeats(m);
        check_remote_heartbeats(m);
        if (ring_now_ns() - last_sweep > (uint64_t)cfg->sweep_ms * 1000000u) {
            sweep_dead_users(m);
            last_sweep = ring_now_ns();
        }
    }
    say(m, "shutting down");
    /* services keep their user ids: a restarted memory node resumes them */
    for (unsigned i = 0; i < m->nconns; i++) {
        sock_send_msg(m->conns[i].fd, MSG_SHUTDOWN, 0, NULL, 0, NULL, 0);
        if (m->conns[i].pidfd >= 0)
            close(m->conns[i].pidfd);
        close(m->conns[i].fd);
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
    if (m->lfd >= 0) {
        close(m->lfd);
        unlink(cfg->socket_path);
    }
    fmem_close(m->pool);
    session_table_close(m->sess);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
    return status;
}
