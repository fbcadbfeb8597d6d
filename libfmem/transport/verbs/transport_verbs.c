/* transport_verbs.c - the one-sided operations over RDMA (rdma-core): RC
 * queue pairs to a memory node, IBV_WR_RDMA_READ / RDMA_WRITE /
 * ATOMIC_CMP_AND_SWP. A batch is posted as one chain of work requests with
 * only the last one signaled (a failed request still completes with an
 * error), so it costs one round trip. Data moves through a registered
 * bounce buffer per queue pair; callers' buffers need no registration.
 * Threads share a few queue pairs, each under its own lock.
 *
 * Keys: metadata offsets use the metadata window's key and window-key table
 * offsets (wkeys_off...) that table's window; data offsets use the key the
 * operation carries (a block's window). Applications are given neither
 * table key. A request the NIC refuses puts its queue pair in the error
 * state; the transport reconnects that queue pair on its next use. */
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "fmem.h"
#include "transport.h"
#include "verbs/transport_verbs.h"
#include "verbs/verbs_proto.h"

#define NCONN 4                     /* queue pairs per transport */
#define BOUNCE_SIZE (4u << 20)      /* bytes of registered staging memory */
#define MAX_WR 128                  /* work requests per post */
#define MAX_SGE_BYTES (1u << 20)    /* split reads and writes at 1 MiB */
#define CM_TIMEOUT_MS 5000
#define ACK_TIMEOUT 15 /* 4.096 us << 15 per try */
/* Posted CASes (verbs_post) are held by the queue pair, unsignaled, and
 * go out linked in front of its next batch (one ibv_post_send, which on
 * soft-RoCE is a system call, for both), or at once when the op says
 * trail (still unsignaled: a later batch's completion covers them); their
 * results land in the bounce buffer's last page, which batches do not use. */
#define POSTED_MAX 32
#define POSTED_AREA 4096u
#define BOUNCE_CHAIN (BOUNCE_SIZE - POSTED_AREA)
#define POSTED_WR_ID UINT64_MAX

struct verbs_conn {
    pthread_mutex_t lock;
    struct rdma_cm_id *id;
    /* this connection's own device context: librdmacm's (id->verbs) is
     * opened once per process and a child of fork() inherits it, so
     * objects made on it would belong to the parent's file and outlive
     * the child (conn_open) */
    struct ibv_context *ctx;
    struct ibv_qp *qp; /* made and moved through its states here, not by librdmacm */
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *bounce;
    bool broken; /* the NIC refused a request: the QP is in the error state */
    uint32_t peer_qp; /* the memory node's end of this queue pair */
    unsigned posted;  /* unsignaled posts not yet followed by a completion */
    unsigned posted_seq;
    /* posts made on this queue pair, and how many of the first of them are
     * known to have executed (a later chain completed): other threads read
     * both (verbs_post_landed) */
    _Atomic uint64_t enq, done;
    /* posts not handed to the NIC yet: they lead the next chain */
    unsigned npend;
    struct ibv_send_wr pend_wr[POSTED_MAX];
    struct ibv_sge pend_sge[POSTED_MAX];
};

struct verbs_transport {
    struct transport t;
    struct rdma_event_channel *ec;
    pthread_mutex_t ec_lock; /* connection setup reads events from ec */
    struct verbs_conn conn[NCONN];
    unsigned nconn;
    struct verbs_hello hello;
    struct sockaddr_storage dst, src;
    bool has_src;
    struct verbs_welcome w;
    _Atomic uint64_t refused; /* requests the NIC refused (remote access error) */
    _Atomic uint64_t posts_lost; /* posts whose queue pair failed before they were known done */
    atomic_bool fenced;       /* the memory node refused our session */
    bool wait_posts;          /* FMEM_VERBS_WAIT_POSTS=1: posts wait like batches
                               * (the comparison in bench/rdma-bench.sh) */
    bool no_trail;            /* FMEM_VERBS_TRAIL=0: trailing requests (tp_op.trail)
                               * are waited for (bench/rdma-bench.sh compares) */
    bool prof_clock;          /* FMEM_VERBS_PROF=1: time each chain (tl_prof.wait_ns).
                               * Off by default: without a TSC the clock is a
                               * system call, two per chain (soft-RoCE VM) */
};

static _Atomic unsigned conn_rr;
static _Thread_local int tl_conn = -1;
/* this thread's work requests and time waited (verbs_transport_thread_prof) */
static _Thread_local struct verbs_prof tl_prof;

