/* verbs_mw2.c - type-2B memory windows bound to an application's queue pair
 * (memory node option mw=type2).
 *
 * A type-2B window is bound by a work request posted on a queue pair, and
 * the NIC then accepts its key only on requests arriving at that queue
 * pair: a key stolen from the application is useless from any other
 * connection. The memory node's end of each application connection is the
 * queue pair a window must be bound on, so the binding takes the node's
 * CPU: a service sends a bind request (verbs_proto.h) on its own queue
 * pair; this module's thread posts IBV_WR_BIND_MW on the application's
 * queue pair and answers with the key once the bind completed. Revoking
 * takes no CPU on the way: the service's SEND_WITH_INV makes the node's NIC
 * invalidate the window before it acknowledges; the thread only re-posts
 * the receive and keeps the window object for a later bind.
 *
 * Every queue pair of the mode shares one completion queue, woken through
 * a completion channel (no busy polling). Work request ids say what
 * completed: a service's receive (slot and buffer), a bind (its pending
 * entry) or an answer. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmem.h"
#include "verbs/verbs_mw2.h"
#include "verbs/verbs_proto.h"

#define SVC_SLOTS 64   /* service queue pairs at once */
#define SVC_RECVS 8    /* receives posted per service queue pair */
#define MSG_BYTES 64
#define MAX_PENDING 256 /* binds in flight */
#define CQ_DEPTH 4096
#define BLOCK_ACCESS (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

enum { WR_RECV = 1, WR_BIND = 2, WR_ANSWER = 3 };
#define WR_ID(kind, a, b) ((uint64_t)(kind) << 56 | (uint64_t)(a) << 16 | (uint64_t)(b))
#define WR_KIND(id) ((unsigned)((id) >> 56))
#define WR_A(id) ((unsigned)(((id) >> 16) & 0xffffffffu))
#define WR_B(id) ((unsigned)((id) & 0xffffu))

struct svc_slot {
    struct ibv_qp *qp; /* NULL: free */
    uint32_t qpn;
    uint64_t session; /* the service's (verbs_server fences by session) */
    char recv[SVC_RECVS][MSG_BYTES];
    struct verbs_mw2_rep answer; /* one request at a time per queue pair */
};

struct pending {
    struct ibv_mw *mw; /* NULL: free entry */
    uint32_t rkey;
    unsigned slot; /* who asked */
    uint32_t qpn;  /* on which queue pair the asker was */
    uint64_t session; /* of the asker */
    uint32_t app_qpn; /* the queue pair the window is being bound to */
};

/* A bound window and the session of the service that had it bound: when
 * that service is fenced, its windows are destroyed (mw2_fence). */
struct bound {
    struct ibv_mw *mw; /* NULL: empty */
    uint64_t session;
    uint32_t app_qpn; /* the application queue pair it is bound to */
};

#define MAX_FENCED 64

struct mw2 {
    struct ibv_pd *pd;
    struct ibv_mr *data;
    uint64_t lo, hi;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    pthread_mutex_t mu; /* everything below; posts happen under it */
    struct svc_slot *svc;
    struct ibv_mr *svc_mr;
    struct { struct ibv_qp *qp; uint32_t qpn; } *apps;
    size_t napps, capps;
    struct pending pend[MAX_PENDING];
    struct ibv_mw **spare; /* invalidated windows, for the next binds */
    size_t nspare, cspare;
    struct bound *bound; /* open-addressed by key index (rkey >> 8) */
    size_t cbound, nbound;
    uint64_t fenced[MAX_FENCED]; /* sessions fenced: binds still in flight die */
    unsigned nfenced;
    pthread_t thr;
    atomic_int stop;
    _Atomic uint64_t binds, revokes, refused;
};

/* ---- bound windows by key ------------------------------------------------- */

static size_t slot_of(const struct mw2 *m, uint32_t rkey)
{
    return ((rkey >> 8) * 2654435761u) & (m->cbound - 1);
}

