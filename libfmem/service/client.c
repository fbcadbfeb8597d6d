/* client.c - the service backend of fmem_pool: fmem_open("unix:/PATH") or
 * "fmem://[localhost]/PATH" connects to an fmemd. Allocation and free go
 * through the shared-memory ring to fmemd, which alone touches metadata;
 * the pool's data files (never its metadata) are mapped here, so fmem_map,
 * fmem_read and fmem_write run locally after checking that the handle is one
 * this client currently holds. On the shared-memory transport that check is
 * in software: a process that maps the data file can reach all of it.
 * A memory node that fmemd reaches over RDMA is reached from here with an
 * application queue pair that holds no key: fmem_read and fmem_write post
 * RDMA requests with the block's window key, which the NIC checks.
 *
 * Every use of a handle first checks that the service that issued it may
 * still serve us: fmemd has not revoked our ring (it drops us or shuts
 * down), and on shm nodes its session is still the live one in the memory
 * node's session table (the memory node ends it before it recovers a dead
 * or silent fmemd); over RDMA, the socket to fmemd is still up (the keys
 * of a recovered service's blocks die in the NIC anyway). Otherwise the
 * blocks may already be someone else's: FMEM_ESTALE. */
#include "service/client.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pool_internal.h"
#include "service/own.h"
#include "uri.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif
#include "service/ring.h"
#include "service/sock.h"
#include "session_table.h"

#define DEFAULT_SOCKET "/run/fmem/fmemd.sock"
#define CLIENT_SPIN_NS 8000  /* longest spin for a reply before sleeping */
#define CACHE_REFILL 16        /* blocks asked for when a class's cache is empty */
#define CACHE_KEEP 16          /* entries kept when a full cache is trimmed */

/* Our view of one size class of the ring's block cache (proto.h): entries
 * from n on are empty as far as we know (fmemd may have emptied others). */
struct cache_class {
    pthread_mutex_t mu;
    unsigned n;
};

struct svc_client {
    char path[108]; /* the service's socket */
    int sock;
    struct ring_hdr *ring;
    unsigned nnodes, app_id;
    void *data[SVC_MAX_NODES];              /* shm nodes: the mapped data */
    struct transport *rdma[SVC_MAX_NODES];  /* RDMA nodes: our queue pairs */
    _Atomic uint32_t told_qp[SVC_MAX_NODES]; /* type-2B nodes: the queue pair
                                              * fmemd binds our blocks to */
    uint64_t data_bytes[SVC_MAX_NODES];
    /* shm nodes: fmemd's word in its memory node's session table, and the
     * session it holds while fmemd may serve us */
    const _Atomic uint64_t *sess_word[SVC_MAX_NODES];
    uint64_t session[SVC_MAX_NODES];
    void *sess_map[SVC_MAX_NODES];
    size_t sess_len[SVC_MAX_NODES];
    pthread_rwlock_t lock; /* guards held */
    struct own_table held;
    pthread_mutex_t sock_mu; /* one socket request at a time */
    _Atomic bool dead;
    _Atomic uint64_t allocs, frees, failed, size_class[FMEM_SIZE_CLASSES];
    _Atomic uint64_t reads, writes, calls; /* fmem_read/write, requests to fmemd */
    _Atomic uint32_t seq;
    /* blocks of up to 4 KiB << (RING_CACHE_CLASSES - 1) come from the
     * ring's cache and go back to it (shm nodes only) */
    bool use_cache;
    struct cache_class cache[RING_CACHE_CLASSES];
};

static struct svc_client *C(fmem_pool *p) { return p->backend; }

/* "unix:/path", "unix:path", "fmem://", "fmem:///path", "fmem://localhost/path" */
static int socket_path(const char *uri, char *out, size_t cap)
{
    const char *path;
    if (!strncmp(uri, "unix:", 5)) {
        path = uri + 5;
    } else if (!strncmp(uri, "fmem://", 7)) {
        const char *host = uri + 7;
        path = strchr(host, '/');
        size_t hl = path ? (size_t)(path - host) : strlen(host);
        if (hl && !(hl == 9 && !strncmp(host, "localhost", 9)))
            return FMEM_EURI; /* only this machine's service is reachable */
        if (!path || !path[1])
            path = DEFAULT_SOCKET;
    } else {
        return FMEM_EURI;
    }
    if (!*path || strchr(path, '?') || strlen(path) >= cap || strlen(path) >= 108)
        return FMEM_EURI;
    strcpy(out, path);
    return 0;
}

