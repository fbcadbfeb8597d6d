/* fmem-rdmabench-serve.c - the serve mode of fmem-rdmabench: the memory
 * node side of the two baselines, on one RDMA device.
 *
 * Listens with librdmacm on ADDR:PORT. A client's connect request says
 * which baseline it runs (struct rb_hello):
 *   - free array: the server has registered a plain buffer of one 8-byte
 *     entry per 4 KiB chunk (0 = free) with remote read, write and atomic
 *     rights, and hands its address and key to the client in the accept's
 *     private data; after that its CPU takes no part;
 *   - RPC: the server keeps receives posted on the connection; one server
 *     thread (the memory node's single core) takes each request from the
 *     shared completion queue, allocates from or frees to a buddy allocator
 *     in its local memory and SENDs the answer. A client thread announces
 *     a round of calls (RB_HOLD) and its end (RB_RELEASE); while a round
 *     is on the server busy-polls (the memory node's core is its own: the
 *     best case for RPC), otherwise it sleeps on the completion channel
 *     until the NIC signals a request, and takes no CPU (which
 *     verbs_serve's regenerator may need) while other allocators are
 *     measured. --event ignores the rounds: every request then pays the
 *     NIC-to-CPU notification.
 * Prints a line starting "ready" once listening; SIGTERM/SIGINT stop it,
 * and it prints what the RPC thread did.
 *
 *   fmem-rdmabench --serve ADDR PORT [--pool-size 64M] [--event] */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#include "buddy.h"
#include "fmem-rdmabench.h"

#define MAX_CONN 1024 /* connections since start (slots are not reused) */
#define SEND_DEPTH 16
#define CQ_DEPTH 4096
#define WR_SEND UINT64_MAX

struct sconn {
    struct rdma_cm_id *id;
    uint32_t kind;
    unsigned index;
    bool inline_ok;
    bool holding; /* between RB_HOLD and RB_RELEASE (RPC thread only) */
    unsigned sent; /* answers (RPC thread only) */
    atomic_bool active;
    struct rb_msg *recv; /* RB_RECV_DEPTH, in the message region */
    struct rb_msg *send; /* one answer buffer (a client waits for each answer) */
};

struct server {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listen_id;
    struct ibv_pd *pd;
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq; /* every connection's send and receive completions */
    bool event_mode;
    uint64_t nchunks;
    uint64_t *array;   /* the free array */
    struct ibv_mr *array_mr;
    struct rb_msg *msgs; /* MAX_CONN x (RB_RECV_DEPTH + 1) */
    struct ibv_mr *msgs_mr;
    struct sconn conn[MAX_CONN];
    atomic_uint nconn;
    struct buddy buddy;
    pthread_t rpc_thread;
    bool rpc_started;
    /* figures of the RPC thread */
    uint64_t requests, failed, service_ns, wc_errors, wakeups;
};

static atomic_int stop;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop, 1);
}

static void say(const char *what)
{
    fprintf(stderr, "fmem-rdmabench serve: %s%s%s\n", what, errno ? ": " : "",
            errno ? strerror(errno) : "");
}

static int post_recv(struct server *s, struct sconn *c, unsigned slot)
{
    struct ibv_sge sge = {.addr = (uintptr_t)&c->recv[slot], .length = sizeof(struct rb_msg),
                          .lkey = s->msgs_mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)c->index << 8 | slot, .sg_list = &sge,
                             .num_sge = 1}, *bad;
    return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* One request: the buddy operation and the answer. */
