/* verbs_server.c - the memory node's RDMA side. The pool (metadata and data,
 * mapped back to back) is registered once as a single memory region that
 * grants no remote access by itself; remote access goes through type-1
 * memory windows bound over it:
 *   - one over the metadata and one over the window-key table (wkeys.h),
 *     whose keys only services holding the node's token are given;
 *   - two over every aligned block (main and backup), their keys kept in
 *     the window-key table, which the allocation protocol reads and CASes
 *     like the capability table.
 * After setup the memory node's CPU takes no part in allocation; its one
 * background job is the regenerator: when a free has promoted a backup
 * window, it destroys the old main window (the freed key dies in the NIC),
 * binds a fresh window over the block and stores its key as the new
 * backup. Its CAS goes through the NIC (a loopback connection), because
 * CPU atomics are not atomic with respect to the NIC's. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"
#include "layout.h"
#include "node.h"
#include "verbs/transport_verbs.h"
#include "verbs/verbs_mw2.h"
#include "verbs/verbs_proto.h"
#include "wkeys.h"

#define BIND_DEPTH 128          /* binds in flight on the bind queue pair */
#define IDLE_SCAN_NS 100000000u /* scan at least this often without a doorbell */
/* While doorbells keep coming, the scan of the whole table (for entries
 * whose hint a later ring overwrote) at most this often: a scan reads every
 * entry, and on a software NIC it takes the CPU the clients' requests need */
#define RING_SCAN_NS 2000000u
/* and, as often as this, the log for marks that landed after their entry
 * got its new backup (a client's own frees send the mark behind the key
 * CAS and ring once for a run of frees, alloc.c: ring_owed) */
#define FINISH_SCAN_NS 20000000u
#define MAX_FENCED 256          /* sessions remembered as fenced */
#define BLOCK_ACCESS (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