static bool alive(void *ctx)
{
    struct svc_client *c = ctx;
    if (atomic_load(&c->dead))
        return false;
    struct pollfd p = {.fd = c->sock, .events = POLLRDHUP};
    if (poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP))) {
        atomic_store(&c->dead, true);
        return false;
    }
    return true;
}

/* Is the service that issued our handles gone (or has it let us go)? Once
 * true, for good. */
static bool service_gone(struct svc_client *c, unsigned node)
{
    if (atomic_load_explicit(&c->dead, memory_order_relaxed))
        return true;
    bool gone;
    if (!c->ring || atomic_load_explicit(&c->ring->revoked, memory_order_acquire))
        gone = true;
    else if (c->sess_word[node])
        gone = atomic_load_explicit(c->sess_word[node], memory_order_acquire) != c->session[node];
    else
        return !alive(c); /* an RDMA node: fmemd's socket tells */
    if (gone)
        atomic_store(&c->dead, true);
    return gone;
}

static int call(struct svc_client *c, struct ring_req *req, struct ring_rsp *rsp)
{
    if (atomic_load_explicit(&c->dead, memory_order_relaxed) || !c->ring ||
        atomic_load_explicit(&c->ring->revoked, memory_order_acquire))
        return FMEM_EIO;
    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    int rc = ring_call(c->ring, req, rsp, alive, c, CLIENT_SPIN_NS);
    if (rc)
        return rc;
    if (rsp->cookie != req->cookie)
        return FMEM_EIO;
    return rsp->rc;
}

/* Ask on the socket, wait for the reply of type `want`. */
static int sock_call(struct svc_client *c, uint16_t type, const void *p, size_t plen,
                     uint16_t want, struct msg *out, uint8_t *buf)
{
    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    pthread_mutex_lock(&c->sock_mu);
    uint32_t seq = atomic_fetch_add(&c->seq, 1) + 1;
    int rc = sock_send_msg(c->sock, type, seq, p, plen, NULL, 0) < 0 ? FMEM_EIO : 0;
    while (rc == 0) {
        ssize_t n = sock_recv_timeout(c->sock, buf, MSG_MAX_BYTES, NULL, 0, NULL, 10000);
        if (n <= 0 && n != -2) {
            rc = FMEM_EIO;
            break;
        }
        if (n == -2 || msg_decode(buf, (size_t)n, out) || out->seq != seq)
            continue; /* not the answer to this question */
        if (out->type == MSG_ERROR)
            rc = out->u.error.code;
        else if (out->type != want)
            rc = FMEM_EIO;
        break;
    }
    pthread_mutex_unlock(&c->sock_mu);
    return rc;
}

static int map_data(struct svc_client *c, unsigned i, int fd, uint64_t sz)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != sz)
        return FMEM_ECORRUPT;
    void *b = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED)
        return FMEM_EIO;
    c->data[i] = b;
    c->data_bytes[i] = sz;
    return 0;
}

/* "HOST:PORT" from fmemd: an application queue pair, no key. */
static int connect_rdma(struct svc_client *c, unsigned i, const char *addr, uint64_t sz)
{
#ifdef HAVE_RDMA
    char host[MSG_RDMA_ADDR_MAX], port[MSG_RDMA_ADDR_MAX];
    if (!uri_split_host_port(addr, host, sizeof host, port, sizeof port))
        return FMEM_EIO;
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_APP};
    int rc = verbs_transport_connect(&cp, &c->rdma[i]);
    if (rc)
        return rc;
    if (c->rdma[i]->size - c->rdma[i]->meta_size != sz)
        return FMEM_ECORRUPT;
    c->data_bytes[i] = sz;
    return 0;
#else
    (void)c, (void)i, (void)addr, (void)sz;
    return FMEM_ENOTSUP;
#endif
}

/* A node with type-2B windows (mw=type2) has fmemd bind our blocks'
 * windows to the memory node's end of our queue pair: tell fmemd its
 * number, and again after a reconnect replaced the queue pair (the keys
 * bound to the old one are useless now). */