static void serve_request(struct server *s, struct sconn *c, const struct rb_msg *rq)
{
    struct rb_msg *a = c->send;
    *a = (struct rb_msg){.op = rq->op, .seq = rq->seq, .order = rq->order, .status = -1};
    if (rq->op == RB_ALLOC && rq->order <= BUDDY_MAX_ORDER) {
        int64_t x = buddy_alloc(&s->buddy, rq->order);
        if (x >= 0) {
            a->chunk = (uint64_t)x;
            a->status = 0;
        }
    } else if (rq->op == RB_FREE && rq->order <= BUDDY_MAX_ORDER) {
        a->chunk = rq->chunk;
        a->status = buddy_free(&s->buddy, rq->chunk, rq->order) == 0 ? 0 : -1;
    } else if (rq->op == RB_HOLD || rq->op == RB_RELEASE) {
        c->holding = rq->op == RB_HOLD;
        a->status = 0;
    }
    s->failed += a->status != 0;
    struct ibv_sge sge = {.addr = (uintptr_t)a, .length = sizeof *a, .lkey = s->msgs_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             /* only every 8th is signaled, to free its slots
                              * in the send queue: nobody waits for them */
                             .send_flags = (++c->sent % 8 == 0 ? IBV_SEND_SIGNALED : 0) |
                                           (c->inline_ok ? IBV_SEND_INLINE : 0)}, *bad;
    if (ibv_post_send(c->id->qp, &wr, &bad))
        s->wc_errors++; /* the client went away */
}

/* Take and answer every completion there is; the number taken. */
static int drain(struct server *s)
{
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(s->cq, 16, wc);
    for (int i = 0; i < n; i++) {
        if (wc[i].wr_id == WR_SEND) {
            if (wc[i].status != IBV_WC_SUCCESS)
                s->wc_errors++;
            continue;
        }
        unsigned ci = (unsigned)(wc[i].wr_id >> 8), slot = (unsigned)(wc[i].wr_id & 0xff);
        if (ci >= MAX_CONN || wc[i].status != IBV_WC_SUCCESS) {
            s->wc_errors += wc[i].status != IBV_WC_WR_FLUSH_ERR;
            continue;
        }
        struct sconn *c = &s->conn[ci];
        if (!atomic_load(&c->active))
            continue;
        uint64_t t0 = bench_now_ns();
        struct rb_msg rq = c->recv[slot];
        if (post_recv(s, c, slot))
            s->wc_errors++;
        serve_request(s, c, &rq);
        s->service_ns += bench_now_ns() - t0;
        s->requests++;
    }
    return n < 0 ? 0 : n;
}

/* Is a round of calls on, on a connection still open? */
static bool held(struct server *s)
{
    unsigned n = atomic_load(&s->nconn);
    for (unsigned i = 0; i < n; i++)
        if (s->conn[i].holding && atomic_load(&s->conn[i].active))
            return true;
    return false;
}

static void *rpc_main(void *arg)
{
    struct server *s = arg;
    unsigned unacked = 0;
    while (!atomic_load(&stop)) {
        if (drain(s))
            continue;
        if (!s->event_mode && held(s))
            continue;
        /* nothing to do: ask for an event, look once more (a completion
         * may have come in before the request), then sleep until the NIC
         * signals one (or 100 ms pass, to see `stop`) */
        if (ibv_req_notify_cq(s->cq, 0)) {
            s->wc_errors++;
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
            continue;
        }
        if (drain(s))
            continue;
        struct pollfd pfd = {.fd = s->channel->fd, .events = POLLIN};
        if (poll(&pfd, 1, 100) <= 0)
            continue;
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(s->channel, &ev_cq, &ev_ctx) == 0) {
            s->wakeups++;
            if (++unacked == 64) {
                ibv_ack_cq_events(s->cq, unacked);
                unacked = 0;
            }
        }
    }
    if (unacked)
        ibv_ack_cq_events(s->cq, unacked);
    return NULL;
}