struct verbs_server {
    struct transport *pool;
    char addr[64], port[8], token_path[256];
    uint8_t token[VERBS_TOKEN_BYTES];
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_mr *mr;       /* the data: local write and window binding only */
    struct ibv_mr *meta_mr;  /* the metadata, likewise */
    struct ibv_cq *cq;       /* shared by client connections: never polled */
    uint64_t nchunks, nentries;
    _Atomic uint64_t *wk;    /* window-key table (header, then entries) */
    size_t wk_bytes;
    struct ibv_mr *wk_mr;
    struct ibv_mw *meta_mw, *wk_mw;
    struct ibv_mw *(*mw)[2]; /* per entry: the windows of main and backup */
    /* the regenerator */
    struct ibv_qp *_Atomic bind_qp; /* server side of the first loopback QP */
    struct ibv_cq *bind_cq;
    struct transport *local; /* loopback client: CAS through the NIC */
    struct node *qnode;      /* the protocol over it: frees quarantined blocks */
    pthread_t regen;
    bool regen_started;
    /* services' connections by session, and the sessions fenced */
    pthread_mutex_t conns_mu;
    struct service_conn { struct rdma_cm_id *id; uint64_t session; } *conns;
    size_t nconns, conns_cap;
    uint64_t fenced[MAX_FENCED]; /* a ring: the oldest is forgotten */
    unsigned nfenced;
    unsigned flags;          /* VERBS_SERVER_* */
    struct mw2 *mw2;         /* mw=type2: applications' type-2B windows */
    /* mw=type2: applications' connections that are gone but still have
     * windows bound to their queue pairs (destroyed once they have none;
     * only the event thread touches this) */
    struct rdma_cm_id **zombies;
    size_t nzombies, zombies_cap;
    atomic_int ready;        /* 1: windows bound; -1: setup failed */
    atomic_int stop;
    _Atomic uint64_t windows, regenerated, passes, regen_ns, setup_ns, quarantined;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void say(const char *fmt, const char *a, int e)
{
    fprintf(stderr, "fmem: rdma memory node: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, e ? ": %s\n" : "\n", strerror(e));
}

/* ---- windows ------------------------------------------------------------ */

/* Bind `n` windows: mws[i] over (addr[i], len[i]) of `mr`. */
static int bind_windows(struct verbs_server *s, struct ibv_mw **mws, struct ibv_mr *mr,
                        const uint64_t *addr, const uint64_t *len, int access, size_t n)
{
    size_t posted = 0, done = 0;
    while (done < n) {
        while (posted < n && posted - done < BIND_DEPTH) {
            struct ibv_mw_bind b = {
                .wr_id = posted,
                .send_flags = IBV_SEND_SIGNALED,
                .bind_info = {.mr = mr, .addr = addr[posted], .length = len[posted],
                              .mw_access_flags = (unsigned)access},
            };
            int e = ibv_bind_mw(s->bind_qp, mws[posted], &b);
            if (e) {
                say("bind a memory window%s", "", e);
                return FMEM_EIO;
            }
            posted++;
        }
        struct ibv_wc wc[16];
        int k = ibv_poll_cq(s->bind_cq, 16, wc);
        if (k < 0)
            return FMEM_EIO;
        for (int i = 0; i < k; i++)
            if (wc[i].status != IBV_WC_SUCCESS) {
                say("window bind failed: %s", ibv_wc_status_str(wc[i].status), 0);
                return FMEM_EIO;
            }
        done += (size_t)k;
    }
    return 0;
}

/* The block of entry e: level k such that e is in it, and its chunk. */
static void entry_block(const struct verbs_server *s, uint64_t e, uint64_t *chunk, unsigned *k)
{
    unsigned lv = 0;
    uint64_t start = 0;
    while (e >= start + (s->nchunks >> lv)) {
        start += s->nchunks >> lv;
        lv++;
    }
    *k = lv;
    *chunk = (e - start) << lv;
}

static void block_range(const struct verbs_server *s, uint64_t e, uint64_t *addr, uint64_t *len)
{
    uint64_t c;
    unsigned k;
    entry_block(s, e, &c, &k);
    *addr = (uintptr_t)s->pool->base + s->pool->meta_size + (c << CHUNK_SHIFT);
    *len = (uint64_t)FMEM_CHUNK_SIZE << k;
}

/* Allocate and bind fresh windows for entries ents[0..n) (slot[i] of each). */
static int fresh_windows(struct verbs_server *s, const uint64_t *ents, const unsigned *slot,
                         size_t n)
{
    struct ibv_mw **mws = calloc(n, sizeof *mws);
    uint64_t *addr = calloc(n, 8), *len = calloc(n, 8);
    int rc = mws && addr && len ? 0 : FMEM_ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        mws[i] = ibv_alloc_mw(s->pd, IBV_MW_TYPE_1);
        if (!mws[i]) {
            say("allocate a memory window%s", "", errno);
            rc = FMEM_EIO;
            break;
        }
        block_range(s, ents[i], &addr[i], &len[i]);
    }
    if (rc == 0)
        rc = bind_windows(s, mws, s->mr, addr, len, BLOCK_ACCESS, n);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0) {
            s->mw[ents[i]][slot[i]] = mws[i];
        } else if (mws && mws[i]) {
            ibv_dealloc_mw(mws[i]);
        }
    }
    free(mws);
    free(addr);
    free(len);
    return rc;
}

/* Bind the metadata and table windows and two windows per block. */
static int bind_all(struct verbs_server *s)
{
    uint64_t t0 = now_ns();
    s->meta_mw = ibv_alloc_mw(s->pd, IBV_MW_TYPE_1);
    s->wk_mw = ibv_alloc_mw(s->pd, IBV_MW_TYPE_1);
    if (!s->meta_mw || !s->wk_mw)
        return FMEM_EIO;
    uint64_t a = (uintptr_t)s->pool->base, l = s->pool->meta_size;
    int rc = bind_windows(s, &s->meta_mw, s->meta_mr, &a, &l, BLOCK_ACCESS, 1);
    a = (uintptr_t)s->wk;
    l = s->wk_bytes;
    if (rc == 0)
        rc = bind_windows(s, &s->wk_mw, s->wk_mr, &a, &l, BLOCK_ACCESS, 1);
    enum { STEP = 4096 };
    uint64_t ents[STEP];
    unsigned slot[STEP];
    for (uint64_t e0 = 0; rc == 0 && e0 < s->nentries; e0 += STEP / 2) {
        size_t n = 0;
        for (uint64_t e = e0; e < s->nentries && e < e0 + STEP / 2; e++) {
            ents[n] = e, slot[n++] = 0;
            ents[n] = e, slot[n++] = 1;
        }
        rc = fresh_windows(s, ents, slot, n);
        for (size_t i = 0; rc == 0 && i < n; i += 2) {
            uint32_t m = s->mw[ents[i]][0]->rkey, b = s->mw[ents[i]][1]->rkey;
            atomic_store(&s->wk[WK_HDR / 8 + ents[i]], cap_make(m, b));
        }
    }
    atomic_store(&s->windows, 2 * s->nentries + 2);
    atomic_store(&s->setup_ns, now_ns() - t0);
    return rc;
}