static int tell_qp(struct svc_client *c, unsigned i)
{
#ifdef HAVE_RDMA
    struct transport *t = c->rdma[i];
    if (!t || verbs_transport_mw_type(t) != 2)
        return 0;
    uint32_t qp = verbs_transport_peer_qp(t);
    if (!qp)
        return FMEM_EIO;
    if (qp == atomic_load(&c->told_qp[i]))
        return 0;
    struct ring_req req = {.op = RING_SET_QP, .count = qp, .h = {.node = (uint16_t)i},
                           .cookie = atomic_fetch_add(&c->seq, 1)};
    struct ring_rsp rsp;
    int rc = call(c, &req, &rsp);
    if (rc == 0)
        atomic_store(&c->told_qp[i], qp);
    return rc;
#else
    (void)c, (void)i;
    return 0;
#endif
}

/* The session table of shm node i (fds from fmemd): fmemd's word in it. */
static int map_session(struct svc_client *c, unsigned i, int fd, unsigned uid, uint64_t session)
{
    const _Atomic uint64_t *words;
    uint64_t nusers;
    if (c->sess_map[i]) /* a fork child's new connection: not the parent's table */
        munmap(c->sess_map[i], c->sess_len[i]);
    c->sess_map[i] = NULL;
    c->sess_word[i] = NULL;
    int rc = session_map(fd, &words, &nusers, &c->sess_map[i], &c->sess_len[i]);
    if (rc)
        return rc;
    if (uid >= nusers)
        return FMEM_ECORRUPT;
    c->sess_word[i] = &words[uid];
    c->session[i] = session;
    /* a service already fenced hands out nothing that stays ours */
    return atomic_load(c->sess_word[i]) == session ? 0 : FMEM_ESTALE;
}

static int handshake(struct svc_client *c)
{
    struct msg_app_hello h = {0};
    snprintf(h.name, sizeof h.name, "%s", program_invocation_short_name);
    uint8_t *buf = malloc(MSG_MAX_BYTES);
    if (!buf)
        return FMEM_ENOMEM;
    int fds[SVC_MAX_FDS];
    unsigned nfds = 0;
    /* a refusal (not admitted, too many connections) arrives as MSG_ERROR,
     * even when fmemd closed the connection before our hello got there */
    ssize_t n = sock_ask(c->sock, MSG_APP_HELLO, 1, &h, sizeof h, buf, MSG_MAX_BYTES, fds,
                         SVC_MAX_FDS, &nfds, 10000);
    struct msg m;
    int rc = n > 0 ? msg_decode(buf, (size_t)n, &m) : FMEM_EIO;
    free(buf);
    if (rc == 0 && m.type == MSG_ERROR) {
        rc = m.u.error.code;
        if (rc == FMEM_EACCES)
            errno = EACCES; /* the service does not admit this user */
    } else if (rc == 0 && m.type != MSG_APP_WELCOME)
        rc = FMEM_EIO;
    unsigned nshm = 0;
    for (unsigned i = 0; rc == 0 && i < m.u.welcome.nnodes; i++)
        nshm += m.u.welcome.rdma_addr[i][0] == 0;
    if (rc == 0 && nfds != 2 * nshm + 1) /* ring, then data and sessions per shm node */
        rc = FMEM_EIO;
    if (rc == 0)
        rc = ring_map(fds[0], &c->ring);
    for (unsigned i = 0, f = 1; rc == 0 && i < m.u.welcome.nnodes; i++) {
        uint64_t sz = m.u.welcome.data_bytes[i];
        if (m.u.welcome.rdma_addr[i][0]) {
            atomic_store(&c->told_qp[i], 0);
            rc = connect_rdma(c, i, m.u.welcome.rdma_addr[i], sz);
            if (rc == 0)
                rc = tell_qp(c, i);
        } else {
            rc = map_data(c, i, fds[f], sz);
            if (rc == 0)
                rc = map_session(c, i, fds[f + 1], m.u.welcome.svc_uid[i], m.u.welcome.session[i]);
            f += 2;
        }
        if (rc == 0)
            c->nnodes = i + 1;
    }
    if (rc == 0)
        c->app_id = m.u.welcome.app_id;
    for (unsigned i = 0; i < nfds; i++)
        close(fds[i]);
    /* a new ring: its cache is empty. Nodes over RDMA: no cache (every
     * block comes with a round trip, as it always did) */
    const char *env = getenv("FMEM_SERVICE_CACHE");
    c->use_cache = rc == 0 && !(env && !strcmp(env, "0"));
    for (unsigned i = 0; i < c->nnodes; i++)
        c->use_cache &= c->rdma[i] == NULL;
    for (unsigned k = 0; k < RING_CACHE_CLASSES; k++)
        c->cache[k].n = 0;
    return rc;
}