void verbs_transport_thread_prof(struct verbs_prof *out)
{
    *out = tl_prof;
}

/* Wait for the next event of connection `id`. Others of the channel are
 * passed over: the disconnects of this transport's other queue pairs (a
 * memory node that shut them) wait there until one of them reconnects. */
static int wait_event(struct rdma_event_channel *ec, struct rdma_cm_id *id,
                      enum rdma_cm_event_type want, struct verbs_welcome *welcome)
{
    struct rdma_cm_event *ev;
    for (;;) {
        if (rdma_get_cm_event(ec, &ev))
            return FMEM_EIO;
        if (ev->id == id)
            break;
        rdma_ack_cm_event(ev);
    }
    int ok = ev->event == want, fenced = 0;
    if (ev->event == RDMA_CM_EVENT_REJECTED)
        fenced = verbs_reject_fenced(ev->param.conn.private_data, ev->param.conn.private_data_len);
    if (ok && welcome &&
        verbs_welcome_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, welcome))
        ok = 0;
    if (!ok) {
        if (getenv("FMEM_DEBUG"))
            fprintf(stderr, "fmem: rdma: expected %s, got %s (status %d)\n", rdma_event_str(want),
                    rdma_event_str(ev->event), ev->status);
        errno = ev->event == RDMA_CM_EVENT_REJECTED ? ECONNREFUSED : EPROTO;
    }
    rdma_ack_cm_event(ev);
    return ok ? 0 : fenced ? FMEM_EACCES : FMEM_EIO;
}

/* Move c->qp to `state` with the attributes the connection manager has for
 * it (path, numbers, timeouts, retries from the connect parameters). */
static int qp_move(struct verbs_conn *c, enum ibv_qp_state state)
{
    struct ibv_qp_attr a = {.qp_state = state};
    int mask;
    if (rdma_init_qp_attr(c->id, &a, &mask))
        return -1;
    return ibv_modify_qp(c->qp, &a, mask);
}

static void conn_close(struct verbs_conn *c)
{
    if (c->id && c->qp)
        rdma_disconnect(c->id);
    if (c->qp) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
        ibv_destroy_qp(c->qp);
    }
    if (c->mr)
        ibv_dereg_mr(c->mr);
    free(c->bounce);
    if (c->cq)
        ibv_destroy_cq(c->cq);
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    if (c->ctx)
        ibv_close_device(c->ctx);
    if (c->id)
        rdma_destroy_id(c->id);
    c->id = NULL;
    c->qp = NULL;
    c->ctx = NULL;
    c->mr = NULL;
    c->bounce = NULL;
    c->cq = NULL;
    c->pd = NULL;
    c->broken = false;
    c->npend = 0;
}

static int conn_open(struct verbs_transport *v, struct verbs_conn *c, struct verbs_welcome *w)
{
    if (rdma_create_id(v->ec, &c->id, NULL, RDMA_PS_TCP))
        return FMEM_EIO;
    if (rdma_resolve_addr(c->id, v->has_src ? (struct sockaddr *)&v->src : NULL,
                          (struct sockaddr *)&v->dst, CM_TIMEOUT_MS) ||
        wait_event(v->ec, c->id, RDMA_CM_EVENT_ADDR_RESOLVED, NULL) ||
        rdma_resolve_route(c->id, CM_TIMEOUT_MS) ||
        wait_event(v->ec, c->id, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL))
        return FMEM_EIO;
    /* a context of our own on the device the route goes through */
    c->ctx = ibv_open_device(c->id->verbs->device);
    c->pd = c->ctx ? ibv_alloc_pd(c->ctx) : NULL;
    c->cq = c->pd ? ibv_create_cq(c->ctx, 2 * MAX_WR, NULL, NULL, 0) : NULL;
    c->bounce = aligned_alloc(4096, BOUNCE_SIZE);
    if (!c->pd || !c->cq || !c->bounce)
        return FMEM_EIO;
    c->mr = ibv_reg_mr(c->pd, c->bounce, BOUNCE_SIZE, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr)
        return FMEM_EIO;
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
        .cap = {.max_send_wr = MAX_WR, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
    };
    c->qp = ibv_create_qp(c->pd, &qa);
    if (!c->qp || qp_move(c, IBV_QPS_INIT))
        return FMEM_EIO;
    /* A bounded ack timeout, so that a request to a memory node that has
     * gone, or has shut this queue pair, fails instead of waiting forever
     * (the RoCE default is none): 4.096 us << 15 = 134 ms, 7 tries. */
    uint8_t ack_timeout = ACK_TIMEOUT;
    rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack_timeout,
                    sizeof ack_timeout);
    struct rdma_conn_param cp = {
        .private_data = &v->hello,
        .private_data_len = sizeof v->hello,
        .initiator_depth = 16,
        .responder_resources = 16,
        .retry_count = 6, /* not 7: soft-RoCE takes 7 for "retry forever" */
        .rnr_retry_count = 7,
        .qp_num = c->qp->qp_num,
    };
    if (rdma_connect(c->id, &cp))
        return FMEM_EIO;
    /* the queue pair is ours: ready it for the answer, then confirm */
    int rc = wait_event(v->ec, c->id, RDMA_CM_EVENT_CONNECT_RESPONSE, w);
    if (rc)
        return rc;
    if (qp_move(c, IBV_QPS_RTR) || qp_move(c, IBV_QPS_RTS) || rdma_establish(c->id))
        return FMEM_EIO;
    if (w->magic != VERBS_MAGIC || w->version != VERBS_VERSION || w->size < w->meta_size)
        return FMEM_ECORRUPT;
    c->peer_qp = w->qp_num;
    return 0;
}