static int setup(struct server *s, struct ibv_context *verbs)
{
    s->pd = ibv_alloc_pd(verbs);
    s->channel = s->pd ? ibv_create_comp_channel(verbs) : NULL;
    s->cq = s->channel ? ibv_create_cq(verbs, CQ_DEPTH, NULL, s->channel, 0) : NULL;
    size_t abytes = (s->nchunks * 8 + 4095) & ~(size_t)4095;
    s->array = aligned_alloc(4096, abytes);
    size_t mbytes = ((size_t)MAX_CONN * (RB_RECV_DEPTH + 1) * sizeof(struct rb_msg) + 4095) &
                    ~(size_t)4095;
    s->msgs = aligned_alloc(4096, mbytes);
    if (!s->cq || !s->array || !s->msgs) {
        say("cannot set up the device or memory");
        return -1;
    }
    memset(s->array, 0, abytes); /* all free */
    memset(s->msgs, 0, mbytes);
    s->array_mr = ibv_reg_mr(s->pd, s->array, abytes,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    s->msgs_mr = ibv_reg_mr(s->pd, s->msgs, mbytes, IBV_ACCESS_LOCAL_WRITE);
    if (!s->array_mr || !s->msgs_mr) {
        say("ibv_reg_mr");
        return -1;
    }
    if (buddy_init(&s->buddy, s->nchunks)) {
        say("buddy allocator");
        return -1;
    }
    return 0;
}

static void reject(struct rdma_cm_id *id, const char *why)
{
    errno = 0;
    say(why);
    rdma_reject(id, NULL, 0);
    rdma_destroy_id(id);
}

static void accept_conn(struct server *s, struct rdma_cm_event *ev)
{
    struct rdma_cm_id *id = ev->id;
    struct rb_hello h = {0};
    if (ev->param.conn.private_data && ev->param.conn.private_data_len >= sizeof h)
        memcpy(&h, ev->param.conn.private_data, sizeof h);
    if (h.magic != RB_MAGIC || h.version != RB_VERSION ||
        (h.kind != RB_KIND_FREEARRAY && h.kind != RB_KIND_RPC)) {
        reject(id, "connect request from an unknown client");
        return;
    }
    if (s->nconn == MAX_CONN) {
        reject(id, "too many connections");
        return;
    }
    if (id->verbs != s->pd->context) {
        reject(id, "connect request on another device");
        return;
    }
    struct sconn *c = &s->conn[s->nconn];
    c->index = s->nconn;
    c->kind = h.kind;
    c->recv = s->msgs + (size_t)c->index * (RB_RECV_DEPTH + 1);
    c->send = c->recv + RB_RECV_DEPTH;
    struct ibv_qp_init_attr qa = {
        .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = SEND_DEPTH, .max_recv_wr = RB_RECV_DEPTH, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = sizeof(struct rb_msg)},
    };
    c->inline_ok = true;
    if (rdma_create_qp(id, s->pd, &qa)) {
        qa.cap.max_inline_data = 0;
        c->inline_ok = false;
        if (rdma_create_qp(id, s->pd, &qa)) {
            reject(id, "rdma_create_qp failed");
            return;
        }
    }
    c->id = id;
    id->context = c;
    for (unsigned i = 0; h.kind == RB_KIND_RPC && i < RB_RECV_DEPTH; i++)
        if (post_recv(s, c, i)) {
            rdma_destroy_qp(id);
            reject(id, "ibv_post_recv failed");
            return;
        }
    struct rb_welcome w = {.magic = RB_MAGIC, .version = RB_VERSION, .nchunks = s->nchunks};
    if (h.kind == RB_KIND_FREEARRAY) {
        w.rkey = s->array_mr->rkey;
        w.addr = (uintptr_t)s->array;
    }
    struct rdma_conn_param cp = {
        .private_data = &w, .private_data_len = sizeof w,
        .initiator_depth = 16, .responder_resources = 16, .rnr_retry_count = 7,
    };
    if (rdma_accept(id, &cp)) {
        say("rdma_accept");
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
        c->id = NULL;
        return;
    }
    /* usable from now on: the client may send its first request as soon
     * as it sees the connection established, before we do */
    atomic_store(&c->active, true);
    s->nconn++;
}

static void serve_event(struct server *s)
{
    struct pollfd pfd = {.fd = s->ec->fd, .events = POLLIN};
    if (poll(&pfd, 1, 100) <= 0)
        return;
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(s->ec, &ev))
        return;
    struct sconn *c = ev->id->context;
    switch (ev->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST:
        accept_conn(s, ev);
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_REJECTED:
        /* the queue pair stays until exit: the RPC thread may still be
         * answering on it */
        if (c)
            atomic_store(&c->active, false);
        if (c && ev->event == RDMA_CM_EVENT_DISCONNECTED)
            rdma_disconnect(ev->id);
        break;
    default:
        break;
    }
    rdma_ack_cm_event(ev);
}