/* ---- quarantine (alloc.c) -------------------------------------------------
 * A free leaves its block allocated and its log entry marked; once the old
 * window of the block's entry is destroyed and the entry has a backup
 * again, the regenerator frees the block in its layer through the
 * protocol (NIC atomics over its loopback connection). It is the only one
 * that does, so two finishes of one block cannot race. */

/* The full log entry of chunk c, read by the CPU (a hint: the finish reads
 * it again through the NIC). */
static uint64_t log_word(const struct verbs_server *s, uint64_t c)
{
    const _Atomic uint64_t *log = (const _Atomic uint64_t *)((char *)s->pool->base +
                                                             s->qnode->g.log_off);
    return atomic_load_explicit(&log[c], memory_order_relaxed);
}

/* Free the block of entry e if it is quarantined and its old key is dead.
 * A marked log entry of a later part of a whole-section block (log2 9 in
 * the section layer: a finish cut short left it) is not the 2 MiB block
 * whose key entry shares its chunk: only at start (parts), when every old
 * window is gone, is it finished alone. */
static void finish_entry(struct verbs_server *s, uint64_t e, bool parts)
{
    uint64_t c;
    unsigned k;
    if (!s->qnode)
        return;
    entry_block(s, e, &c, &k);
    uint64_t le = log_word(s, c);
    if (!log_quarantined(le) || log_log2(le) != k ||
        (k == 9 && log_layer(le) == LAYER_SECTION && !parts))
        return;
    if (cap_backup(atomic_load(&s->wk[WK_HDR / 8 + e])) == 0)
        return; /* the old window is not destroyed yet */
    if (node_quarantine_finish(s->qnode, c, k) == 0)
        atomic_fetch_add(&s->quarantined, 1);
}

/* Every quarantined block whose old window is dead (at start: all). */
static void finish_all(struct verbs_server *s)
{
    if (!s->qnode)
        return;
    for (uint64_t c = 0; c < s->qnode->g.nchunks; c++) {
        uint64_t le = log_word(s, c);
        if (log_quarantined(le) && log_log2(le) <= 40 && !(c & ((UINT64_C(1) << log_log2(le)) - 1)) &&
            (UINT64_C(1) << log_log2(le)) <= s->qnode->g.nchunks - c)
            finish_entry(s, wk_entry(s->nchunks, c, log_log2(le)), true);
    }
}

/* One pass over entries [first, end): every entry whose backup a free took
 * gets a fresh backup; the window of the revoked key is destroyed first. */