/* Replace a queue pair the NIC moved to the error state. */
static int conn_reset(struct verbs_transport *v, struct verbs_conn *c)
{
    if (c->posted)
        atomic_fetch_add(&v->posts_lost, 1);
    c->posted = 0;
    conn_close(c);
    struct verbs_welcome w;
    pthread_mutex_lock(&v->ec_lock);
    int rc = conn_open(v, c, &w);
    pthread_mutex_unlock(&v->ec_lock);
    if (rc == 0 && (w.meta_rkey != v->w.meta_rkey || w.base != v->w.base))
        rc = FMEM_ECORRUPT; /* a different memory node answered */
    if (rc) {
        conn_close(c);
        c->broken = true;
    }
    if (rc == FMEM_EACCES) { /* refused as fenced */
        atomic_store(&v->fenced, true);
        rc = FMEM_EIO;
    }
    return rc;
}

/* Remote address and key of an operation. */
static void target(const struct verbs_transport *v, const struct tp_op *op, uint64_t *raddr,
                   uint32_t *rkey)
{
    if (v->t.wkeys_off && op->off >= v->t.wkeys_off) {
        *raddr = v->w.wk_base + (op->off - v->t.wkeys_off);
        *rkey = op->rkey ? op->rkey : v->w.wk_rkey;
    } else {
        *raddr = v->w.base + op->off;
        *rkey = op->rkey ? op->rkey : v->w.meta_rkey;
    }
}

/* The held posts of c linked in front of chain `wr` (they leave c). */
static struct ibv_send_wr *pend_link(struct verbs_conn *c, struct ibv_send_wr *wr)
{
    if (!c->npend)
        return wr;
    for (unsigned i = 0; i < c->npend; i++)
        c->pend_wr[i].next = i + 1 < c->npend ? &c->pend_wr[i + 1] : wr;
    c->npend = 0;
    return &c->pend_wr[0];
}

/* A slot of the posted area (held and trailing requests): 8 bytes the next
 * chains do not touch while the request may still be in flight. */
static char *posted_slot(struct verbs_conn *c)
{
    return c->bounce + BOUNCE_CHAIN + 8 * (c->posted_seq++ % (POSTED_AREA / 8));
}

/* Post ops[0..n) (all fitting the bounce buffer and MAX_WR) and wait for
 * ops[0..nwait): the rest trail (tp_op.trail), unsignaled, their data in
 * the posted area; the queue pair's next chain completes after them. */