static void cl_close(fmem_pool *p)
{
    struct svc_client *c = C(p);
    if (c) {
        for (unsigned i = 0; i < SVC_MAX_NODES; i++) {
            if (c->data[i])
                munmap(c->data[i], c->data_bytes[i]);
            if (c->sess_map[i])
                munmap(c->sess_map[i], c->sess_len[i]);
            if (c->rdma[i])
                tp_close(c->rdma[i]);
        }
        ring_unmap(c->ring);
        if (c->sock >= 0)
            close(c->sock); /* fmemd frees whatever is still held */
        own_free(&c->held);
        pthread_rwlock_destroy(&c->lock);
        pthread_mutex_destroy(&c->sock_mu);
        for (unsigned k = 0; k < RING_CACHE_CLASSES; k++)
            pthread_mutex_destroy(&c->cache[k].mu);
        free(c);
    }
    free(p);
}

/* ---- the block cache ------------------------------------------------------ */

static unsigned cache_scan(struct svc_client *c, unsigned k)
{
    unsigned n = RING_CACHE_ENTRIES;
    while (n && !(atomic_load_explicit(&c->ring->cache[k][n - 1].state, memory_order_acquire) & 1))
        n--;
    return n;
}

/* Take a full entry of class k (its mutex held). false: none left. */
static bool cache_pop(struct svc_client *c, unsigned k, fmem_handle *h)
{
    struct cache_class *cc = &c->cache[k];
    struct ring_cache_ent *e = c->ring->cache[k];
    while (cc->n) {
        unsigned i = --cc->n;
        uint32_t s = atomic_load_explicit(&e[i].state, memory_order_acquire);
        if (!(s & 1))
            continue; /* revoked by fmemd */
        memcpy(h, (const void *)&e[i].h, sizeof *h);
        if (atomic_compare_exchange_strong(&e[i].state, &s, s & ~1u))
            return true;
    }
    return false;
}

/* REFILL or TRIM class k (its mutex held), then look at the entries again. */
static int cache_call(struct svc_client *c, uint32_t op, unsigned k, unsigned count)
{
    struct ring_req req = {.op = op, .size = FMEM_CHUNK_SIZE << k, .count = count,
                           .cookie = atomic_fetch_add(&c->seq, 1)};
    struct ring_rsp rsp;
    int rc = call(c, &req, &rsp);
    c->cache[k].n = cache_scan(c, k);
    return rc;
}

static int cache_get(struct svc_client *c, unsigned k, fmem_handle *h)
{
    struct cache_class *cc = &c->cache[k];
    int rc = 0;
    pthread_mutex_lock(&cc->mu);
    for (int tries = 0;; tries++) {
        if (cache_pop(c, k, h))
            break;
        /* a refill that left nothing for us: the entries are being
         * scribbled on (by this process) */
        rc = tries < 2 ? cache_call(c, RING_REFILL, k, CACHE_REFILL) : FMEM_EIO;
        if (rc)
            break;
    }
    pthread_mutex_unlock(&cc->mu);
    return rc;
}

/* Put a block we hold back in the cache; false: no room (free it instead). */
static bool cache_put(struct svc_client *c, unsigned k, const fmem_handle *h)
{
    struct cache_class *cc = &c->cache[k];
    bool ok = false;
    pthread_mutex_lock(&cc->mu);
    if (cc->n == RING_CACHE_ENTRIES)
        cache_call(c, RING_TRIM, k, CACHE_KEEP); /* frees go back in batches */
    if (cc->n < RING_CACHE_ENTRIES) {
        struct ring_cache_ent *e = &c->ring->cache[k][cc->n];
        uint32_t s = atomic_load_explicit(&e->state, memory_order_relaxed);
        if (!(s & 1)) {
            memcpy((void *)&e->h, h, sizeof *h);
            atomic_store_explicit(&e->state, (((s >> 1) + 1) << 1) | 1, memory_order_release);
            cc->n++;
            ok = true;
        }
    }
    pthread_mutex_unlock(&cc->mu);
    return ok;
}