static uint64_t regen_pass(struct verbs_server *s, uint64_t first, uint64_t end)
{
    enum { STEP = 1024 };
    uint64_t ents[STEP], vals[STEP], fixed = 0, t0 = now_ns();
    unsigned slot[STEP];
    uint64_t e = first;
    while (e < end) {
        size_t n = 0;
        for (; e < end && n < STEP; e++) {
            uint64_t v = atomic_load(&s->wk[WK_HDR / 8 + e]);
            if (cap_backup(v) != 0)
                continue;
            /* the window that is not the live main one held the freed key */
            unsigned old = s->mw[e][0] && s->mw[e][0]->rkey == cap_main(v) ? 1 : 0;
            if (s->mw[e][old]) {
                ibv_dealloc_mw(s->mw[e][old]);
                s->mw[e][old] = NULL;
            }
            ents[n] = e, slot[n] = old, vals[n++] = v;
        }
        if (n == 0)
            break;
        if (fresh_windows(s, ents, slot, n))
            break;
        struct tp_op ops[STEP];
        for (size_t i = 0; i < n; i++)
            ops[i] = (struct tp_op){
                .kind = TP_CAS,
                .off = s->local->wkeys_off + WK_HDR + 8 * ents[i],
                .expect = vals[i],
                .desired = cap_make(cap_main(vals[i]), s->mw[ents[i]][slot[i]]->rkey),
                .rkey = s->wk_mw->rkey, /* connected before it was bound */
            };
        if (tp_batch(s->local, ops, n))
            break;
        for (size_t i = 0; i < n; i++) {
            if (ops[i].old == vals[i]) {
                fixed++;
                finish_entry(s, ents[i], false); /* a freed block leaves quarantine */
            } else { /* changed meanwhile (cannot happen: nobody else fills
                      * backups); drop the window, the next pass retries */
                ibv_dealloc_mw(s->mw[ents[i]][slot[i]]);
                s->mw[ents[i]][slot[i]] = NULL;
            }
        }
    }
    atomic_fetch_add(&s->passes, 1);
    if (fixed) {
        atomic_fetch_add(&s->regenerated, fixed);
        atomic_fetch_add(&s->regen_ns, now_ns() - t0);
    }
    return fixed;
}