int rb_serve(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fmem-rdmabench --serve ADDR PORT [--pool-size 64M] [--event]\n");
        return 2;
    }
    const char *addr = argv[0], *port = argv[1];
    static struct server s; /* large: keep it off the stack */
    uint64_t pool = 64u << 20;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--pool-size") && i + 1 < argc) {
            pool = rb_parse_size(argv[++i]);
        } else if (!strcmp(argv[i], "--event")) {
            s.event_mode = true;
        } else {
            fprintf(stderr, "fmem-rdmabench --serve: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    s.nchunks = pool / RB_CHUNK;
    if (s.nchunks == 0) {
        fprintf(stderr, "fmem-rdmabench --serve: bad --pool-size\n");
        return 2;
    }
    struct addrinfo hints = {.ai_family = AF_INET, .ai_flags = AI_PASSIVE}, *ai = NULL;
    if (getaddrinfo(addr, port, &hints, &ai)) {
        fprintf(stderr, "fmem-rdmabench --serve: cannot resolve %s:%s\n", addr, port);
        return 1;
    }
    int ok = (s.ec = rdma_create_event_channel()) &&
             !rdma_create_id(s.ec, &s.listen_id, NULL, RDMA_PS_TCP) &&
             !rdma_bind_addr(s.listen_id, ai->ai_addr) && !rdma_listen(s.listen_id, 64);
    freeaddrinfo(ai);
    if (!ok || !s.listen_id->verbs) {
        say(ok ? "the address is on no RDMA device" : "listen");
        return 1;
    }
    if (setup(&s, s.listen_id->verbs))
        return 1;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (pthread_create(&s.rpc_thread, NULL, rpc_main, &s)) {
        say("pthread_create");
        return 1;
    }
    s.rpc_started = true;
    printf("ready: %s on %s:%s, free array of %llu entries (%llu KiB, rkey 0x%x), "
           "rpc: buddy of %llu chunks, server thread %s\n",
           ibv_get_device_name(s.listen_id->verbs->device), addr, port,
           (unsigned long long)s.nchunks, (unsigned long long)(s.nchunks * 8 / 1024),
           s.array_mr->rkey, (unsigned long long)s.nchunks,
           s.event_mode ? "sleeps between requests" : "polls during rounds of calls");
    fflush(stdout);
    while (!atomic_load(&stop))
        serve_event(&s);
    pthread_join(s.rpc_thread, NULL);
    uint64_t used = 0;
    for (uint64_t i = 0; i < s.nchunks; i++)
        used += s.array[i] != 0;
    printf("rpc: %llu requests (%llu refused), %.2f us from completion to answer posted, "
           "%llu wake-ups; %llu completion errors; free array: %llu entries in use at exit\n",
           (unsigned long long)s.requests, (unsigned long long)s.failed,
           s.requests ? s.service_ns / 1e3 / (double)s.requests : 0.0,
           (unsigned long long)s.wakeups, (unsigned long long)s.wc_errors,
           (unsigned long long)used);
    for (unsigned i = 0; i < s.nconn; i++) {
        if (s.conn[i].id) {
            rdma_destroy_qp(s.conn[i].id);
            rdma_destroy_id(s.conn[i].id);
        }
    }
    ibv_dereg_mr(s.msgs_mr);
    ibv_dereg_mr(s.array_mr);
    ibv_destroy_cq(s.cq);
    ibv_destroy_comp_channel(s.channel);
    ibv_dealloc_pd(s.pd);
    rdma_destroy_id(s.listen_id);
    rdma_destroy_event_channel(s.ec);
    buddy_destroy(&s.buddy);
    free(s.array);
    free(s.msgs);
    return 0;
}