static bool bound_put(struct mw2 *m, struct ibv_mw *mw, uint64_t session, uint32_t app_qpn)
{
    if (2 * (m->nbound + 1) > m->cbound) {
        size_t cap = m->cbound ? 2 * m->cbound : 1024;
        struct bound *old = m->bound, *nb = calloc(cap, sizeof *nb);
        if (!nb)
            return false;
        size_t ocap = m->cbound;
        m->bound = nb;
        m->cbound = cap;
        m->nbound = 0;
        for (size_t i = 0; i < ocap; i++)
            if (old[i].mw)
                bound_put(m, old[i].mw, old[i].session, old[i].app_qpn);
        free(old);
    }
    size_t i = slot_of(m, mw->rkey);
    while (m->bound[i].mw)
        i = (i + 1) & (m->cbound - 1);
    m->bound[i] = (struct bound){.mw = mw, .session = session, .app_qpn = app_qpn};
    m->nbound++;
    return true;
}

/* Remove the entry at i and shift the rest of its run back, so that
 * lookups do not stop at the hole. */
static void bound_del(struct mw2 *m, size_t i)
{
    m->bound[i].mw = NULL;
    m->nbound--;
    for (size_t j = (i + 1) & (m->cbound - 1); m->bound[j].mw; j = (j + 1) & (m->cbound - 1)) {
        struct bound x = m->bound[j];
        m->bound[j].mw = NULL;
        m->nbound--;
        bound_put(m, x.mw, x.session, x.app_qpn);
    }
}

/* Remove and return the window whose key is rkey (NULL if none). */
static struct ibv_mw *bound_take(struct mw2 *m, uint32_t rkey)
{
    if (!m->cbound)
        return NULL;
    size_t i = slot_of(m, rkey);
    while (m->bound[i].mw && m->bound[i].mw->rkey != rkey)
        i = (i + 1) & (m->cbound - 1);
    struct ibv_mw *mw = m->bound[i].mw;
    if (mw)
        bound_del(m, i);
    return mw;
}

/* ---- requests and answers -------------------------------------------------- */

static int post_recv(struct mw2 *m, unsigned slot, unsigned r)
{
    struct svc_slot *s = &m->svc[slot];
    struct ibv_sge sge = {.addr = (uintptr_t)s->recv[r], .length = MSG_BYTES,
                          .lkey = m->svc_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = WR_ID(WR_RECV, slot, r), .sg_list = &sge, .num_sge = 1},
                       *bad;
    return ibv_post_recv(s->qp, &wr, &bad);
}

/* Answer the service in `slot` if its queue pair is still the one that asked. */
static void answer(struct mw2 *m, unsigned slot, uint32_t qpn, int status, uint32_t rkey)
{
    struct svc_slot *s = &m->svc[slot];
    if (!s->qp || s->qpn != qpn)
        return; /* gone meanwhile */
    s->answer = (struct verbs_mw2_rep){.status = status, .rkey = rkey};
    struct ibv_sge sge = {.addr = (uintptr_t)&s->answer, .length = sizeof s->answer,
                          .lkey = m->svc_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_ID(WR_ANSWER, slot, 0), .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(s->qp, &wr, &bad) && getenv("FMEM_DEBUG"))
        fprintf(stderr, "fmem: rdma memory node: cannot answer a bind request\n");
    if (status)
        atomic_fetch_add(&m->refused, 1);
}

static struct ibv_qp *app_qp(const struct mw2 *m, uint32_t qpn)
{
    for (size_t i = 0; i < m->napps; i++)
        if (m->apps[i].qpn == qpn)
            return m->apps[i].qp;
    return NULL;
}

/* A bind request from the service in `slot`: post the bind on the
 * application's queue pair; the answer goes out when it completes. */