static void *regen_main(void *arg)
{
    struct verbs_server *s = arg;
    struct verbs_connect_params cp = {.host = s->addr, .port = s->port,
                                      .role = VERBS_ROLE_LOCAL, .token_path = s->token_path};
    int rc = verbs_transport_connect(&cp, &s->local);
    for (int i = 0; rc == 0 && !atomic_load(&s->bind_qp); i++) {
        if (i == 500) /* 5 s */
            rc = FMEM_EIO;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    if (rc == 0)
        rc = bind_all(s);
    if (rc) {
        say("window setup failed (%s)", fmem_strerror(rc), 0);
        atomic_store(&s->ready, -1);
        return NULL;
    }
    /* the loopback connection was made before the windows existed */
    verbs_transport_set_keys(s->local, s->meta_mw->rkey, s->wk_mw->rkey);
    if (node_open_user(s->local, false, NODE_NO_USER, 0, &s->qnode))
        say("cannot run the protocol over loopback: freed blocks stay quarantined%s", "", 0);
    finish_all(s); /* quarantined before a restart: every old window is gone */
    atomic_store(&s->ready, 1);
    uint64_t bell = atomic_load(&s->wk[0]), last = now_ns(), last_scan = last, last_finish = last;
    bool owed = false; /* a ring's scan was put off (RING_SCAN_NS) */
    while (!atomic_load(&s->stop)) {
        uint64_t b = atomic_load(&s->wk[0]), t = now_ns();
        if (owed && b == bell && t - last_scan > RING_SCAN_NS) {
            regen_pass(s, 0, s->nentries);
            last_scan = t;
            owed = false;
            if (t - last_finish > FINISH_SCAN_NS) {
                finish_all(s);
                last_finish = t;
            }
            continue;
        }
        if (b != bell || t - last > IDLE_SCAN_NS) {
            /* the entry the doorbell names first (its free is waiting),
             * then everything: two rings in a row leave one hint */
            uint64_t hint = b & ((UINT64_C(1) << WK_BELL_SHIFT) - 1);
            bool idle = b == bell; /* the periodic scan */
            if (b != bell && hint && hint <= s->nentries) {
                regen_pass(s, hint - 1, hint);
                finish_entry(s, hint - 1, false); /* its mark may have landed late */
            }
            bell = b;
            last = t;
            if (idle || t - last_scan > RING_SCAN_NS) {
                regen_pass(s, 0, s->nentries);
                last_scan = t;
                owed = false;
            } else {
                owed = true;
            }
            if (idle || t - last_finish > FINISH_SCAN_NS) { /* marks that landed
                                                              * after their entry's pass */
                finish_all(s);
                last_finish = t;
            }
            continue;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* ---- connections -------------------------------------------------------- */

static int setup_region(struct verbs_server *s, struct ibv_context *ctx)
{
    if (s->pd)
        return 0;
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da))
        return FMEM_EIO;
    if (!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) ||
        (uint64_t)da.max_mw < 2 * s->nentries + 2) {
        fprintf(stderr, "fmem: rdma memory node: the device has %d memory windows; a pool of "
                "%llu chunks needs %llu\n", da.max_mw, (unsigned long long)s->nchunks,
                (unsigned long long)(2 * s->nentries + 2));
        return FMEM_ESIZE;
    }
    s->pd = ibv_alloc_pd(ctx);
    s->cq = s->pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
    if (!s->cq)
        return FMEM_EIO;
    /* No remote access through the regions' own keys: only through windows.
     * Metadata, data and the key table are separate regions because some
     * NICs check a window's address range against its region rather than
     * the window (soft-RoCE does): a block key must not reach metadata. */
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
    char *base = s->pool->base;
    s->meta_mr = ibv_reg_mr(s->pd, base, s->pool->meta_size, acc);
    s->mr = ibv_reg_mr(s->pd, base + s->pool->meta_size, s->pool->size - s->pool->meta_size, acc);
    s->wk_mr = ibv_reg_mr(s->pd, (void *)s->wk, s->wk_bytes, acc);
    if (!s->mr || !s->meta_mr || !s->wk_mr)
        return FMEM_EIO;
    if (s->flags & VERBS_SERVER_MW_TYPE2)
        return mw2_start(ctx, s->pd, s->mr, (uintptr_t)base + s->pool->meta_size,
                         (uintptr_t)base + s->pool->size, &s->mw2);
    return 0;
}

/* ---- sessions and fencing ------------------------------------------------ */

static bool is_fenced(const struct verbs_server *s, uint64_t session)
{
    unsigned n = s->nfenced < MAX_FENCED ? s->nfenced : MAX_FENCED;
    for (unsigned i = 0; i < n; i++)
        if (s->fenced[i] == session)
            return true;
    return false;
}

/* Remember a service's connection (under conns_mu); false: no memory. */
static bool conn_add(struct verbs_server *s, struct rdma_cm_id *id, uint64_t session)
{
    if (s->nconns == s->conns_cap) {
        size_t cap = s->conns_cap ? 2 * s->conns_cap : 16;
        struct service_conn *c = realloc(s->conns, cap * sizeof *c);
        if (!c)
            return false;
        s->conns = c;
        s->conns_cap = cap;
    }
    s->conns[s->nconns++] = (struct service_conn){.id = id, .session = session};
    return true;
}

static void conn_forget(struct verbs_server *s, struct rdma_cm_id *id)
{
    pthread_mutex_lock(&s->conns_mu);
    for (size_t i = 0; i < s->nconns; i++)
        if (s->conns[i].id == id) {
            s->conns[i] = s->conns[--s->nconns];
            break;
        }
    pthread_mutex_unlock(&s->conns_mu);
}

uint64_t verbs_server_session(struct verbs_server *s, unsigned uid)
{
    if (uid >= WK_HB_SLOTS)
        return 0;
    return atomic_load(&s->wk[wk_hb_pair(s->nchunks, uid) / 8 + 1]);
}

unsigned verbs_server_fence(struct verbs_server *s, uint64_t session)
{
    if (session == 0)
        return 0;
    unsigned shut = 0;
    pthread_mutex_lock(&s->conns_mu);
    if (!is_fenced(s, session))
        s->fenced[s->nfenced++ % MAX_FENCED] = session;
    for (size_t i = 0; i < s->nconns; i++) {
        if (s->conns[i].session != session)
            continue;
        /* the error state stops the responder at once; the disconnect
         * tells the other side, and its event frees the connection */
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(s->conns[i].id->qp, &a, IBV_QP_STATE);
        rdma_disconnect(s->conns[i].id);
        s->conns[i].session = 0; /* shut once */
        shut++;
    }
    pthread_mutex_unlock(&s->conns_mu);
    /* its applications' type-2B keys die before its blocks are recovered */
    mw2_fence(s->mw2, session);
    return shut;
}

/* ---- connections (continued) --------------------------------------------- */

static void refuse(struct rdma_cm_id *id, enum verbs_refusal why)
{
    struct verbs_reject r = {.magic = VERBS_MAGIC, .reason = why};
    rdma_reject(id, why ? &r : NULL, why ? sizeof r : 0);
    rdma_destroy_id(id);
}

/* Create the queue pair of an accepted request and answer it. */
static void accept_checked(struct verbs_server *s, struct rdma_cm_id *id,
                           const struct verbs_hello *h, bool keys)
{
    bool binder = h->role == VERBS_ROLE_LOCAL && !s->bind_qp;
    /* mw=type2: services' bind requests and the binds on applications'
     * queue pairs complete on the type-2 module's queue */
    bool mw2 = s->mw2 && h->role != VERBS_ROLE_LOCAL;
    struct ibv_cq *cq = mw2 ? mw2_cq(s->mw2) : s->cq;
    if (binder && !(cq = s->bind_cq = ibv_create_cq(id->verbs, 2 * BIND_DEPTH, NULL, NULL, 0))) {
        refuse(id, 0);
        return;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = cq,
        .recv_cq = cq,
        .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = binder || mw2 ? BIND_DEPTH : 16,
                .max_recv_wr = mw2 ? mw2_service_recvs() : 1, .max_send_sge = 1,
                .max_recv_sge = 1},
    };
    if (rdma_create_qp(id, s->pd, &qa)) {
        refuse(id, 0);
        return;
    }
    if (mw2 && !mw2_add(s->mw2, id->qp, h->role == VERBS_ROLE_SERVICE, h->session)) {
        rdma_destroy_qp(id);
        refuse(id, 0);
        return;
    }
    struct verbs_welcome w = {
        .magic = VERBS_MAGIC,
        .version = VERBS_VERSION,
        .base = (uintptr_t)s->pool->base,
        .size = s->pool->size,
        .meta_size = s->pool->meta_size,
        .mr_rkey = s->mr->rkey, /* of the data region */
        .qp_num = id->qp->qp_num,
        .mw_type = s->mw2 ? 2 : 1,
    };
    if (keys && s->meta_mw) {
        w.meta_rkey = s->meta_mw->rkey;
        w.wk_rkey = s->wk_mw->rkey;
    }
    if (keys) {
        w.wk_base = (uintptr_t)s->wk;
        w.wk_size = s->wk_bytes;
    }
    struct rdma_conn_param cp = {
        .private_data = &w,
        .private_data_len = sizeof w,
        .initiator_depth = 16,
        .responder_resources = 16,
    };
    if (binder) /* before accepting: the regenerator may use it as soon as
                 * its side of the connection is established */
        atomic_store(&s->bind_qp, id->qp);
    if (h->role == VERBS_ROLE_SERVICE && !conn_add(s, id, h->session)) {
        if (mw2)
            mw2_forget(s->mw2, id->qp);
        rdma_destroy_qp(id);
        refuse(id, 0);
        return;
    }
    if (rdma_accept(id, &cp)) {
        if (binder)
            atomic_store(&s->bind_qp, NULL);
        if (h->role == VERBS_ROLE_SERVICE)
            s->nconns--; /* the last one added, under the caller's lock */
        if (mw2)
            mw2_forget(s->mw2, id->qp);
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
}

static void accept_conn(struct verbs_server *s, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct verbs_hello hello, *h = &hello; /* verbs_proto.c checks it */
    enum verbs_admission adm = VERBS_REFUSE;
    if (verbs_hello_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, h) == 0 &&
        setup_region(s, id->verbs) == 0)
        adm = verbs_hello_admit(h, s->token, atomic_load(&s->ready) == 1);
    if (adm == VERBS_REFUSE) {
        refuse(id, 0);
        return;
    }
    /* a fenced session stays out. The lock is held until the connection
     * is on the list, so a fence cannot miss it. */
    bool service = h->role == VERBS_ROLE_SERVICE;
    if (service) {
        pthread_mutex_lock(&s->conns_mu);
        if (is_fenced(s, h->session)) {
            pthread_mutex_unlock(&s->conns_mu);
            refuse(id, VERBS_REFUSED_FENCED);
            return;
        }
    }
    accept_checked(s, id, h, adm == VERBS_ADMIT_KEYS);
    if (service)
        pthread_mutex_unlock(&s->conns_mu);
}