static int post_chain(struct verbs_transport *v, struct verbs_conn *c, struct tp_op *ops,
                      size_t n, size_t nwait, size_t *bounce_off)
{
    struct ibv_send_wr wr[MAX_WR], *bad;
    struct ibv_sge sge[MAX_WR];
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        struct tp_op *op = &ops[i];
        size_t len = op->kind == TP_CAS ? 8 : op->len;
        char *src;
        if (i >= nwait) { /* trailing: 8 bytes at most (verbs_batch) */
            src = posted_slot(c);
        } else {
            off = (off + 7) & ~(size_t)7; /* atomics need 8-byte aligned targets */
            bounce_off[i] = off;
            src = c->bounce + off;
            off += len;
        }
        if (op->kind == TP_WRITE)
            memcpy(src, op->buf, len);
        sge[i] = (struct ibv_sge){.addr = (uintptr_t)src, .length = (uint32_t)len,
                                  .lkey = c->mr->lkey};
        wr[i] = (struct ibv_send_wr){.wr_id = i, .sg_list = &sge[i], .num_sge = len ? 1 : 0,
                                     .next = i + 1 < n ? &wr[i + 1] : NULL};
        uint64_t raddr;
        uint32_t rkey;
        target(v, op, &raddr, &rkey);
        switch (op->kind) {
        case TP_READ:
            wr[i].opcode = IBV_WR_RDMA_READ;
            wr[i].wr.rdma.remote_addr = raddr;
            wr[i].wr.rdma.rkey = rkey;
            break;
        case TP_WRITE:
            wr[i].opcode = IBV_WR_RDMA_WRITE;
            wr[i].wr.rdma.remote_addr = raddr;
            wr[i].wr.rdma.rkey = rkey;
            break;
        case TP_CAS:
            wr[i].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
            wr[i].wr.atomic.remote_addr = raddr;
            wr[i].wr.atomic.rkey = rkey;
            wr[i].wr.atomic.compare_add = op->expect;
            wr[i].wr.atomic.swap = op->desired;
            break;
        }
    }
    wr[nwait - 1].send_flags = IBV_SEND_SIGNALED; /* selective signaling */
    struct ibv_send_wr *head = pend_link(c, wr);
    struct timespec t0 = {0};
    if (v->prof_clock)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    tl_prof.wrs += n;
    tl_prof.trails += n - nwait;
    tl_prof.posts++;
    uint64_t sent = atomic_load_explicit(&c->enq, memory_order_relaxed); /* all linked or sent */
    if (ibv_post_send(c->qp, head, &bad)) {
        c->broken = true;
        return FMEM_EIO;
    }
    /* wait for the last request, or the first error */
    for (;;) {
        struct ibv_wc wc;
        int k = ibv_poll_cq(c->cq, 1, &wc);
        if (k < 0)
            return FMEM_EIO;
        if (k == 0)
            continue;
        if (wc.status != IBV_WC_SUCCESS) {
            /* the requests behind it are flushed with errors: drain them */
            if (wc.wr_id != n - 1) {
                struct ibv_wc rest;
                while (ibv_poll_cq(c->cq, 1, &rest) == 0 || rest.wr_id != n - 1)
                    ;
            }
            c->broken = true;
            if (c->posted)
                atomic_fetch_add(&v->posts_lost, 1);
            c->posted = c->npend = 0;
            if (getenv("FMEM_DEBUG"))
                fprintf(stderr, "fmem: rdma: %s\n", ibv_wc_status_str(wc.status));
            errno = EACCES;
            if (wc.status != IBV_WC_REM_ACCESS_ERR)
                return FMEM_EIO;
            atomic_fetch_add(&v->refused, 1);
            return FMEM_EACCES;
        }
        if (wc.wr_id == nwait - 1)
            break;
    }
    if (v->prof_clock) {
        struct timespec t1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        tl_prof.wait_ns +=
            (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000 + t1.tv_nsec - t0.tv_nsec);
    }
    /* completions come in order: the posts before are done, the trailing
     * requests not known to be */
    c->posted = (unsigned)(n - nwait);
    atomic_store_explicit(&c->done, sent, memory_order_release);
    for (size_t i = 0; i < nwait; i++) {
        if (ops[i].kind == TP_READ)
            memcpy(ops[i].buf, c->bounce + bounce_off[i], ops[i].len);
        else if (ops[i].kind == TP_CAS)
            memcpy(&ops[i].old, c->bounce + bounce_off[i], 8);
    }
    return 0;
}

static size_t op_bytes(const struct tp_op *op)
{
    return (op->kind == TP_CAS ? 8 : op->len) + 8;
}

/* Large reads and writes are split into 1 MiB pieces; batches are cut
 * where they would overflow the bounce buffer or the send queue. */