/* Every cached block back to the pool (one TRIM per class). */
static int cache_drain(struct svc_client *c)
{
    int rc = 0;
    for (unsigned k = 0; c->use_cache && c->ring && k < RING_CACHE_CLASSES; k++) {
        pthread_mutex_lock(&c->cache[k].mu);
        int r = c->cache[k].n ? cache_call(c, RING_TRIM, k, 0) : 0;
        pthread_mutex_unlock(&c->cache[k].mu);
        rc = rc ? rc : r;
    }
    return rc;
}

static bool cacheable(struct svc_client *c, uint64_t bytes)
{
    return c->use_cache && c->ring && bytes && bytes <= FMEM_CHUNK_SIZE << (RING_CACHE_CLASSES - 1);
}

static int cl_alloc(fmem_pool *p, size_t size, fmem_handle *out)
{
    struct svc_client *c = C(p);
    struct ring_rsp rsp;
    fmem_handle got, *h = &got;
    int rc;
    bool cached = cacheable(c, size);
    if (cached) {
        unsigned k = chunks_log2(size);
        if (atomic_load_explicit(&c->dead, memory_order_relaxed) ||
            atomic_load_explicit(&c->ring->revoked, memory_order_acquire))
            rc = FMEM_EIO; /* as a round trip would answer */
        else
            rc = cache_get(c, k, h);
        if (rc == 0 && h->length != FMEM_CHUNK_SIZE << k)
            rc = FMEM_EIO;
        /* fenced since it was cached: it may be another's now */
        if (rc == 0 && h->node < c->nnodes && service_gone(c, h->node))
            rc = FMEM_EIO;
    } else {
        struct ring_req req = {.op = RING_ALLOC, .size = size,
                               .cookie = atomic_fetch_add(&c->seq, 1)};
        rc = 0;
        for (unsigned i = 0; rc == 0 && i < c->nnodes; i++)
            rc = tell_qp(c, i);
        if (rc == 0)
            rc = call(c, &req, &rsp);
        h = &rsp.h;
    }
    if (rc == 0 && (h->node >= c->nnodes || h->length < size || h->length < FMEM_CHUNK_SIZE ||
                    (h->length & (h->length - 1)) || h->addr > c->data_bytes[h->node] ||
                    h->length > c->data_bytes[h->node] - h->addr))
        rc = FMEM_EIO; /* the service answered nonsense */
    if (rc == 0) {
        pthread_rwlock_wrlock(&c->lock);
        bool ok = own_put(&c->held, own_key(h->node, h->addr >> CHUNK_SHIFT), h->rkey,
                          chunks_log2(h->length));
        pthread_rwlock_unlock(&c->lock);
        if (!ok) {
            if (!cached || !cache_put(c, chunks_log2(h->length), h)) {
                struct ring_req fr = {.op = RING_FREE, .h = *h};
                call(c, &fr, &rsp);
            }
            rc = FMEM_ENOMEM;
        }
    }
    if (rc) {
        atomic_fetch_add_explicit(&c->failed, 1, memory_order_relaxed);
        return rc;
    }
    *out = *h;
    unsigned k = chunks_log2(h->length);
    atomic_fetch_add_explicit(&c->allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->size_class[k < FMEM_SIZE_CLASSES ? k : FMEM_SIZE_CLASSES - 1], 1,
                              memory_order_relaxed);
    return 0;
}

/* Is h a block this client holds? 0, FMEM_EBADHANDLE or FMEM_EACCES. */
static int held_check(struct svc_client *c, const fmem_handle *h)
{
    if (h->node >= c->nnodes || h->flags || h->length < FMEM_CHUNK_SIZE ||
        (h->length & (h->length - 1)) || (h->addr & (FMEM_CHUNK_SIZE - 1)))
        return FMEM_EBADHANDLE;
    struct own_entry *e = own_get(&c->held, own_key(h->node, h->addr >> CHUNK_SHIFT));
    if (!e || e->log2_chunks != chunks_log2(h->length))
        return FMEM_EBADHANDLE;
    return e->rkey == h->rkey ? 0 : FMEM_EACCES;
}