static void destroy_conn(struct rdma_cm_id *id)
{
    rdma_destroy_qp(id);
    rdma_destroy_id(id);
}

/* An application's connection under mw=type2 is gone: its queue pair (in
 * the error state since the disconnect) is destroyed only once no window
 * is bound or being bound to it (verbs_mw2.h, mw2_qp_busy); until then
 * the keys of its windows can still be invalidated or destroyed safely. */
static void app_conn_gone(struct verbs_server *s, struct rdma_cm_id *id)
{
    if (!mw2_qp_busy(s->mw2, id->qp->qp_num)) {
        destroy_conn(id);
        return;
    }
    if (s->nzombies == s->zombies_cap) {
        size_t cap = s->zombies_cap ? 2 * s->zombies_cap : 64;
        struct rdma_cm_id **z = realloc(s->zombies, cap * sizeof *z);
        if (!z)
            return; /* kept until the process exits: a leak, not a fault */
        s->zombies = z;
        s->zombies_cap = cap;
    }
    s->zombies[s->nzombies++] = id;
}

/* Destroy the departed applications' queue pairs that no window holds. */
static void reap_zombies(struct verbs_server *s)
{
    for (size_t i = 0; i < s->nzombies;) {
        struct rdma_cm_id *id = s->zombies[i];
        if (mw2_qp_busy(s->mw2, id->qp->qp_num)) {
            i++;
            continue;
        }
        s->zombies[i] = s->zombies[--s->nzombies];
        destroy_conn(id);
    }
}