static int verbs_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = ops[i].kind == TP_CAS ? 8 : ops[i].len, off = ops[i].off, end = t->size;
        if (t->wkeys_off && off >= t->wkeys_off) {
            off -= t->wkeys_off;
            end = t->wkeys_size;
        }
        if (off > end || len > end - off)
            return FMEM_EINVAL;
        if (ops[i].kind == TP_CAS && (ops[i].off & 7))
            return FMEM_EINVAL;
    }
    if (atomic_load(&v->fenced))
        return FMEM_EIO; /* for good: the memory node will not take us back */
    if (tl_conn < 0)
        tl_conn = (int)(atomic_fetch_add(&conn_rr, 1) % v->nconn);
    struct verbs_conn *c = &v->conn[tl_conn];
    struct tp_op chain[MAX_WR];
    size_t bounce_off[MAX_WR], nchain = 0, used = 0;
    int rc = 0;
    pthread_mutex_lock(&c->lock);
    if (c->broken)
        rc = conn_reset(v, c);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct tp_op *op = &ops[i];
        uint64_t done = 0, total = op->kind == TP_CAS ? 8 : op->len;
        do { /* one piece of op per iteration */
            struct tp_op piece = *op;
            if (op->kind != TP_CAS) {
                piece.off = op->off + done;
                piece.buf = (char *)op->buf + done;
                piece.len = total - done < MAX_SGE_BYTES ? total - done : MAX_SGE_BYTES;
            }
            if (nchain + c->posted >= MAX_WR || used + op_bytes(&piece) > BOUNCE_CHAIN) {
                rc = post_chain(v, c, chain, nchain, nchain, bounce_off);
                if (rc)
                    break;
                for (size_t k = 0; k < nchain; k++) /* CAS results */
                    if (chain[k].kind == TP_CAS)
                        ((struct tp_op *)chain[k].buf)->old = chain[k].old;
                nchain = used = 0;
            }
            if (op->kind == TP_CAS)
                piece.buf = op; /* where to put the result */
            chain[nchain++] = piece;
            used += op_bytes(&piece);
            done += piece.kind == TP_CAS ? 8 : piece.len;
        } while (done < total);
    }
    if (rc == 0 && nchain) {
        /* the trailing requests at the end (tp_op.trail) are not waited for */
        size_t nwait = nchain;
        while (nwait > 1 && !v->wait_posts && !v->no_trail && chain[nwait - 1].trail &&
               (chain[nwait - 1].kind == TP_CAS ||
                (chain[nwait - 1].kind == TP_WRITE && chain[nwait - 1].len <= 8)))
            nwait--;
        for (size_t k = nwait; k < nchain; k++)
            chain[k].old = chain[k].expect; /* never known */
        rc = post_chain(v, c, chain, nchain, nwait, bounce_off);
        for (size_t k = 0; rc == 0 && k < nchain; k++)
            if (chain[k].kind == TP_CAS)
                ((struct tp_op *)chain[k].buf)->old = chain[k].old;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* A posted CAS executes once a later request on its queue pair completes:
 * before closing, read a word so that the posts land. */
static void drain_posts(struct verbs_transport *v, struct verbs_conn *c)
{
    uint64_t w;
    struct tp_op op = {.kind = TP_READ, .off = 0, .buf = &w, .len = 8};
    size_t boff;
    pthread_mutex_lock(&c->lock);
    if (c->posted && !c->broken && c->id)
        post_chain(v, c, &op, 1, 1, &boff);
    pthread_mutex_unlock(&c->lock);
}

static int verbs_post(struct transport *t, struct tp_op *op)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    bool write = op->kind == TP_WRITE && op->len == 8;
    uint64_t off = op->off, end = t->size;
    if (t->wkeys_off && off >= t->wkeys_off) { /* a doorbell (8-byte WRITE) only */
        off -= t->wkeys_off;
        end = write ? t->wkeys_size : 0;
    }
    if ((op->kind != TP_CAS && !write) || (off & 7) || end < 8 || off > end - 8 ||
        atomic_load(&v->fenced))
        return FMEM_EINVAL;
    if (tl_conn < 0)
        tl_conn = (int)(atomic_fetch_add(&conn_rr, 1) % v->nconn);
    struct verbs_conn *c = &v->conn[tl_conn];
    pthread_mutex_lock(&c->lock);
    int rc = c->broken ? conn_reset(v, c) : 0;
    if (rc == 0)
        atomic_fetch_add_explicit(&c->enq, 1, memory_order_relaxed);
    if (rc == 0 && (c->posted >= POSTED_MAX || v->wait_posts)) { /* wait for this one */
        size_t boff;
        rc = post_chain(v, c, op, 1, 1, &boff);
        pthread_mutex_unlock(&c->lock);
        return rc ? rc : 1;
    }
    if (rc == 0) { /* held: it leads the next chain of this queue pair */
        char *res = posted_slot(c); /* the CAS's result, or the WRITE's data */
        struct ibv_sge *sge = &c->pend_sge[c->npend];
        struct ibv_send_wr *wr = &c->pend_wr[c->npend];
        *sge = (struct ibv_sge){.addr = (uintptr_t)res, .length = 8, .lkey = c->mr->lkey};
        *wr = (struct ibv_send_wr){.wr_id = POSTED_WR_ID, .sg_list = sge, .num_sge = 1,
                                   .opcode = write ? IBV_WR_RDMA_WRITE
                                                   : IBV_WR_ATOMIC_CMP_AND_SWP};
        uint32_t rkey;
        if (write) {
            memcpy(res, op->buf, 8);
            target(v, op, &wr->wr.rdma.remote_addr, &rkey);
            wr->wr.rdma.rkey = rkey;
        } else {
            target(v, op, &wr->wr.atomic.remote_addr, &rkey);
            wr->wr.atomic.rkey = rkey;
            wr->wr.atomic.compare_add = op->expect;
            wr->wr.atomic.swap = op->desired;
        }
        tl_prof.wrs++;
        c->npend++;
        c->posted++;
        if (op->trail) { /* sent now (behind the held ones), still unsignaled */
            struct ibv_send_wr *bad;
            for (unsigned i = 0; i < c->npend; i++)
                c->pend_wr[i].next = i + 1 < c->npend ? &c->pend_wr[i + 1] : NULL;
            c->npend = 0;
            tl_prof.posts++;
            if (ibv_post_send(c->qp, &c->pend_wr[0], &bad)) {
                c->broken = true;
                atomic_fetch_add(&v->posts_lost, 1);
                rc = FMEM_EIO;
            }
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

static uint64_t verbs_post_lost(struct transport *t)
{
    return atomic_load(&((struct verbs_transport *)t)->posts_lost);
}

static void verbs_close(struct transport *t)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    for (unsigned i = 0; i < v->nconn; i++)
        drain_posts(v, &v->conn[i]);
    for (unsigned i = 0; i < v->nconn; i++) {
        conn_close(&v->conn[i]);
        pthread_mutex_destroy(&v->conn[i].lock);
    }
    if (v->ec)
        rdma_destroy_event_channel(v->ec);
    pthread_mutex_destroy(&v->ec_lock);
    free(v);
}

/* The ticket: the calling thread's queue pair (+1) in the top byte, the
 * number of posts made on it below. */
static uint64_t verbs_post_ticket(struct transport *t)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    if (tl_conn < 0)
        return 0; /* this thread posted nothing */
    return (uint64_t)(tl_conn + 1) << 56 |
           atomic_load_explicit(&v->conn[tl_conn].enq, memory_order_relaxed);
}

static bool verbs_post_landed(struct transport *t, uint64_t ticket)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    unsigned q = (unsigned)(ticket >> 56);
    if (!q || q > v->nconn)
        return q == 0;
    if ((int)q - 1 == tl_conn)
        return true; /* our next batch on that queue pair runs after them */
    return atomic_load_explicit(&v->conn[q - 1].done, memory_order_acquire) >=
           (ticket & ((UINT64_C(1) << 56) - 1));
}