static int cl_free(fmem_pool *p, const fmem_handle *h)
{
    struct svc_client *c = C(p);
    pthread_rwlock_wrlock(&c->lock);
    int local = held_check(c, h);
    if (local == 0) /* no access from here on, even before fmemd answers */
        own_del(&c->held, own_get(&c->held, own_key(h->node, h->addr >> CHUNK_SHIFT)));
    pthread_rwlock_unlock(&c->lock);
    /* not a block we hold (a double free, another's): never sent as a
     * free, since fmemd would free a block our cache still holds; fmemd
     * only names the mistake, as an in-process pool would */
    if (local == FMEM_EBADHANDLE && h->node < c->nnodes && !service_gone(c, h->node)) {
        struct ring_req req = {.op = RING_FREE_CHECK, .h = *h,
                               .cookie = atomic_fetch_add(&c->seq, 1)};
        struct ring_rsp rsp;
        int verdict = call(c, &req, &rsp);
        return verdict == FMEM_EDOUBLEFREE || verdict == FMEM_EACCES ? verdict : local;
    }
    if (local)
        return local;
    if (service_gone(c, h->node))
        return FMEM_ESTALE; /* its service reclaims it, or already did */
    if (cacheable(c, h->length) && cache_put(c, chunks_log2(h->length), h)) {
        atomic_fetch_add_explicit(&c->frees, 1, memory_order_relaxed);
        return 0;
    }
    /* fmemd decides in any case: it checks its own table of our blocks */
    struct ring_req req = {.op = RING_FREE, .h = *h, .cookie = atomic_fetch_add(&c->seq, 1)};
    struct ring_rsp rsp;
    int rc = call(c, &req, &rsp);
    if (rc == 0)
        atomic_fetch_add_explicit(&c->frees, 1, memory_order_relaxed);
    return rc;
}

static int access_check(struct svc_client *c, const fmem_handle *h, uint64_t off, size_t len,
                        char **where)
{
    pthread_rwlock_rdlock(&c->lock);
    int rc = held_check(c, h);
    pthread_rwlock_unlock(&c->lock);
    if (rc)
        return rc;
    if (service_gone(c, h->node))
        return FMEM_ESTALE;
    if (off > h->length || len > h->length - off)
        return FMEM_ERANGE;
    *where = c->data[h->node] ? (char *)c->data[h->node] + h->addr + off : NULL;
    return 0;
}

static int cl_map(fmem_pool *p, const fmem_handle *h, void **ptr)
{
    char *w;
    int rc = access_check(C(p), h, 0, 0, &w);
    if (rc == 0 && !w)
        rc = FMEM_ENOTSUP; /* over RDMA: fmem_read / fmem_write */
    if (rc == 0)
        *ptr = w;
    return rc;
}

static int cl_remote(fmem_pool *p, const fmem_handle *h, uint64_t *remote_addr)
{
    struct svc_client *c = C(p);
    char *w;
    int rc = access_check(c, h, 0, 0, &w);
    if (rc == 0 && w)
        rc = FMEM_ENOTSUP; /* a shm node */
    if (rc == 0)
        *remote_addr = c->rdma[h->node]->remote_base + c->rdma[h->node]->meta_size + h->addr;
    return rc;
}

/* Copy between a held block and local memory: memcpy on a mapped shm
 * node; over RDMA a READ or WRITE with the block's key, which the NIC
 * checks again (the local check only spares a round trip for handles we
 * know are wrong). */
static int cl_copy(fmem_pool *p, const fmem_handle *h, uint64_t off, void *buf, size_t len,
                   bool write)
{
    struct svc_client *c = C(p);
    char *w;
    int rc = access_check(c, h, off, len, &w);
    if (rc || len == 0)
        return rc;
    atomic_fetch_add_explicit(write ? &c->writes : &c->reads, 1, memory_order_relaxed);
    if (w) {
        memcpy(write ? w : buf, write ? buf : w, len);
        /* fenced while copying: what was read may be another's data */
        return !write && service_gone(c, h->node) ? FMEM_ESTALE : 0;
    }
    struct transport *t = c->rdma[h->node];
    uint64_t at = t->meta_size + h->addr + off;
    rc = write ? tp_write_key(t, at, buf, len, h->rkey) : tp_read_key(t, at, buf, len, h->rkey);
    if (rc == FMEM_EACCES && service_gone(c, h->node))
        rc = FMEM_ESTALE; /* the key died with the service's blocks */
    return rc;
}

static int cl_read(fmem_pool *p, const fmem_handle *h, uint64_t off, void *dst, size_t len)
{
    return cl_copy(p, h, off, dst, len, false);
}

static int cl_write(fmem_pool *p, const fmem_handle *h, uint64_t off, const void *src, size_t len)
{
    return cl_copy(p, h, off, (void *)src, len, true);
}

static int cl_fork_identity(fmem_pool *p);