/* Handle one connection event (waiting up to timeout_ms). */
static int serve_event(struct verbs_server *s, int timeout_ms)
{
    struct pollfd pfd = {.fd = s->ec->fd, .events = POLLIN};
    if (s->nzombies)
        reap_zombies(s);
    if (poll(&pfd, 1, timeout_ms) <= 0)
        return 0;
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(s->ec, &ev))
        return FMEM_EIO;
    struct rdma_cm_id *id = ev->id;
    enum rdma_cm_event_type type = ev->event;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST)
        accept_conn(s, ev);
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED && id->qp != s->bind_qp) {
        conn_forget(s, id);
        rdma_disconnect(id);
        if (s->mw2 && id->qp) {
            mw2_forget(s->mw2, id->qp);
            app_conn_gone(s, id);
        } else {
            destroy_conn(id);
        }
    }
    return 0;
}

static int write_token(struct verbs_server *s, const char *path)
{
    if (getrandom(s->token, sizeof s->token, 0) != sizeof s->token)
        return FMEM_EIO;
    char hex[2 * VERBS_TOKEN_BYTES + 2];
    for (unsigned i = 0; i < VERBS_TOKEN_BYTES; i++)
        snprintf(hex + 2 * i, 3, "%02x", s->token[i]);
    strcat(hex, "\n");
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return FMEM_EIO;
    bool ok = write(fd, hex, strlen(hex)) == (ssize_t)strlen(hex);
    ok = close(fd) == 0 && ok && rename(tmp, path) == 0;
    return ok ? 0 : FMEM_EIO;
}