static const struct transport_ops verbs_ops = {.batch = verbs_batch, .close = verbs_close,
                                               .post = verbs_post,
                                               .post_lost = verbs_post_lost,
                                               .post_ticket = verbs_post_ticket,
                                               .post_landed = verbs_post_landed};

/* The memory node's token: 32 hex digits in a file only services can read. */
int verbs_token_read(const char *path, uint8_t token[VERBS_TOKEN_BYTES])
{
    FILE *f = fopen(path, "r");
    if (!f)
        return FMEM_EACCES;
    char hex[2 * VERBS_TOKEN_BYTES + 2] = {0};
    int ok = fgets(hex, sizeof hex, f) != NULL;
    fclose(f);
    for (unsigned i = 0; ok && i < VERBS_TOKEN_BYTES; i++) {
        unsigned b;
        if (sscanf(hex + 2 * i, "%2x", &b) != 1)
            ok = 0;
        token[i] = (uint8_t)b;
    }
    return ok ? 0 : FMEM_EINVAL;
}

static int resolve(const char *host, const char *port, struct sockaddr_storage *out)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai))
        return FMEM_EURI;
    memcpy(out, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

int verbs_transport_connect(const struct verbs_connect_params *p, struct transport **out)
{
    struct verbs_transport *v = calloc(1, sizeof *v);
    if (!v)
        return FMEM_ENOMEM;
    pthread_mutex_init(&v->ec_lock, NULL);
    for (unsigned i = 0; i < NCONN; i++)
        pthread_mutex_init(&v->conn[i].lock, NULL);
    const char *wp = getenv("FMEM_VERBS_WAIT_POSTS");
    v->wait_posts = wp && !strcmp(wp, "1");
    const char *pc = getenv("FMEM_VERBS_PROF");
    v->prof_clock = pc && !strcmp(pc, "1");
    const char *tr = getenv("FMEM_VERBS_TRAIL");
    v->no_trail = tr && !strcmp(tr, "0");
    v->hello = (struct verbs_hello){.magic = VERBS_MAGIC, .version = VERBS_VERSION,
                                    .role = p->role, .session = p->session};
    /* a service's queue pairs, reconnects included, share one session id:
     * the memory node fences them together */
    while (p->role == VERBS_ROLE_SERVICE && v->hello.session == 0)
        if (getrandom(&v->hello.session, sizeof v->hello.session, 0) != sizeof v->hello.session)
            v->hello.session = 0; /* try again */
    int rc = resolve(p->host, p->port, &v->dst);
    if (rc == 0 && p->src) {
        rc = resolve(p->src, NULL, &v->src);
        v->has_src = true;
    }
    if (rc == 0 && p->role != VERBS_ROLE_APP)
        rc = p->token_path ? verbs_token_read(p->token_path, v->hello.token) : FMEM_EACCES;
    if (rc == 0 && !(v->ec = rdma_create_event_channel()))
        rc = FMEM_EIO;
    struct verbs_welcome w = {0};
    for (unsigned i = 0; rc == 0 && i < NCONN; i++) {
        /* an application of a node with type-2B windows uses one queue
         * pair: its keys are bound to that queue pair and work from no
         * other (a reconnect after a failure gives it a new one) */
        if (i == 1 && p->role == VERBS_ROLE_APP && v->w.mw_type == 2)
            break;
        rc = conn_open(v, &v->conn[i], i ? &w : &v->w);
        if (rc == 0 && i && (w.meta_rkey != v->w.meta_rkey || w.base != v->w.base ||
                             w.size != v->w.size))
            rc = FMEM_ECORRUPT;
        v->nconn = i + 1;
    }
    if (rc) {
        verbs_close(&v->t);
        return rc;
    }
    v->t.ops = &verbs_ops;
    v->t.size = v->w.size;
    v->t.meta_size = v->w.meta_size;
    v->t.base = NULL; /* no direct mapping */
    v->t.remote_base = v->w.base;
    v->t.name = "verbs";
    v->t.keys_bound_qp = v->w.mw_type == 2;
    if (v->w.wk_size) { /* window-key table, addressed after the pool */
        v->t.wkeys_off = (v->w.size + 4095) & ~UINT64_C(4095);
        v->t.wkeys_size = v->w.wk_size;
    }
    *out = &v->t;
    return 0;
}

uint64_t verbs_transport_refused(struct transport *t)
{
    return atomic_load(&((struct verbs_transport *)t)->refused);
}

uint64_t verbs_transport_session(const struct transport *t)
{
    return ((const struct verbs_transport *)t)->hello.session;
}

bool verbs_transport_fenced(struct transport *t)
{
    return atomic_load(&((struct verbs_transport *)t)->fenced);
}

void verbs_transport_set_keys(struct transport *t, uint32_t meta_rkey, uint32_t wk_rkey)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    v->w.meta_rkey = meta_rkey;
    v->w.wk_rkey = wk_rkey;
}