static void bind_request(struct mw2 *m, unsigned slot, const struct verbs_mw2_req *q)
{
    uint32_t asker = m->svc[slot].qpn;
    struct ibv_qp *qp = app_qp(m, q->qp_num);
    if (!qp || q->len == 0 || q->addr < m->lo || q->addr > m->hi || q->len > m->hi - q->addr) {
        answer(m, slot, asker, qp ? FMEM_ERANGE : FMEM_EINVAL, 0);
        return;
    }
    unsigned p = 0;
    while (p < MAX_PENDING && m->pend[p].mw)
        p++;
    struct ibv_mw *mw = p == MAX_PENDING ? NULL
                        : m->nspare         ? m->spare[--m->nspare]
                                            : ibv_alloc_mw(m->pd, IBV_MW_TYPE_2);
    if (!mw) {
        answer(m, slot, asker, p == MAX_PENDING ? FMEM_EBUSY : FMEM_ENOMEM, 0);
        return;
    }
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    struct ibv_send_wr wr = {
        .wr_id = WR_ID(WR_BIND, p, 0),
        .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {.mw = mw, .rkey = rkey,
                    .bind_info = {.mr = m->data, .addr = q->addr, .length = q->len,
                                  .mw_access_flags = BLOCK_ACCESS}},
    },
                       *bad;
    if (ibv_post_send(qp, &wr, &bad)) {
        ibv_dealloc_mw(mw);
        answer(m, slot, asker, FMEM_EIO, 0);
        return;
    }
    m->pend[p] = (struct pending){.mw = mw, .rkey = rkey, .slot = slot, .qpn = asker,
                                  .session = m->svc[slot].session, .app_qpn = q->qp_num};
}

static void bind_done(struct mw2 *m, unsigned p, enum ibv_wc_status st)
{
    struct pending *b = &m->pend[p];
    if (!b->mw)
        return;
    struct ibv_mw *mw = b->mw;
    b->mw = NULL;
    if (st != IBV_WC_SUCCESS) { /* e.g. the application's queue pair failed */
        ibv_dealloc_mw(mw);
        answer(m, b->slot, b->qpn, FMEM_EIO, 0);
        return;
    }
    /* ibv_post_send leaves mw->rkey alone; the next bind or lookup names the
     * window by its current key */
    mw->rkey = b->rkey;
    bool fenced = false;
    for (unsigned i = 0; i < m->nfenced && i < MAX_FENCED; i++)
        fenced |= b->session && m->fenced[i] == b->session;
    if (fenced) { /* its service was fenced meanwhile: the key dies unused */
        ibv_dealloc_mw(mw);
        answer(m, b->slot, b->qpn, FMEM_EIO, 0);
        return;
    }
    if (!bound_put(m, mw, b->session, b->app_qpn)) {
        /* untracked, it could outlive its queue pair: destroy it now */
        ibv_dealloc_mw(mw);
        answer(m, b->slot, b->qpn, FMEM_ENOMEM, 0);
        return;
    }
    atomic_fetch_add(&m->binds, 1);
    answer(m, b->slot, b->qpn, 0, b->rkey);
}

static void received(struct mw2 *m, const struct ibv_wc *wc)
{
    unsigned slot = WR_A(wc->wr_id), r = WR_B(wc->wr_id);
    if (slot >= SVC_SLOTS || r >= SVC_RECVS)
        return;
    struct svc_slot *s = &m->svc[slot];
    if (!s->qp || s->qpn != wc->qp_num || wc->status != IBV_WC_SUCCESS)
        return; /* flushed, or from a queue pair that is gone */
    struct verbs_mw2_req q = {0};
    if (wc->byte_len >= sizeof q)
        memcpy(&q, s->recv[r], sizeof q);
    if (q.op == VERBS_MW2_REVOKE || (wc->wc_flags & IBV_WC_WITH_INV)) {
        /* a SEND_WITH_INV: the NIC invalidated the window before this
         * completion; keep the window for reuse (a window that was not
         * invalidated fails its next bind and is dropped then) */
        uint32_t k = wc->wc_flags & IBV_WC_WITH_INV ? wc->invalidated_rkey : q.rkey;
        struct ibv_mw *mw = bound_take(m, k);
        if (mw) {
            atomic_fetch_add(&m->revokes, 1);
            if (m->nspare == m->cspare) {
                size_t cap = m->cspare ? 2 * m->cspare : 256;
                struct ibv_mw **sp = realloc(m->spare, cap * sizeof *sp);
                if (sp)
                    m->spare = sp, m->cspare = cap;
            }
            if (m->nspare < m->cspare)
                m->spare[m->nspare++] = mw;
            else
                ibv_dealloc_mw(mw);
        }
    } else if (q.op == VERBS_MW2_BIND) {
        bind_request(m, slot, &q);
    }
    if (post_recv(m, slot, r) && getenv("FMEM_DEBUG"))
        fprintf(stderr, "fmem: rdma memory node: cannot re-post a receive\n");
}