int verbs_server_start(struct transport *pool, const char *addr, const char *port,
                       const char *token_path, unsigned flags, struct verbs_server **out)
{
    if (!pool->base || !token_path || strlen(token_path) >= 250 || strlen(addr) >= 64 ||
        strlen(port) >= 8)
        return FMEM_EINVAL;
    struct verbs_server *s = calloc(1, sizeof *s);
    if (!s)
        return FMEM_ENOMEM;
    s->pool = pool;
    s->flags = flags;
    pthread_mutex_init(&s->conns_mu, NULL);
    strcpy(s->addr, addr);
    strcpy(s->port, port);
    strcpy(s->token_path, token_path);
    s->nchunks = (pool->size - pool->meta_size) >> CHUNK_SHIFT;
    s->nentries = wk_entries(s->nchunks);
    s->wk_bytes = (wk_bytes(s->nchunks) + 4095) & ~(size_t)4095;
    s->wk = aligned_alloc(4096, s->wk_bytes);
    s->mw = calloc(s->nentries, sizeof *s->mw);
    int rc = s->wk && s->mw ? write_token(s, token_path) : FMEM_ENOMEM;
    if (rc == 0)
        memset((void *)s->wk, 0, s->wk_bytes);
    struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_PASSIVE}, *ai = NULL;
    if (rc == 0 && getaddrinfo(addr, port, &hints, &ai))
        rc = FMEM_EURI;
    else if (rc == 0)
        rc = (s->ec = rdma_create_event_channel()) &&
                     !rdma_create_id(s->ec, &s->listen_id, NULL, RDMA_PS_TCP) &&
                     !rdma_bind_addr(s->listen_id, ai->ai_addr) && !rdma_listen(s->listen_id, 64)
                 ? 0
                 : FMEM_EIO;
    if (ai)
        freeaddrinfo(ai);
    if (rc == 0 && s->listen_id->verbs)
        rc = setup_region(s, s->listen_id->verbs);
    /* the regenerator connects to us over loopback and binds every window;
     * serve its connection meanwhile */
    if (rc == 0 && !(rc = pthread_create(&s->regen, NULL, regen_main, s) ? FMEM_EIO : 0)) {
        s->regen_started = true;
        while (rc == 0 && atomic_load(&s->ready) == 0)
            rc = serve_event(s, 50);
        if (rc == 0 && atomic_load(&s->ready) < 0)
            rc = FMEM_EIO;
    }
    if (rc) {
        verbs_server_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

int verbs_server_run(struct verbs_server *s, atomic_int *stop)
{
    while (!atomic_load(stop)) {
        int rc = serve_event(s, 100);
        if (rc)
            return rc;
    }
    return 0;
}

void verbs_server_get_stats(struct verbs_server *s, struct verbs_server_stats *st)
{
    st->windows = atomic_load(&s->windows);
    st->regenerated = atomic_load(&s->regenerated);
    st->passes = atomic_load(&s->passes);
    st->regen_ns = atomic_load(&s->regen_ns);
    st->setup_ns = atomic_load(&s->setup_ns);
    st->quarantined = atomic_load(&s->quarantined);
    st->mw_type = s->mw2 ? 2 : 1;
    st->mw2_binds = st->mw2_revokes = 0;
    if (s->mw2) {
        struct mw2_stats m;
        mw2_get_stats(s->mw2, &m);
        st->mw2_binds = m.binds;
        st->mw2_revokes = m.revokes;
    }
}

uint64_t verbs_server_heartbeat(struct verbs_server *s, unsigned uid)
{
    if (uid >= WK_HB_SLOTS)
        return 0;
    return atomic_load(&s->wk[wk_hb_pair(s->nchunks, uid) / 8]);
}

void verbs_server_stop(struct verbs_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, 1);
    if (s->regen_started)
        pthread_join(s->regen, NULL);
    if (s->qnode)
        node_close(s->qnode);
    if (s->local)
        tp_close(s->local);
    mw2_stop(s->mw2);
    for (uint64_t e = 0; s->mw && e < s->nentries; e++)
        for (int i = 0; i < 2; i++)
            if (s->mw[e][i])
                ibv_dealloc_mw(s->mw[e][i]);
    if (s->meta_mw)
        ibv_dealloc_mw(s->meta_mw);
    if (s->wk_mw)
        ibv_dealloc_mw(s->wk_mw);
    if (s->mr)
        ibv_dereg_mr(s->mr);
    if (s->meta_mr)
        ibv_dereg_mr(s->meta_mr);
    if (s->wk_mr)
        ibv_dereg_mr(s->wk_mr);
    if (s->listen_id)
        rdma_destroy_id(s->listen_id);
    if (s->ec)
        rdma_destroy_event_channel(s->ec);
    /* queue pairs of connections still open go with the process */
    free(s->mw);
    free(s->conns);
    free(s->zombies); /* their queue pairs go with the process */
    pthread_mutex_destroy(&s->conns_mu);
    free((void *)s->wk);
    free(s);
}