uint32_t verbs_transport_mr_rkey(const struct transport *t)
{
    return ((const struct verbs_transport *)t)->w.mr_rkey;
}

/* ---- type-2B windows (verbs_proto.h) ---------------------------------------- */

unsigned verbs_transport_mw_type(const struct transport *t)
{
    return ((const struct verbs_transport *)t)->w.mw_type == 2 ? 2 : 1;
}

static struct verbs_conn *my_conn(struct verbs_transport *v)
{
    if (tl_conn < 0)
        tl_conn = (int)(atomic_fetch_add(&conn_rr, 1) % v->nconn);
    return &v->conn[tl_conn];
}

uint32_t verbs_transport_peer_qp(struct transport *t)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    struct verbs_conn *c = my_conn(v);
    pthread_mutex_lock(&c->lock);
    if (c->broken)
        conn_reset(v, c);
    uint32_t q = c->broken ? 0 : c->peer_qp;
    pthread_mutex_unlock(&c->lock);
    return q;
}

/* Wait (under c->lock) until the completions named in `want` (bit i: wr_id
 * i) have come, at most 5 s; 0, or FMEM_EIO / FMEM_EACCES. */
static int wait_wrs(struct verbs_transport *v, struct verbs_conn *c, unsigned want)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (want) {
        struct ibv_wc wc;
        int k = ibv_poll_cq(c->cq, 1, &wc);
        if (k < 0)
            return FMEM_EIO;
        if (k == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                c->broken = true;
                if (c->posted)
                    atomic_fetch_add(&v->posts_lost, 1);
                c->posted = 0;
                if (getenv("FMEM_DEBUG"))
                    fprintf(stderr, "fmem: rdma: %s\n", ibv_wc_status_str(wc.status));
                if (wc.status == IBV_WC_REM_ACCESS_ERR)
                    atomic_fetch_add(&v->refused, 1);
                return wc.status == IBV_WC_REM_ACCESS_ERR ? FMEM_EACCES : FMEM_EIO;
            }
            if (wc.wr_id < 32)
                want &= ~(1u << wc.wr_id);
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 5) {
            c->broken = true; /* its receive may still be posted: start afresh */
            return FMEM_EIO;
        }
    }
    c->posted = 0;
    return 0;
}

