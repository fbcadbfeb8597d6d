/* embedded.c - the embedded backend of fmem_pool: this process runs the
 * allocation protocol itself on one or more memory nodes; allocations are
 * spread across them round robin, falling over to the next node when one is
 * full. */
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fmem.h"
#include "pool_files.h"
#include "pool_internal.h"
#include "protocol.h"
#include "transport/store.h"
#include "uri.h"
#ifdef HAVE_RDMA
#include "verbs/transport_verbs.h"
#endif

/* Data bytes rounded up to whole sections; metadata sized to match. */
static void sizes_for(uint64_t data, uint64_t align, uint64_t *meta_size, uint64_t *data_size)
{
    uint64_t nsec = (data + FMEM_SECTION_SIZE - 1) / FMEM_SECTION_SIZE;
    if (nsec == 0)
        nsec = 1;
    struct geometry g;
    layout_geometry(nsec, align, &g);
    *meta_size = g.data_off;
    *data_size = g.data_size;
}

/* hugetlbfs files must be sized in whole huge pages */
static uint64_t file_align(const struct node_uri *u)
{
    struct statfs sf;
    char dir[PATH_MAX];
    if (u->kind != URI_FILE)
        return 4096;
    snprintf(dir, sizeof dir, "%s", u->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = 0;
    return statfs(dir, &sf) == 0 && sf.f_type == HUGETLBFS_MAGIC ? (2u << 20) : 4096;
}

static int open_transport(const struct node_uri *u, uint64_t size,
                          const struct embedded_opts *o, struct transport **tp, int *created)
{
    if (u->kind == URI_RDMA) {
#ifdef HAVE_RDMA
        *created = 0; /* the memory node made the pool */
        /* this process runs the protocol: it needs the services' token */
        struct verbs_connect_params cp = {.host = u->path, .port = u->port,
                                          .src = u->src[0] ? u->src : NULL,
                                          .role = VERBS_ROLE_SERVICE,
                                          .token_path = u->token[0] ? u->token : NULL};
        return verbs_transport_connect(&cp, tp);
#else
        (void)size;
        (void)tp;
        (void)created;
        return FMEM_ENOTSUP; /* built without rdma-core */
#endif
    }
    if (u->kind == URI_SSD || u->kind == URI_ZMEM) {
        /* metadata in private memory, data in the store (store.h) */
        uint64_t meta, data;
        struct store *s;
        sizes_for(size, 4096, &meta, &data);
        *created = 1;
        int rc = u->kind == URI_SSD ? ssd_store_open(u, data, &s) : zmem_store_open(u, data, &s);
        return rc ? rc : store_transport_open(s, meta, u->rtt_ns, tp);
    }
    struct shm_params sp = {
        .path = u->kind == URI_MEM ? NULL : u->path,
        .create = u->create,
        .rtt_ns = u->rtt_ns,
        .rtt_mode = u->rtt_mode,
        .bw = u->bw,
        .check_owner = o && o->own_files,
        .owner = geteuid(),
    };
    if (size)
        sizes_for(size, file_align(u), &sp.meta_size, &sp.data_size);
    return shm_transport_open(&sp, tp, created);
}

static int open_node(struct fmem_pool *p, const struct node_uri *u, uint64_t size,
                     const struct embedded_opts *o)
{
    bool admin = o && o->admin;
    struct transport *tp;
    int created = 0;
    int rc = open_transport(u, size, o, &tp, &created);
    if (rc)
        return rc;
    struct node *n;
    enum node_user how = admin ? NODE_NO_USER : u->user ? NODE_CLAIM_EXACT : NODE_CLAIM_ANY;
    rc = node_open_user(tp, created, how, u->user, &n);
    if (rc) {
        tp_close(tp);
        if (created && (u->kind == URI_SHM || u->kind == URI_FILE))
            pool_files_unlink(u->path); /* leave no half-made pool */
        return rc;
    }
    n->private_pool = u->kind == URI_MEM || u->kind == URI_SSD || u->kind == URI_ZMEM;
    if ((u->kind == URI_SHM || u->kind == URI_FILE) && !(n->path = strdup(u->path))) {
        node_close(n);
        tp_close(tp);
        return FMEM_ENOMEM;
    }
    n->index = p->nnodes;
    p->nodes[p->nnodes++] = n;
    return 0;
}

static void emb_close(fmem_pool *p);
static int emb_alloc(fmem_pool *p, size_t size, fmem_handle *out);
static int emb_free(fmem_pool *p, const fmem_handle *h);
static int emb_map(fmem_pool *p, const fmem_handle *h, void **ptr);
static int emb_remote(fmem_pool *p, const fmem_handle *h, uint64_t *remote_addr);
static int emb_read(fmem_pool *p, const fmem_handle *h, uint64_t offset, void *dst, size_t len);
static int emb_write(fmem_pool *p, const fmem_handle *h, uint64_t offset, const void *src, size_t len);
static int emb_stats(fmem_pool *p, fmem_stats_t *st);

static int emb_fork_child(fmem_pool *p);
static int emb_fork_identity(fmem_pool *p);

static const struct pool_ops embedded_ops = {
    .alloc = emb_alloc,
    .free = emb_free,
    .map = emb_map,
    .remote = emb_remote,
    .read = emb_read,
    .write = emb_write,
    .stats = emb_stats,
    .close = emb_close,
    .fork_child = emb_fork_child,
    .fork_identity = emb_fork_identity,
};

int embedded_open(const char *uri, fmem_pool **out)
{
    return embedded_open_opts(uri, NULL, out);
}

int embedded_open_opts(const char *uri, const struct embedded_opts *o, fmem_pool **out)
{
    struct node_uri *us = calloc(URI_MAX_NODES, sizeof *us);
    struct fmem_pool *p = calloc(1, sizeof *p);
    if (!us || !p) {
        free(us);
        free(p);
        return FMEM_ENOMEM;
    }
    int n = uri_parse(uri, us, URI_MAX_NODES), rc = 0;
    if (n < 0) {
        rc = n;
        goto out;
    }
    bool admin = o && o->admin;
    for (int i = 0; i < n && rc == 0; i++) {
        struct node_uri *u = &us[i];
        if (admin && u->kind == URI_MEM) {
            rc = FMEM_EURI; /* a private pool: nothing to administer */
            break;
        }
        if (admin)
            u->create = false; /* an administrator never makes a pool */
        uint64_t size = u->size                                      ? u->size
                        : u->kind == URI_MEM || u->kind == URI_ZMEM ? FMEM_DEFAULT_SIZE
                                                                     : 0;
        if (u->kind == URI_SSD && !size) {
            uri_set_error("ssd:%.100s: needs size= (the capacity it offers)", u->path);
            rc = FMEM_EURI;
            break;
        }
        if (admin && (u->kind == URI_SSD || u->kind == URI_ZMEM)) {
            uri_set_error("%s nodes are private to the process that opens them",
                          u->kind == URI_SSD ? "ssd:" : "zmem:");
            rc = FMEM_EURI;
            break;
        }
        if (size > LAYOUT_MAX_SECTIONS * FMEM_SECTION_SIZE) { /* no pool file holds it */
            rc = FMEM_ESIZE;
            break;
        }
        for (unsigned k = 0; k < u->nodes && rc == 0; k++) {
            if (p->nnodes >= URI_MAX_NODES) {
                rc = FMEM_EURI;
                break;
            }
            rc = open_node(p, u, size, o);
        }
    }
out:
    free(us);
    if (rc) {
        emb_close(p);
        return rc;
    }
    p->ops = &embedded_ops;
    for (unsigned i = 0; i < p->nnodes; i++) /* files or RDMA: not ours alone */
        p->shared |= !p->nodes[i]->tp->base || shm_transport_shared(p->nodes[i]->tp);
    *out = p;
    return 0;
}

/* Closing a pool gives back every block allocated through it that is
 * still allocated (on pools other processes map), as a service does for
 * an application that goes: a user id then never leaves blocks behind
 * when its slot is released. */
static void emb_close(fmem_pool *p)
{
    for (unsigned i = 0; i < p->nnodes; i++) {
        struct transport *tp = p->nodes[i]->tp;
        if (atomic_load(&p->allocs))
            node_release_blocks(p->nodes[i]);
        node_close(p->nodes[i]);
        /* a fork child leaves the parent's queue pairs alone: closing them
         * here would close them for the parent */
        if (!(p->fork_lost && !tp->base))
            tp_close(tp);
    }
    free(p);
}

/* ---- fork() of a shared pool (pool_fork.c) -------------------------------- */

struct keep_walk {
    fmem_pool *p;
    unsigned index;
    int rc;
};

/* A block the process held (its latest log entry is our allocation):
 * keep a private copy where it is mapped. */
static void keep_held(struct node *n, uint64_t c, uint64_t e, void *arg)
{
    struct keep_walk *k = arg;
    unsigned log2c = log_log2(e);
    if (c & ((UINT64_C(1) << log2c) - 1))
        return; /* a later section of a block of several */
    uint64_t cap;
    int rc = tp_read(n->tp, key_off(n, c, log2c), &cap, 8) < 0 ? FMEM_EIO : 0;
    if (rc == 0) {
        fmem_handle h = {.addr = c << CHUNK_SHIFT, .length = FMEM_CHUNK_SIZE << log2c,
                         .rkey = cap_main(cap), .node = (uint16_t)k->index};
        char *at = (char *)n->tp->base + data_off(n, c);
        rc = pool_fork_keep(k->p, &h, at, at);
    }
    if (rc && !k->rc)
        k->rc = rc;
}

/* In the child: private copies of our blocks on nodes other processes
 * share, the pool mapped anew, and a user id of our own on them. A node
 * over RDMA is out of reach: its queue pairs are the parent's. */
static int emb_fork_child(fmem_pool *p)
{
    int rc = 0;
    for (unsigned i = 0; i < p->nnodes; i++) {
        struct node *n = p->nodes[i];
        if (!n->tp->base) {
            p->fork_lost = true;
            n->owns_uid = false; /* nothing may go out on those queue pairs */
            rc = FMEM_ENOTSUP;
            continue;
        }
        if (!shm_transport_shared(n->tp))
            continue; /* private memory: the kernel copied it */
        node_flush_all(n, 0, NULL);
        struct keep_walk k = {.p = p, .index = i};
        int64_t scanned = node_walk_allocs(n, n->uid, keep_held, &k);
        int r = scanned < 0 ? (int)scanned : k.rc;
        void *old;
        size_t len;
        int m = shm_transport_remap(n->tp, &old, &len);
        if (m == 0)
            m = pool_fork_view(p, old, len);
        /* the parent's user id stays the parent's; ours comes with our
         * first allocation or free (emb_fork_identity) */
        if (n->owns_uid) {
            n->owns_uid = false;
            n->fork_claim = true;
            n->uid = 0;
        }
        if (!rc)
            rc = r ? r : m;
    }
    return rc;
}

static int emb_fork_identity(fmem_pool *p)
{
    for (unsigned i = 0; i < p->nnodes; i++) {
        struct node *n = p->nodes[i];
        unsigned uid;
        if (!n->fork_claim)
            continue;
        int rc = node_claim_uid_for(n, node_own_pid(n), &uid);
        if (rc)
            return rc;
        n->uid = uid;
        n->owns_uid = true;
        n->slot_pid = node_own_pid(n);
        n->fork_claim = false;
    }
    return 0;
}

_Thread_local int pool_alloc_hint = -1;

static int emb_alloc(fmem_pool *p, size_t size, fmem_handle *out)
{
    if (p->nnodes && p->nodes[0]->no_user)
        return FMEM_ENOTSUP; /* an admin open: no user id to allocate as */
    uint64_t max = 0;
    for (unsigned i = 0; i < p->nnodes; i++)
        if (p->nodes[i]->g.data_size > max)
            max = p->nodes[i]->g.data_size;
    if (size == 0 || size > max) {
        atomic_fetch_add_explicit(&p->failed_allocs, 1, memory_order_relaxed);
        return FMEM_ESIZE;
    }
    unsigned k = chunks_log2(size);
    unsigned start = pool_alloc_hint >= 0 ? (unsigned)pool_alloc_hint
                                          : atomic_fetch_add_explicit(&p->rr, 1, memory_order_relaxed);
    int rc = FMEM_ENOMEM;
    for (unsigned i = 0; i < p->nnodes; i++) {
        struct node *n = p->nodes[(start + i) % p->nnodes];
        uint64_t chunk;
        uint32_t rkey;
        rc = node_alloc(n, k, &chunk, &rkey);
        uint64_t retries = node_last_retries, cur = atomic_load(&p->max_retries);
        while (retries > cur && !atomic_compare_exchange_weak(&p->max_retries, &cur, retries))
            ;
        if (rc == 0) {
            out->addr = chunk << CHUNK_SHIFT;
            out->length = FMEM_CHUNK_SIZE << k;
            out->rkey = rkey;
            out->node = (uint16_t)n->index;
            atomic_fetch_add_explicit(&p->allocs, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&p->size_class[k < FMEM_SIZE_CLASSES ? k : FMEM_SIZE_CLASSES - 1],
                                      1, memory_order_relaxed);
            return 0;
        }
        if (rc != FMEM_ENOMEM)
            break;
    }
    atomic_fetch_add_explicit(&p->failed_allocs, 1, memory_order_relaxed);
    return rc;
}

/* Resolve a handle to (node, first chunk, log2 chunks) with shape checks. */
int pool_resolve(fmem_pool *p, const fmem_handle *h, struct node **n, uint64_t *chunk,
                 unsigned *log2c)
{
    if (!p || !h)
        return FMEM_EINVAL;
    if (h->node >= p->nnodes || h->flags != 0 || h->length < FMEM_CHUNK_SIZE ||
        (h->length & (h->length - 1)) || (h->addr & (FMEM_CHUNK_SIZE - 1)))
        return FMEM_EBADHANDLE;
    *n = p->nodes[h->node];
    *chunk = h->addr >> CHUNK_SHIFT;
    *log2c = chunks_log2(h->length);
    if (*chunk >= (*n)->g.nchunks)
        return FMEM_EBADHANDLE;
    return 0;
}

static int emb_free(fmem_pool *p, const fmem_handle *h)
{
    struct node *n;
    uint64_t chunk;
    unsigned k;
    int rc = pool_resolve(p, h, &n, &chunk, &k);
    if (rc)
        return rc;
    if (n->no_user)
        return FMEM_ENOTSUP;
    rc = node_free(n, chunk, k, h->rkey);
    if (rc == 0)
        atomic_fetch_add_explicit(&p->frees, 1, memory_order_relaxed);
    return rc;
}

static int access_range(fmem_pool *p, const fmem_handle *h, uint64_t offset, size_t len,
                        struct node **n, uint64_t *chunk)
{
    unsigned k;
    int rc = pool_resolve(p, h, n, chunk, &k);
    if (rc)
        return rc;
    if (offset > h->length || len > h->length - offset)
        return FMEM_ERANGE;
    return node_check_access(*n, *chunk, k, h->rkey);
}

static int emb_remote(fmem_pool *p, const fmem_handle *h, uint64_t *remote_addr)
{
    struct node *n;
    uint64_t chunk;
    int rc = access_range(p, h, 0, 0, &n, &chunk);
    if (rc)
        return rc;
    if (!n->tp->remote_base)
        return FMEM_ENOTSUP;
    *remote_addr = n->tp->remote_base + data_off(n, chunk);
    return 0;
}

static int emb_map(fmem_pool *p, const fmem_handle *h, void **ptr)
{
    struct node *n;
    uint64_t chunk;
    int rc = access_range(p, h, 0, 0, &n, &chunk);
    if (rc)
        return rc;
    if (!n->tp->base || n->tp->data_apart)
        return FMEM_ENOTSUP; /* not mapped: fmem_read/fmem_write */
    *ptr = (char *)n->tp->base + data_off(n, chunk);
    return 0;
}

static int emb_read(fmem_pool *p, const fmem_handle *h, uint64_t offset, void *dst, size_t len)
{
    struct node *n;
    uint64_t chunk;
    int rc = access_range(p, h, offset, len, &n, &chunk);
    if (rc || len == 0)
        return rc;
    return tp_read_key(n->tp, data_off(n, chunk) + offset, dst, len, h->rkey);
}

static int emb_write(fmem_pool *p, const fmem_handle *h, uint64_t offset, const void *src, size_t len)
{
    struct node *n;
    uint64_t chunk;
    int rc = access_range(p, h, offset, len, &n, &chunk);
    if (rc || len == 0)
        return rc;
    return tp_write_key(n->tp, data_off(n, chunk) + offset, src, len, h->rkey);
}

static int emb_stats(fmem_pool *p, fmem_stats_t *st)
{
    st->nodes = p->nnodes;
    st->user_id = p->nnodes ? p->nodes[0]->uid : 0;
    for (unsigned i = 0; i < p->nnodes; i++) {
        struct node *n = p->nodes[i];
        st->capacity_bytes += n->g.data_size;
        st->metadata_bytes += n->g.metadata_bytes;
        st->allocated_bytes += node_allocated_bytes(n);
        st->cas_ops += atomic_load(&n->tp->n_cas);
        st->cas_failures += atomic_load(&n->tp->n_cas_fail);
        st->reads += atomic_load(&n->tp->n_reads);
        st->writes += atomic_load(&n->tp->n_writes);
        st->round_trips += atomic_load(&n->tp->n_rtts);
        st->log_flushes += atomic_load(&n->tp->n_logs);
    }
    st->allocs = atomic_load(&p->allocs);
    st->frees = atomic_load(&p->frees);
    st->failed_allocs = atomic_load(&p->failed_allocs);
    st->max_retries = atomic_load(&p->max_retries);
    for (int i = 0; i < FMEM_SIZE_CLASSES; i++)
        st->size_class_allocs[i] = atomic_load(&p->size_class[i]);
    return 0;
}

static const char *const kind_names[] = {"mem", "shm", "file", "rdma", "ssd", "zmem"};

int fmem_node_stats(fmem_pool *p, unsigned node, fmem_node_stats_t *st)
{
    if (!p || !st)
        return FMEM_EINVAL;
    memset(st, 0, sizeof *st);
    if (p->ops != &embedded_ops)
        return FMEM_ENOTSUP; /* a service's nodes are the service's */
    if (node >= p->nnodes)
        return FMEM_EINVAL;
    struct node *n = p->nodes[node];
    st->capacity_bytes = n->g.data_size;
    if (n->tp->ops->stats) {
        n->tp->ops->stats(n->tp, st);
        return 0;
    }
    enum uri_kind k = !n->tp->base ? URI_RDMA : n->private_pool ? URI_MEM
                      : n->path && !strncmp(n->path, "/dev/shm/", 9) ? URI_SHM : URI_FILE;
    snprintf(st->kind, sizeof st->kind, "%s", kind_names[k]);
    return 0;
}

void pool_disable_logging(fmem_pool *p)
{
    for (unsigned i = 0; i < p->nnodes; i++) {
        p->nodes[i]->log_none = true;
    }
}