static int cl_stats(fmem_pool *p, fmem_stats_t *st)
{
    struct svc_client *c = C(p);
    if (atomic_load(&p->fork_identity) && pool_fork_identity(p))
        return FMEM_EIO; /* a fork child with no service to ask */
    /* the pool's figures count the blocks this application handed out,
     * not those waiting in its cache: they go back first */
    cache_drain(c);
    uint8_t *buf = malloc(MSG_MAX_BYTES);
    if (!buf)
        return FMEM_ENOMEM;
    struct msg m;
    int rc = sock_call(c, MSG_STATS_REQ, NULL, 0, MSG_STATS, &m, buf);
    free(buf);
    if (rc)
        return rc;
    st->capacity_bytes = m.u.stats.capacity_bytes;
    st->allocated_bytes = m.u.stats.allocated_bytes;
    st->metadata_bytes = m.u.stats.metadata_bytes;
    st->nodes = m.u.stats.nodes;
    st->user_id = m.u.stats.user_id;
    st->allocs = atomic_load(&c->allocs);
    st->frees = atomic_load(&c->frees);
    st->failed_allocs = atomic_load(&c->failed);
    /* what fmemd did in memory for this application's requests, plus this
     * process's own reads and writes of its blocks and its requests to
     * fmemd (each one round trip) */
    st->cas_ops = m.u.stats.cas_ops;
    st->cas_failures = m.u.stats.cas_failures;
    st->log_flushes = m.u.stats.log_flushes;
    st->max_retries = m.u.stats.max_retries;
    st->reads = m.u.stats.reads + atomic_load(&c->reads);
    st->writes = m.u.stats.writes + atomic_load(&c->writes);
    st->round_trips = m.u.stats.round_trips + atomic_load(&c->calls);
    for (int i = 0; i < FMEM_SIZE_CLASSES; i++)
        st->size_class_allocs[i] = atomic_load(&c->size_class[i]);
    return 0;
}

/* ---- fork() (pool_fork.c) ------------------------------------------------- */

/* A connection of the child's own (fork_mu held, or the child's only thread). */
static int cl_fork_identity(fmem_pool *p)
{
    struct svc_client *c = C(p);
    c->sock = sock_connect(c->path);
    int rc = c->sock < 0 ? FMEM_EIO : handshake(c);
    if (rc && c->sock >= 0) { /* no service: the copies still work; retried */
        close(c->sock);
        c->sock = -1;
    }
    return rc;
}

/* The child never speaks on the parent's connection: fmemd would take it
 * for the parent. It keeps private copies of the blocks the process held
 * (copied from the mapped data, or over RDMA with its own queue pair) and
 * connects anew as an application of its own. */