static void handle(struct mw2 *m, const struct ibv_wc *wc)
{
    pthread_mutex_lock(&m->mu);
    switch (WR_KIND(wc->wr_id)) {
    case WR_RECV:
        received(m, wc);
        break;
    case WR_BIND:
        if (WR_A(wc->wr_id) < MAX_PENDING)
            bind_done(m, WR_A(wc->wr_id), wc->status);
        break;
    default: /* answers: nothing to do */
        break;
    }
    pthread_mutex_unlock(&m->mu);
}

static void *mw2_main(void *arg)
{
    struct mw2 *m = arg;
    while (!atomic_load(&m->stop)) {
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(m->cq, 16, wc);
        for (int i = 0; i < n; i++)
            handle(m, &wc[i]);
        if (n > 0)
            continue;
        /* empty: ask for an event, look once more (a completion may have
         * come in between), then sleep on the channel */
        ibv_req_notify_cq(m->cq, 0);
        n = ibv_poll_cq(m->cq, 16, wc);
        for (int i = 0; i < n; i++)
            handle(m, &wc[i]);
        if (n > 0)
            continue;
        struct pollfd pfd = {.fd = m->ch->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) > 0) {
            struct ibv_cq *cq;
            void *ctx;
            if (ibv_get_cq_event(m->ch, &cq, &ctx) == 0)
                ibv_ack_cq_events(cq, 1);
        }
    }
    return NULL;
}

/* ---- connections ------------------------------------------------------------ */