int verbs_transport_bind2(struct transport *t, uint64_t off, uint64_t len, uint32_t app_qp,
                          uint32_t *rkey)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    if (v->w.mw_type != 2 || !t->wkeys_off)
        return FMEM_ENOTSUP; /* no such service on this node, or not a service */
    if (off < t->meta_size || off > t->size || len == 0 || len > t->size - off)
        return FMEM_EINVAL;
    struct verbs_conn *c = my_conn(v);
    pthread_mutex_lock(&c->lock);
    int rc = c->broken ? conn_reset(v, c) : 0;
    if (rc == 0) {
        /* the answer lands at the start of the bounce buffer, the request
         * goes from behind it */
        struct verbs_mw2_req q = {.op = VERBS_MW2_BIND, .qp_num = app_qp,
                                  .addr = v->w.base + off, .len = len};
        memcpy(c->bounce + 64, &q, sizeof q);
        struct ibv_sge rs = {.addr = (uintptr_t)c->bounce, .length = 64, .lkey = c->mr->lkey},
                       ss = {.addr = (uintptr_t)c->bounce + 64, .length = sizeof q,
                             .lkey = c->mr->lkey};
        struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
        struct ibv_send_wr sw = {.wr_id = 0, .sg_list = &ss, .num_sge = 1,
                                 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
                           *sbad;
        if (ibv_post_recv(c->qp, &rw, &rbad) ||
            ibv_post_send(c->qp, pend_link(c, &sw), &sbad)) {
            c->broken = true;
            rc = FMEM_EIO;
        }
        if (rc == 0)
            rc = wait_wrs(v, c, 3);
        struct verbs_mw2_rep a;
        memcpy(&a, c->bounce, sizeof a);
        if (rc == 0)
            rc = a.status;
        if (rc == 0)
            *rkey = a.rkey;
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}

int verbs_transport_revoke2(struct transport *t, uint32_t rkey)
{
    struct verbs_transport *v = (struct verbs_transport *)t;
    if (v->w.mw_type != 2 || !t->wkeys_off)
        return FMEM_ENOTSUP;
    struct verbs_conn *c = my_conn(v);
    pthread_mutex_lock(&c->lock);
    int rc = c->broken ? conn_reset(v, c) : 0;
    if (rc == 0) {
        struct verbs_mw2_req q = {.op = VERBS_MW2_REVOKE, .rkey = rkey};
        memcpy(c->bounce + 64, &q, sizeof q);
        struct ibv_sge ss = {.addr = (uintptr_t)c->bounce + 64, .length = sizeof q,
                             .lkey = c->mr->lkey};
        struct ibv_send_wr sw = {.wr_id = 0, .sg_list = &ss, .num_sge = 1,
                                 .opcode = IBV_WR_SEND_WITH_INV,
                                 .send_flags = IBV_SEND_SIGNALED, .invalidate_rkey = rkey},
                           *sbad;
        if (ibv_post_send(c->qp, pend_link(c, &sw), &sbad)) {
            c->broken = true;
            rc = FMEM_EIO;
        } else {
            /* acknowledged: the responder invalidated the window first */
            rc = wait_wrs(v, c, 1);
        }
    }
    pthread_mutex_unlock(&c->lock);
    return rc;
}