static int cl_fork_child(fmem_pool *p)
{
    struct svc_client *c = C(p);
    pthread_rwlock_init(&c->lock, NULL);
    pthread_mutex_init(&c->sock_mu, NULL);
    /* the parent's cache stays the parent's: its blocks were never ours */
    for (unsigned k = 0; k < RING_CACHE_CLASSES; k++) {
        pthread_mutex_init(&c->cache[k].mu, NULL);
        c->cache[k].n = 0;
    }
    c->use_cache = false; /* until our own connection's ring */
    struct own_table held = c->held;
    void *data[SVC_MAX_NODES];
    uint64_t bytes[SVC_MAX_NODES];
    unsigned nnodes = c->nnodes;
    memcpy(data, c->data, sizeof data);
    memcpy(bytes, c->data_bytes, sizeof bytes);
    c->held = (struct own_table){0};
    if (c->sock >= 0)
        close(c->sock); /* our descriptor only: the parent keeps its own */
    ring_unmap(c->ring);
    c->sock = -1;
    c->ring = NULL;
    memset(c->data, 0, sizeof c->data);
    memset(c->rdma, 0, sizeof c->rdma); /* the parent's queue pairs: left alone */
    c->nnodes = 0;
    int rc = 0;
    for (size_t i = 0; i < held.cap && rc == 0; i++) { /* mapped blocks: no connection needed */
        struct own_entry *e = &held.e[i];
        unsigned node = own_node(e->key);
        if (e->key < 2 || node >= nnodes || !data[node])
            continue;
        fmem_handle h = {.addr = own_chunk(e->key) << CHUNK_SHIFT,
                         .length = FMEM_CHUNK_SIZE << e->log2_chunks, .rkey = e->rkey,
                         .node = (uint16_t)node};
        char *at = (char *)data[node] + h.addr;
        rc = pool_fork_keep(p, &h, at, at);
    }
    for (unsigned i = 0; i < nnodes; i++)
        if (data[i])
            pool_fork_view(p, data[i], bytes[i]);
    atomic_store(&c->dead, false);
    /* a connection of our own: with the first allocation or free, unless
     * blocks over RDMA must be read now with a queue pair of our own */
    bool remote = false;
    for (size_t i = 0; i < held.cap; i++)
        remote |= held.e[i].key >= 2 && own_node(held.e[i].key) < nnodes &&
                  !data[own_node(held.e[i].key)];
    int conn = remote ? cl_fork_identity(p) : 0;
    if (conn == 0 && remote)
        atomic_store(&p->fork_identity, false);
    for (size_t i = 0; remote && i < held.cap; i++) { /* blocks over RDMA */
        struct own_entry *e = &held.e[i];
        unsigned node = own_node(e->key);
        if (e->key < 2 || node >= nnodes || data[node])
            continue;
        fmem_handle h = {.addr = own_chunk(e->key) << CHUNK_SHIFT,
                         .length = FMEM_CHUNK_SIZE << e->log2_chunks, .rkey = e->rkey,
                         .node = (uint16_t)node};
        /* mmap, not malloc: a fork handler (fork.c) */
        void *buf = mmap(NULL, h.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        struct transport *t = conn == 0 && node < c->nnodes ? c->rdma[node] : NULL;
        int r = buf == MAP_FAILED ? FMEM_ENOMEM
                : !t              ? FMEM_EIO
                                  : tp_read_key(t, t->meta_size + h.addr, buf, h.length, h.rkey);
        if (r == 0)
            r = pool_fork_keep(p, &h, NULL, buf);
        if (buf != MAP_FAILED)
            munmap(buf, h.length);
        rc = rc ? rc : r;
    }
    own_free(&held);
    return rc ? rc : conn;
}

static const struct pool_ops client_ops = {
    .alloc = cl_alloc,
    .free = cl_free,
    .map = cl_map,
    .remote = cl_remote,
    .read = cl_read,
    .write = cl_write,
    .stats = cl_stats,
    .close = cl_close,
    .fork_child = cl_fork_child,
    .fork_identity = cl_fork_identity,
};

int service_open(const char *uri, fmem_pool **out)
{
    char path[PATH_MAX];
    int rc = socket_path(uri, path, sizeof path);
    if (rc)
        return rc;
    fmem_pool *p = calloc(1, sizeof *p);
    struct svc_client *c = calloc(1, sizeof *c);
    if (!p || !c) {
        free(p);
        free(c);
        return FMEM_ENOMEM;
    }
    p->ops = &client_ops;
    p->backend = c;
    p->nnodes = 0; /* no metadata here: admin calls answer FMEM_ENOTSUP */
    p->shared = true;
    memcpy(c->path, path, strlen(path) + 1); /* socket_path() checked: < 108 */
    pthread_rwlock_init(&c->lock, NULL);
    pthread_mutex_init(&c->sock_mu, NULL);
    for (unsigned k = 0; k < RING_CACHE_CLASSES; k++)
        pthread_mutex_init(&c->cache[k].mu, NULL);
    c->sock = sock_connect(path);
    if (c->sock < 0) {
        /* the socket file's mode keeps this user out: a refusal too */
        rc = errno == EACCES || errno == EPERM ? FMEM_EACCES : FMEM_EIO;
    } else {
        rc = handshake(c);
    }
    if (rc) {
        int e = errno;
        cl_close(p);
        errno = e;
        return rc;
    }
    *out = p;
    return 0;
}

int service_ping(fmem_pool *p)
{
    if (!p || p->ops != &client_ops)
        return FMEM_ENOTSUP;
    struct ring_req req = {.op = RING_PING, .cookie = atomic_fetch_add(&C(p)->seq, 1)};
    struct ring_rsp rsp;
    return call(C(p), &req, &rsp);
}

int service_cache_drain(fmem_pool *p)
{
    if (!p || p->ops != &client_ops)
        return FMEM_ENOTSUP;
    return cache_drain(C(p));
}

struct ring_hdr *service_ring(fmem_pool *p)
{
    return p && p->ops == &client_ops ? C(p)->ring : NULL;
}

int service_socket(fmem_pool *p)
{
    return p && p->ops == &client_ops ? C(p)->sock : -1;
}