bool mw2_add(struct mw2 *m, struct ibv_qp *qp, bool service, uint64_t session)
{
    bool ok = false;
    pthread_mutex_lock(&m->mu);
    if (service) {
        for (unsigned i = 0; i < SVC_SLOTS && !ok; i++) {
            if (m->svc[i].qp)
                continue;
            m->svc[i].qp = qp;
            m->svc[i].qpn = qp->qp_num;
            m->svc[i].session = session;
            ok = true;
            for (unsigned r = 0; r < SVC_RECVS && ok; r++)
                ok = post_recv(m, i, r) == 0;
            if (!ok)
                m->svc[i].qp = NULL;
        }
    } else {
        if (m->napps == m->capps) {
            size_t cap = m->capps ? 2 * m->capps : 64;
            void *a = realloc(m->apps, cap * sizeof *m->apps);
            if (a)
                m->apps = a, m->capps = cap;
        }
        if (m->napps < m->capps) {
            m->apps[m->napps].qp = qp;
            m->apps[m->napps++].qpn = qp->qp_num;
            ok = true;
        }
    }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

void mw2_forget(struct mw2 *m, struct ibv_qp *qp)
{
    pthread_mutex_lock(&m->mu);
    for (unsigned i = 0; i < SVC_SLOTS; i++)
        if (m->svc[i].qp == qp)
            m->svc[i].qp = NULL;
    for (size_t i = 0; i < m->napps; i++)
        if (m->apps[i].qp == qp) {
            m->apps[i] = m->apps[--m->napps];
            break;
        }
    pthread_mutex_unlock(&m->mu);
}

bool mw2_qp_busy(struct mw2 *m, uint32_t qpn)
{
    bool busy = false;
    pthread_mutex_lock(&m->mu);
    for (unsigned p = 0; p < MAX_PENDING && !busy; p++)
        busy = m->pend[p].mw && m->pend[p].app_qpn == qpn;
    for (size_t i = 0; i < m->cbound && !busy; i++)
        busy = m->bound[i].mw && m->bound[i].app_qpn == qpn;
    pthread_mutex_unlock(&m->mu);
    return busy;
}

unsigned mw2_fence(struct mw2 *m, uint64_t session)
{
    unsigned n = 0;
    if (!m || !session)
        return 0;
    pthread_mutex_lock(&m->mu);
    m->fenced[m->nfenced++ % MAX_FENCED] = session;
    for (size_t i = 0; i < m->cbound;) {
        if (m->bound[i].mw && m->bound[i].session == session) {
            /* destroying a bound window invalidates it: the NIC refuses
             * its key from here on */
            struct ibv_mw *mw = m->bound[i].mw;
            bound_del(m, i); /* may move another entry to i: look again */
            ibv_dealloc_mw(mw);
            n++;
            continue;
        }
        i++;
    }
    atomic_fetch_add(&m->revokes, n);
    pthread_mutex_unlock(&m->mu);
    return n;
}

unsigned mw2_service_recvs(void)
{
    return SVC_RECVS;
}

struct ibv_cq *mw2_cq(struct mw2 *m)
{
    return m->cq;
}

int mw2_start(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_mr *data, uint64_t lo,
              uint64_t hi, struct mw2 **out)
{
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da))
        return FMEM_EIO;
    if (!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B)) {
        fprintf(stderr, "fmem: rdma memory node: mw=type2: the device has no type-2B windows\n");
        return FMEM_ENOTSUP;
    }
    struct mw2 *m = calloc(1, sizeof *m);
    if (!m)
        return FMEM_ENOMEM;
    pthread_mutex_init(&m->mu, NULL);
    m->pd = pd;
    m->data = data;
    m->lo = lo;
    m->hi = hi;
    m->svc = aligned_alloc(4096, (sizeof *m->svc * SVC_SLOTS + 4095) & ~(size_t)4095);
    if (m->svc)
        memset(m->svc, 0, sizeof *m->svc * SVC_SLOTS);
    m->ch = ibv_create_comp_channel(ctx);
    m->cq = m->ch ? ibv_create_cq(ctx, CQ_DEPTH, NULL, m->ch, 0) : NULL;
    m->svc_mr = m->svc && m->cq ? ibv_reg_mr(pd, m->svc, sizeof *m->svc * SVC_SLOTS,
                                             IBV_ACCESS_LOCAL_WRITE)
                                : NULL;
    if (!m->svc_mr || pthread_create(&m->thr, NULL, mw2_main, m)) {
        if (m->svc_mr)
            ibv_dereg_mr(m->svc_mr);
        if (m->cq)
            ibv_destroy_cq(m->cq);
        if (m->ch)
            ibv_destroy_comp_channel(m->ch);
        free(m->svc);
        free(m);
        return FMEM_EIO;
    }
    *out = m;
    return 0;
}

void mw2_get_stats(struct mw2 *m, struct mw2_stats *st)
{
    st->binds = atomic_load(&m->binds);
    st->revokes = atomic_load(&m->revokes);
    st->refused = atomic_load(&m->refused);
    pthread_mutex_lock(&m->mu);
    st->bound = m->nbound;
    pthread_mutex_unlock(&m->mu);
}

/* After every queue pair using the completion queue is gone (the process
 * exits with connections still open: their queue pairs go with it). */
void mw2_stop(struct mw2 *m)
{
    if (!m)
        return;
    atomic_store(&m->stop, 1);
    pthread_join(m->thr, NULL);
    for (size_t i = 0; i < m->cbound; i++)
        if (m->bound[i].mw)
            ibv_dealloc_mw(m->bound[i].mw);
    for (size_t i = 0; i < m->nspare; i++)
        ibv_dealloc_mw(m->spare[i]);
    /* the completion queue and the buffers stay: queue pairs still open
     * may point at them until the process exits */
    free(m->bound);
    free(m->spare);
    free(m->apps);
}
