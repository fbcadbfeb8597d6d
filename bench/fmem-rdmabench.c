/* fmem-rdmabench - fmem against two baselines over the same RDMA transport,
 * in one run: allocation and free latency of 4 KiB and 64 KiB blocks, with
 * 1 and N client threads, and the RDMA operations each call costs.
 *
 *   fmem        fmem_alloc / fmem_free through the public API on an
 *               rdma:// pool (a verbs_serve memory node: every block behind
 *               its own memory window); operations from fmem_stats deltas
 *   free-array  the one-sided baseline of bench/baseline_freearray.c over
 *               real RDMA: one 8-byte entry per 4 KiB chunk in a buffer the
 *               serve mode registered with remote read/write/atomic rights;
 *               first-fit scan with READs of 64 entries, claim with one CAS
 *               per chunk (posted as one chain), undo a partial claim with
 *               WRITEs, free with one WRITE of zeros
 *   rpc         two-sided: SEND a request, RECV the answer; a server thread
 *               of the serve mode allocates from a buddy allocator
 *
 * Every configuration (block size, threads) runs in rounds: each thread
 * allocates --batch blocks (every call timed), all threads meet, each frees
 * its blocks (timed), all meet again. The allocators take turns round by
 * round, in a rotating order, so that a busy spell of the machine hits all
 * of them. Operations are counted per phase, so "per alloc" and "per free"
 * do not mix. The first --warmup rounds are not measured.
 *
 *   fmem-rdmabench [--fmem URI] [--baseline HOST:PORT] [--threads 1,4]
 *                  [--sizes 4K,64K] [--ops N] [--batch N] [--warmup N]
 *                  [--allocators fmem,free-array,rpc] [--json]
 *   fmem-rdmabench --serve ADDR PORT [--pool-size 64M]
 */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "fmem.h"
#include "fmem-rdmabench.h"
#include "samples.h"
#include "size_parse.h"
#include "transport.h"
#include "verbs/transport_verbs.h"

#define MAX_THREADS 64
#define MAX_SIZES 8
#define MAX_CHUNKS 512            /* largest block: 2 MiB */
#define SCAN_ENTRIES 64           /* free-array entries per READ */
#define MAX_WR 128                /* work requests per post */
#define CM_TIMEOUT_MS 5000
#define WC_TIMEOUT_NS 10000000000ull

/* client buffer: scan area | CAS results | zeros | rpc send | rpc recv */
#define SCAN_OFF 0
#define RES_OFF (MAX_CHUNKS * 8)
#define ZERO_OFF (2 * MAX_CHUNKS * 8)
#define SEND_OFF (3 * MAX_CHUNKS * 8)
#define RECV_OFF (SEND_OFF + 64)
#define BUF_BYTES (SEND_OFF + 4096)

enum { A_FMEM, A_FREEARRAY, A_RPC, NALLOC };
static const char *const alloc_names[NALLOC] = {"fmem", "free-array", "rpc"};

enum { WR_LAST = 1, WR_SEND, WR_RECV };

struct cnt {
    uint64_t rtt, rd, wr, cas, cas_fail, send;
};

/* Where fmem's calls spend their time (the verbs transport's per-thread
 * trace, transport.h): chains waited for, time from posting each to its
 * completion, work requests posted (chained and posted alone). */
struct prof {
    uint64_t chains, wait_ns, wrs, posts, ns;
    uint64_t user_ns, sys_ns; /* the thread's CPU time (getrusage), per phase */
};

struct trace {
    struct tp_trace tp;
    struct verbs_prof v;
};

static void trace_now(struct trace *t)
{
    t->tp = tp_trace;
    verbs_transport_thread_prof(&t->v);
}

static void prof_add(struct prof *p, const struct trace *a, uint64_t ns)
{
    struct trace b;
    trace_now(&b);
    p->chains += b.tp.round_trips - a->tp.round_trips;
    p->wait_ns += b.v.wait_ns - a->v.wait_ns;
    p->wrs += b.v.wrs - a->v.wrs;
    p->posts += b.v.posts - a->v.posts;
    p->ns += ns;
}

/* The calling thread's user and system CPU time so far. */
static void thread_cpu(uint64_t *user_ns, uint64_t *sys_ns)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru)) {
        *user_ns = *sys_ns = 0;
        return;
    }
    *user_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000u + (uint64_t)ru.ru_utime.tv_usec * 1000u;
    *sys_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000u + (uint64_t)ru.ru_stime.tv_usec * 1000u;
}

/* Add the CPU time since (u0, s0) to p. */
static void cpu_add(struct prof *p, uint64_t u0, uint64_t s0)
{
    uint64_t u, s;
    thread_cpu(&u, &s);
    p->user_ns += u - u0;
    p->sys_ns += s - s0;
}

/* ---- helpers ------------------------------------------------------------- */

uint64_t rb_parse_size(const char *s)
{
    uint64_t v; /* the one size parser: size_parse.h */
    return size_parse(s, &v) ? v : 0;
}

static void die(const char *what)
{
    fprintf(stderr, "fmem-rdmabench: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
    exit(1);
}

/* ---- RDMA connections to the serve mode ----------------------------------- */

struct rconn {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *buf;
    bool inline_ok;
    struct rb_welcome w;
};

static void wait_cm(struct rconn *c, enum rdma_cm_event_type want, const char *what)
{
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(c->ec, &ev))
        die("rdma_get_cm_event");
    bool ok = ev->event == want;
    if (ok && want == RDMA_CM_EVENT_ESTABLISHED) {
        if (!ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof c->w)
            ok = false;
        else
            memcpy(&c->w, ev->param.conn.private_data, sizeof c->w);
    }
    if (!ok) {
        fprintf(stderr, "fmem-rdmabench: %s: got %s (status %d)\n", what, rdma_event_str(ev->event),
                ev->status);
        exit(1);
    }
    rdma_ack_cm_event(ev);
}

static void rconn_open(struct rconn *c, const char *host, const char *port, uint32_t kind)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, port, &hints, &ai)) {
        fprintf(stderr, "fmem-rdmabench: cannot resolve %s:%s\n", host, port);
        exit(1);
    }
    if (!(c->ec = rdma_create_event_channel()) || rdma_create_id(c->ec, &c->id, NULL, RDMA_PS_TCP))
        die("rdma_create_id");
    /* no source address: the route to the server picks the device */
    if (rdma_resolve_addr(c->id, NULL, ai->ai_addr, CM_TIMEOUT_MS))
        die("rdma_resolve_addr");
    freeaddrinfo(ai);
    wait_cm(c, RDMA_CM_EVENT_ADDR_RESOLVED, "resolving the address");
    if (rdma_resolve_route(c->id, CM_TIMEOUT_MS))
        die("rdma_resolve_route");
    wait_cm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, "resolving the route");
    if (!(c->pd = ibv_alloc_pd(c->id->verbs)) ||
        !(c->cq = ibv_create_cq(c->id->verbs, 2 * MAX_WR, NULL, NULL, 0)))
        die("ibv_alloc_pd/ibv_create_cq");
    if (!(c->buf = aligned_alloc(4096, BUF_BYTES)))
        die("aligned_alloc");
    memset(c->buf, 0, BUF_BYTES);
    if (!(c->mr = ibv_reg_mr(c->pd, c->buf, BUF_BYTES, IBV_ACCESS_LOCAL_WRITE)))
        die("ibv_reg_mr");
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
        .cap = {.max_send_wr = MAX_WR, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1,
                .max_inline_data = sizeof(struct rb_msg)},
    };
    c->inline_ok = true;
    if (rdma_create_qp(c->id, c->pd, &qa)) {
        qa.cap.max_inline_data = 0;
        c->inline_ok = false;
        if (rdma_create_qp(c->id, c->pd, &qa))
            die("rdma_create_qp");
    }
    struct rb_hello h = {.magic = RB_MAGIC, .version = RB_VERSION, .kind = kind};
    struct rdma_conn_param cp = {
        .private_data = &h, .private_data_len = sizeof h,
        .initiator_depth = 16, .responder_resources = 16, .retry_count = 7, .rnr_retry_count = 7,
    };
    if (rdma_connect(c->id, &cp))
        die("rdma_connect");
    wait_cm(c, RDMA_CM_EVENT_ESTABLISHED, "connecting to the serve mode");
    if (c->w.magic != RB_MAGIC || c->w.version != RB_VERSION || c->w.nchunks == 0) {
        fprintf(stderr, "fmem-rdmabench: %s:%s is not an fmem-rdmabench serve mode\n", host, port);
        exit(1);
    }
}

static void rconn_close(struct rconn *c)
{
    if (!c->id)
        return;
    rdma_disconnect(c->id);
    rdma_destroy_qp(c->id);
    ibv_dereg_mr(c->mr);
    ibv_destroy_cq(c->cq);
    ibv_dealloc_pd(c->pd);
    rdma_destroy_id(c->id);
    rdma_destroy_event_channel(c->ec);
    free(c->buf);
    memset(c, 0, sizeof *c);
}

/* Wait for the completion of the work request `want` (others that come
 * first are taken and dropped); any error is fatal: the baselines never
 * expect one. */
static void wait_wc(struct rconn *c, uint64_t want)
{
    uint64_t deadline = 0;
    for (unsigned spin = 0;; spin++) {
        struct ibv_wc wc;
        int k = ibv_poll_cq(c->cq, 1, &wc);
        if (k < 0)
            die("ibv_poll_cq");
        if (k == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                fprintf(stderr, "fmem-rdmabench: work request %" PRIu64 ": %s\n", (uint64_t)wc.wr_id,
                        ibv_wc_status_str(wc.status));
                exit(1);
            }
            if (wc.wr_id == want)
                return;
            continue;
        }
        if ((spin & 4095) == 4095) {
            uint64_t t = bench_now_ns();
            if (!deadline)
                deadline = t + WC_TIMEOUT_NS;
            else if (t > deadline) {
                fprintf(stderr, "fmem-rdmabench: no completion in 10 s\n");
                exit(1);
            }
        }
    }
}

/* Post wr[0..n) as one chain, only the last signaled, and wait: one round trip. */
static void post_chain(struct rconn *c, struct ibv_send_wr *wr, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
        wr[i].send_flags = i + 1 < n ? 0 : IBV_SEND_SIGNALED;
    }
    struct ibv_send_wr *bad;
    if ((errno = ibv_post_send(c->id->qp, wr, &bad)))
        die("ibv_post_send");
    wait_wc(c, WR_LAST);
}

/* ---- free-array baseline over RDMA ---------------------------------------- */

static bool run_free(const uint64_t *e, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (e[i])
            return false;
    return true;
}

/* CAS entries [first, first+n) from 0 to tag, at most MAX_WR per post;
 * undo a partial claim with WRITEs of zeros. true: claimed. */
static bool fa_claim(struct rconn *c, uint64_t first, uint64_t n, uint64_t tag, uint64_t *seen,
                     struct cnt *k)
{
    struct ibv_send_wr wr[MAX_WR];
    struct ibv_sge sge[MAX_WR];
    uint64_t *res = (uint64_t *)(c->buf + RES_OFF);
    for (uint64_t done = 0; done < n;) {
        size_t m = n - done < MAX_WR ? (size_t)(n - done) : MAX_WR;
        for (size_t i = 0; i < m; i++) {
            sge[i] = (struct ibv_sge){.addr = (uintptr_t)&res[done + i], .length = 8,
                                      .lkey = c->mr->lkey};
            wr[i] = (struct ibv_send_wr){.wr_id = WR_LAST, .sg_list = &sge[i], .num_sge = 1,
                                         .opcode = IBV_WR_ATOMIC_CMP_AND_SWP};
            wr[i].wr.atomic.remote_addr = c->w.addr + 8 * (first + done + i);
            wr[i].wr.atomic.rkey = c->w.rkey;
            wr[i].wr.atomic.compare_add = 0;
            wr[i].wr.atomic.swap = tag;
        }
        post_chain(c, wr, m);
        k->rtt++;
        k->cas += m;
        done += m;
    }
    uint64_t lost = 0;
    for (uint64_t i = 0; i < n; i++)
        lost += res[i] != 0;
    k->cas_fail += lost;
    if (!lost)
        return true;
    size_t m = 0;
    for (uint64_t i = 0; i < n; i++) {
        seen[i] = res[i];
        if (res[i] != 0)
            continue;
        sge[m] = (struct ibv_sge){.addr = (uintptr_t)(c->buf + ZERO_OFF), .length = 8,
                                  .lkey = c->mr->lkey};
        wr[m] = (struct ibv_send_wr){.wr_id = WR_LAST, .sg_list = &sge[m], .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE};
        wr[m].wr.rdma.remote_addr = c->w.addr + 8 * (first + i);
        wr[m].wr.rdma.rkey = c->w.rkey;
        if (++m == MAX_WR || i + 1 == n) {
            post_chain(c, wr, m);
            k->rtt++;
            k->wr += m;
            m = 0;
        }
    }
    if (m) {
        post_chain(c, wr, m);
        k->rtt++;
        k->wr += m;
    }
    return false;
}

/* First fit from entry 0. 0, or -1 when no run of n free entries is left. */
/* READ or WRITE entries [first, first + n) of the free array from or to
 * `local` (inside the registered buffer), in one round trip. */
static void array_op(struct rconn *c, enum ibv_wr_opcode op, void *local, uint64_t first,
                     uint64_t n)
{
    struct ibv_sge sge = {.addr = (uintptr_t)local, .length = (uint32_t)(8 * n),
                          .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_LAST, .sg_list = &sge, .num_sge = 1, .opcode = op};
    wr.wr.rdma.remote_addr = c->w.addr + 8 * first;
    wr.wr.rdma.rkey = c->w.rkey;
    post_chain(c, &wr, 1);
}

static int fa_alloc(struct rconn *c, uint64_t n, uint64_t tag, uint64_t *out, struct cnt *k)
{
    uint64_t total = c->w.nchunks, win = n > SCAN_ENTRIES ? n : SCAN_ENTRIES;
    uint64_t *scan = (uint64_t *)(c->buf + SCAN_OFF);
    for (uint64_t base = 0; base < total; base += win) {
        uint64_t cnt = total - base < win ? total - base : win;
        array_op(c, IBV_WR_RDMA_READ, scan, base, cnt);
        k->rtt++;
        k->rd++;
        for (uint64_t off = 0; off + n <= cnt; off += n) {
            if (!run_free(scan + off, n))
                continue;
            if (fa_claim(c, base + off, n, tag, scan + off, k)) {
                *out = base + off;
                return 0;
            }
        }
    }
    return -1;
}

static void fa_free(struct rconn *c, uint64_t first, uint64_t n, struct cnt *k)
{
    array_op(c, IBV_WR_RDMA_WRITE, c->buf + ZERO_OFF, first, n);
    k->rtt++;
    k->wr++;
}

/* ---- RPC baseline ---------------------------------------------------------- */

/* One request and its answer: SEND, then wait for the answer's RECV. The
 * answer proves the request arrived, so the SEND is not waited for; only
 * every 32nd is signaled, to free its slots in the send queue. */
static int rpc_call(struct rconn *c, uint32_t op, uint64_t chunk, unsigned order, uint64_t *out,
                    struct cnt *k)
{
    static _Thread_local uint32_t seq;
    struct rb_msg *rq = (struct rb_msg *)(c->buf + SEND_OFF), *an = (struct rb_msg *)(c->buf + RECV_OFF);
    struct ibv_sge rsge = {.addr = (uintptr_t)an, .length = sizeof *an, .lkey = c->mr->lkey};
    struct ibv_recv_wr rwr = {.wr_id = WR_RECV, .sg_list = &rsge, .num_sge = 1}, *rbad;
    if ((errno = ibv_post_recv(c->id->qp, &rwr, &rbad)))
        die("ibv_post_recv");
    *rq = (struct rb_msg){.op = op, .chunk = chunk, .order = order, .seq = ++seq};
    struct ibv_sge sge = {.addr = (uintptr_t)rq, .length = sizeof *rq, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = WR_SEND, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = (seq % 32 == 0 ? IBV_SEND_SIGNALED : 0) |
                                           (c->inline_ok ? IBV_SEND_INLINE : 0)},
                       *bad;
    if ((errno = ibv_post_send(c->id->qp, &wr, &bad)))
        die("ibv_post_send");
    wait_wc(c, WR_RECV);
    k->rtt++;
    k->send++;
    if (an->seq != seq || an->op != op) {
        fprintf(stderr, "fmem-rdmabench: rpc answer out of order\n");
        exit(1);
    }
    if (out)
        *out = an->chunk;
    return an->status;
}

/* ---- one configuration ------------------------------------------------------ */

/* A configuration is a block size and a thread count. The allocators take
 * turns round by round (fmem's round, the free array's, the RPC's, then the
 * next round in the next order), so that a busy spell of the machine falls
 * on all of them alike. */

enum { PH_ALLOC_START, PH_ALLOC_END, PH_FREE_END };

struct run;

struct pbar {
    pthread_mutex_t m;
    pthread_cond_t cv;
    unsigned n, arrived;
    uint64_t gen;
};

/* one thread's figures for one allocator */
struct aslot {
    struct rconn *conn; /* baselines */
    uint64_t *lat_a, *lat_f;
    size_t na, nf;
    uint64_t fail_a, fail_f;
    struct cnt ca, cf; /* baselines: measured rounds only */
    struct prof pa, pf; /* fmem: its transport's trace, measured rounds */
};

struct tctx {
    struct run *r;
    unsigned idx;
    struct aslot s[NALLOC];
    fmem_handle *h;
    uint64_t *chunk;
    bool *ok;
};

struct run {
    size_t size;
    unsigned threads, batch, rounds, warmup;
    int order[NALLOC], nalloc;
    fmem_pool *pool;
    struct pbar bar;
    fmem_stats_t snap;
    struct cnt fa, ff; /* fmem: deltas of measured phases */
    uint64_t t_start, wall_ns[NALLOC];
    struct tctx t[MAX_THREADS];
};

static void cnt_add_stats(struct cnt *k, const fmem_stats_t *a, const fmem_stats_t *b)
{
    k->rtt += b->round_trips - a->round_trips;
    k->rd += b->reads - a->reads;
    k->wr += b->writes - a->writes;
    k->cas += b->cas_ops - a->cas_ops;
    k->cas_fail += b->cas_failures - a->cas_failures;
}

static void cnt_add(struct cnt *k, const struct cnt *s)
{
    k->rtt += s->rtt;
    k->rd += s->rd;
    k->wr += s->wr;
    k->cas += s->cas;
    k->cas_fail += s->cas_fail;
    k->send += s->send;
}

/* All threads meet; the last to arrive snapshots fmem's counters between
 * fmem's phases and times the measured rounds. */
static void phase(struct run *r, int alloc, int ph, bool measured)
{
    struct pbar *b = &r->bar;
    pthread_mutex_lock(&b->m);
    uint64_t g = b->gen;
    if (++b->arrived == b->n) {
        if (alloc == A_FMEM) {
            fmem_stats_t now = {0};
            if (fmem_stats(r->pool, &now))
                die("fmem_stats");
            if (measured && ph == PH_ALLOC_END)
                cnt_add_stats(&r->fa, &r->snap, &now);
            else if (measured && ph == PH_FREE_END)
                cnt_add_stats(&r->ff, &r->snap, &now);
            r->snap = now;
        }
        if (ph == PH_ALLOC_START)
            r->t_start = bench_now_ns();
        else if (ph == PH_FREE_END && measured)
            r->wall_ns[alloc] += bench_now_ns() - r->t_start;
        b->arrived = 0;
        b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (g == b->gen)
            pthread_cond_wait(&b->cv, &b->m);
    }
    pthread_mutex_unlock(&b->m);
}

static unsigned log2_chunks(size_t size)
{
    unsigned k = 0;
    while (((size_t)RB_CHUNK << k) < size)
        k++;
    return k;
}

/* One round of allocator a: allocate the batch, meet, free it, meet. */
static void one_round(struct tctx *t, int a, bool measured)
{
    struct run *r = t->r;
    struct aslot *sl = &t->s[a];
    unsigned order = log2_chunks(r->size);
    uint64_t n = UINT64_C(1) << order;
    uint64_t tag = ((uint64_t)getpid() << 16) | (t->idx + 1);
    struct cnt scratch;
    struct cnt *ka = measured ? &sl->ca : &scratch, *kf = measured ? &sl->cf : &scratch;
    if (a == A_RPC) /* the server polls from now on (see the serve mode) */
        rpc_call(sl->conn, RB_HOLD, 0, 0, NULL, &scratch);
    phase(r, a, PH_ALLOC_START, measured);
    uint64_t u0, s0; /* CPU over the phase: two system calls per batch, not per call */
    thread_cpu(&u0, &s0);
    for (unsigned i = 0; i < r->batch; i++) {
        struct trace tr0;
        trace_now(&tr0);
        uint64_t t0 = bench_now_ns();
        int rc;
        switch (a) {
        case A_FMEM: rc = fmem_alloc(r->pool, r->size, &t->h[i]); break;
        case A_FREEARRAY: rc = fa_alloc(sl->conn, n, tag, &t->chunk[i], ka); break;
        default: rc = rpc_call(sl->conn, RB_ALLOC, 0, order, &t->chunk[i], ka); break;
        }
        uint64_t dt = bench_now_ns() - t0;
        t->ok[i] = rc == 0;
        if (measured && a == A_FMEM)
            prof_add(&sl->pa, &tr0, dt);
        if (measured) {
            sl->lat_a[sl->na++] = dt;
            sl->fail_a += rc != 0;
        }
    }
    if (measured && a == A_FMEM)
        cpu_add(&sl->pa, u0, s0);
    phase(r, a, PH_ALLOC_END, measured);
    thread_cpu(&u0, &s0);
    for (unsigned i = 0; i < r->batch; i++) {
        if (!t->ok[i])
            continue;
        struct trace tr0;
        trace_now(&tr0);
        uint64_t t0 = bench_now_ns();
        int rc = 0;
        switch (a) {
        case A_FMEM: rc = fmem_free(r->pool, &t->h[i]); break;
        case A_FREEARRAY: fa_free(sl->conn, t->chunk[i], n, kf); break;
        default: rc = rpc_call(sl->conn, RB_FREE, t->chunk[i], order, NULL, kf); break;
        }
        uint64_t dt = bench_now_ns() - t0;
        if (measured && a == A_FMEM)
            prof_add(&sl->pf, &tr0, dt);
        if (measured) {
            sl->lat_f[sl->nf++] = dt;
            sl->fail_f += rc != 0;
        }
    }
    if (measured && a == A_FMEM)
        cpu_add(&sl->pf, u0, s0);
    phase(r, a, PH_FREE_END, measured);
    if (a == A_RPC)
        rpc_call(sl->conn, RB_RELEASE, 0, 0, NULL, &scratch);
}

static void *worker(void *arg)
{
    struct tctx *t = arg;
    struct run *r = t->r;
    for (unsigned round = 0; round < r->warmup + r->rounds; round++)
        for (int k = 0; k < r->nalloc; k++)
            one_round(t, r->order[(round + (unsigned)k) % (unsigned)r->nalloc], round >= r->warmup);
    return NULL;
}

struct result {
    int alloc;
    size_t size;
    unsigned threads;
    size_t na, nf;
    uint64_t fail_a, fail_f;
    struct stat_ns a, f; /* ns */
    struct cnt ca, cf;
    struct prof pa, pf;
    double wall_s; /* of its measured rounds */
};

/* Run one configuration for every allocator in want[]; their results go
 * to out[] (as many as allocators run). conns[k][i]: thread i's
 * connection for the free array (k = 0) and the RPC (k = 1). */
static size_t run_config(const bool *want, size_t size, unsigned threads, unsigned batch,
                         unsigned rounds, unsigned warmup, fmem_pool *pool,
                         struct rconn (*conns)[MAX_THREADS], struct result *out)
{
    static struct run r;
    memset(&r, 0, sizeof r);
    r.size = size;
    r.threads = threads;
    r.batch = batch;
    r.rounds = rounds;
    r.warmup = warmup;
    r.pool = pool;
    for (int a = 0; a < NALLOC; a++)
        if (want[a])
            r.order[r.nalloc++] = a;
    pthread_mutex_init(&r.bar.m, NULL);
    pthread_cond_init(&r.bar.cv, NULL);
    r.bar.n = threads;
    size_t per = (size_t)batch * rounds;
    for (unsigned i = 0; i < threads; i++) {
        struct tctx *t = &r.t[i];
        t->r = &r;
        t->idx = i;
        for (int a = 0; a < NALLOC; a++) {
            struct aslot *sl = &t->s[a];
            if (!want[a])
                continue;
            sl->conn = a == A_FMEM ? NULL : &conns[a == A_FREEARRAY ? 0 : 1][i];
            sl->lat_a = calloc(per, sizeof *sl->lat_a);
            sl->lat_f = calloc(per, sizeof *sl->lat_f);
            if (!sl->lat_a || !sl->lat_f)
                die("calloc");
        }
        t->h = calloc(batch, sizeof *t->h);
        t->chunk = calloc(batch, sizeof *t->chunk);
        t->ok = calloc(batch, sizeof *t->ok);
        if (!t->h || !t->chunk || !t->ok)
            die("calloc");
    }
    if (want[A_FMEM] && fmem_stats(pool, &r.snap))
        die("fmem_stats");
    pthread_t tid[MAX_THREADS];
    for (unsigned i = 0; i < threads; i++)
        if ((errno = pthread_create(&tid[i], NULL, worker, &r.t[i])))
            die("pthread_create");
    for (unsigned i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    uint64_t *la = calloc(per * threads, sizeof *la), *lf = calloc(per * threads, sizeof *lf);
    if (!la || !lf)
        die("calloc");
    size_t nout = 0;
    for (int k = 0; k < r.nalloc; k++) {
        int a = r.order[k];
        struct result *res = &out[nout++];
        *res = (struct result){.alloc = a, .size = size, .threads = threads,
                               .wall_s = (double)r.wall_ns[a] / 1e9};
        for (unsigned i = 0; i < threads; i++) {
            struct aslot *sl = &r.t[i].s[a];
            memcpy(la + res->na, sl->lat_a, sl->na * sizeof *la);
            memcpy(lf + res->nf, sl->lat_f, sl->nf * sizeof *lf);
            res->na += sl->na;
            res->nf += sl->nf;
            res->fail_a += sl->fail_a;
            res->fail_f += sl->fail_f;
            cnt_add(&res->ca, &sl->ca);
            cnt_add(&res->cf, &sl->cf);
            res->pa.chains += sl->pa.chains, res->pa.wait_ns += sl->pa.wait_ns;
            res->pa.wrs += sl->pa.wrs, res->pa.ns += sl->pa.ns;
            res->pa.posts += sl->pa.posts, res->pf.posts += sl->pf.posts;
            res->pf.chains += sl->pf.chains, res->pf.wait_ns += sl->pf.wait_ns;
            res->pf.wrs += sl->pf.wrs, res->pf.ns += sl->pf.ns;
            res->pa.user_ns += sl->pa.user_ns, res->pa.sys_ns += sl->pa.sys_ns;
            res->pf.user_ns += sl->pf.user_ns, res->pf.sys_ns += sl->pf.sys_ns;
            free(sl->lat_a);
            free(sl->lat_f);
        }
        if (a == A_FMEM) {
            res->ca = r.fa;
            res->cf = r.ff;
        }
        res->a = samples_summarize(la, res->na);
        res->f = samples_summarize(lf, res->nf);
    }
    for (unsigned i = 0; i < threads; i++) {
        free(r.t[i].h);
        free(r.t[i].chunk);
        free(r.t[i].ok);
    }
    free(la);
    free(lf);
    pthread_mutex_destroy(&r.bar.m);
    pthread_cond_destroy(&r.bar.cv);
    return nout;
}

/* ---- report ------------------------------------------------------------------- */

static double per(uint64_t x, size_t n)
{
    return n ? (double)x / (double)n : 0.0;
}

static const char *size_str(size_t size, char *buf, size_t len)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, len, "%zu MiB", size >> 20);
    else
        snprintf(buf, len, "%zu KiB", size >> 10);
    return buf;
}

static const struct result *find(const struct result *res, size_t nres, int alloc, size_t size,
                                 unsigned threads)
{
    for (size_t i = 0; i < nres; i++)
        if (res[i].alloc == alloc && res[i].size == size && res[i].threads == threads)
            return &res[i];
    return NULL;
}

static void print_ops(const char *what, const struct cnt *k, size_t n, uint64_t fail)
{
    printf("  %-6s %6.2f %6.2f %6.2f %6.2f %6.2f %6.2f", what, per(k->rtt, n), per(k->rd, n),
           per(k->wr, n), per(k->cas, n), per(k->cas_fail, n), per(k->send, n));
    if (fail)
        printf("  (%" PRIu64 " failed)", fail);
}

/* Where a call's time goes, means per call: waiting for chains (post to
 * completion) and the rest (the library's own work, locks, the wait for a
 * queue pair another thread holds). The free array's round trip (its
 * median allocation over its round trips) for scale. */
static void print_prof(const struct result *f, const struct result *fa)
{
    if (!f || !f->na || !f->pa.chains)
        return;
    double rt = fa && per(fa->ca.rtt, fa->na) > 0 ? fa->a.median / per(fa->ca.rtt, fa->na) : 0;
    printf("fmem time per call (means; transport trace): chains waited, us per chain, work\n"
           "  requests posted, ibv_post_send calls, us waiting, us elsewhere, us total%s\n"
           "  (chains are timed only with FMEM_VERBS_PROF=1: the clock costs a system call\n"
           "  in the soft-RoCE VM)\n",
           rt > 0 ? "; total in free-array round trips" : "");
    const struct prof *p[2] = {&f->pa, &f->pf};
    size_t n[2] = {f->na, f->nf};
    for (int j = 0; j < 2; j++) {
        if (!n[j] || !p[j]->chains)
            continue;
        double total = (double)p[j]->ns / (double)n[j] / 1e3,
               wait = (double)p[j]->wait_ns / (double)n[j] / 1e3;
        if (p[j]->wait_ns) /* chains timed: FMEM_VERBS_PROF=1 */
            printf("  %-5s %5.2f %7.1f %5.2f %5.2f %8.1f %8.1f %8.1f", j ? "free" : "alloc",
                   per(p[j]->chains, n[j]), (double)p[j]->wait_ns / (double)p[j]->chains / 1e3,
                   per(p[j]->wrs, n[j]), per(p[j]->posts, n[j]), wait, total - wait, total);
        else
            printf("  %-5s %5.2f %7s %5.2f %5.2f %8s %8s %8.1f", j ? "free" : "alloc",
                   per(p[j]->chains, n[j]), "-", per(p[j]->wrs, n[j]), per(p[j]->posts, n[j]),
                   "-", "-", total);
        if (rt > 0)
            printf("   %.2f", total * 1e3 / rt);
        printf("\n");
    }
    /* getrusage counts in scheduler ticks on some kernels: means over a
     * whole run, not single calls */
    printf("fmem CPU per call (the calling thread's, getrusage, means): us user, us system\n");
    for (int j = 0; j < 2; j++)
        if (n[j])
            printf("  %-5s %8.1f %8.1f\n", j ? "free" : "alloc",
                   (double)p[j]->user_ns / (double)n[j] / 1e3,
                   (double)p[j]->sys_ns / (double)n[j] / 1e3);
}

static void print_ratio(const char *name, const struct result *f, const struct result *b)
{
    if (!f || !b || !b->a.median || !b->f.median)
        return;
    printf("%-16s %7.2fx %7.2fx %7.2fx  %7.2fx %7.2fx %7.2fx   rtt/alloc %.2fx, rtt/free %.2fx\n",
           name, f->a.median / b->a.median, f->a.p99 / b->a.p99, f->a.mean / b->a.mean,
           f->f.median / b->f.median, f->f.p99 / b->f.p99, f->f.mean / b->f.mean,
           per(b->ca.rtt, b->na) ? per(f->ca.rtt, f->na) / per(b->ca.rtt, b->na) : 0.0,
           per(b->cf.rtt, b->nf) ? per(f->cf.rtt, f->nf) / per(b->cf.rtt, b->nf) : 0.0);
}

static void print_table(const struct result *res, size_t nres, const size_t *sizes, unsigned nsizes,
                        const unsigned *threads, unsigned nthreads, unsigned ops, unsigned batch)
{
    char sb[32];
    for (unsigned si = 0; si < nsizes; si++) {
        for (unsigned ti = 0; ti < nthreads; ti++) {
            printf("\n== %s blocks, %u thread%s: %u allocations and frees per thread, %u held per round ==\n",
                   size_str(sizes[si], sb, sizeof sb), threads[ti], threads[ti] == 1 ? "" : "s", ops,
                   batch);
            printf("%-16s %26s  %26s\n", "", "alloc (us)", "free (us)");
            printf("%-16s %8s %8s %8s  %8s %8s %8s\n", "allocator", "median", "p99", "mean", "median",
                   "p99", "mean");
            for (int a = 0; a < NALLOC; a++) {
                const struct result *r = find(res, nres, a, sizes[si], threads[ti]);
                if (r)
                    printf("%-16s %8.1f %8.1f %8.1f  %8.1f %8.1f %8.1f\n", alloc_names[a],
                           r->a.median / 1e3, r->a.p99 / 1e3, r->a.mean / 1e3, r->f.median / 1e3,
                           r->f.p99 / 1e3, r->f.mean / 1e3);
            }
            const struct result *f = find(res, nres, A_FMEM, sizes[si], threads[ti]);
            if (f && f->a.median > 0)
                printf("fmem free/alloc median: %.2fx\n", f->f.median / f->a.median);
            print_ratio("fmem/free-array", f, find(res, nres, A_FREEARRAY, sizes[si], threads[ti]));
            print_ratio("fmem/rpc", f, find(res, nres, A_RPC, sizes[si], threads[ti]));
            printf("RDMA operations per call: round trips, READ, WRITE, CAS (of which lost), SEND\n");
            printf("%-16s  %-6s %6s %6s %6s %6s %6s %6s\n", "allocator", "", "rtt", "READ", "WRITE",
                   "CAS", "lost", "SEND");
            for (int a = 0; a < NALLOC; a++) {
                const struct result *r = find(res, nres, a, sizes[si], threads[ti]);
                if (!r)
                    continue;
                printf("%-16s", alloc_names[a]);
                print_ops("alloc", &r->ca, r->na, r->fail_a);
                printf("\n%-16s", "");
                print_ops("free", &r->cf, r->nf, r->fail_f);
                printf("\n");
            }
            print_prof(f, find(res, nres, A_FREEARRAY, sizes[si], threads[ti]));
        }
    }
}

/* What FineMem's paper says each step of its protocol costs, next to what
 * fmem did here. */
static void print_paper(const struct result *res, size_t nres, const size_t *sizes, unsigned nsizes,
                        const unsigned *threads, unsigned nthreads)
{
    printf("\n== fmem's operation counts next to FineMem's per-step costs ==\n");
    printf("FineMem (sections 4.1-4.3, factor analysis of 6.2), headers cached, no contention:\n"
           "  alloc 4-64 KiB: 1 CAS on the span header commits (it carries the temporary redo\n"
           "    log); the rkey capability adds 1 READ of the block's key and the redo log 1 CAS\n"
           "    to flush it, each of these two steps about 5 us on the paper's testbed:\n"
           "    2 CAS + 1 READ in 3 round trips;\n"
           "  free: 1 CAS swaps the main rkey for the backup, 1 CAS clears the bitmap (the\n"
           "    commit), 1 CAS flushes its log: 3 CAS in 3 round trips; the memory node\n"
           "    regenerates keys in the background;\n"
           "  contention: 1.333 CAS retries per alloc on average for FineMem vs 45.1 for the\n"
           "    free array (Table 2, 512 threads).\n");
    static const struct cnt paper_a = {.rtt = 3, .rd = 1, .cas = 2}, paper_f = {.rtt = 3, .cas = 3};
    for (unsigned si = 0; si < nsizes; si++) {
        for (unsigned ti = 0; ti < nthreads; ti++) {
            const struct result *f = find(res, nres, A_FMEM, sizes[si], threads[ti]);
            const struct result *fa = find(res, nres, A_FREEARRAY, sizes[si], threads[ti]);
            char sb[32];
            if (!f || sizes[si] > 16 * RB_CHUNK)
                continue; /* the paper's counts above are for the chunk layer */
            printf("fmem %s, %u thread%s:\n", size_str(sizes[si], sb, sizeof sb), threads[ti],
                   threads[ti] == 1 ? "" : "s");
            const struct cnt *pk[2] = {&paper_a, &paper_f}, *mk[2] = {&f->ca, &f->cf};
            size_t n[2] = {f->na, f->nf};
            for (int j = 0; j < 2; j++) {
                printf("  %-5s %.2f CAS (%.2f lost) + %.2f READ + %.2f WRITE in %.2f round trips;"
                       " vs the paper %+.2f CAS, %+.2f READ, %+.2f WRITE, %+.2f round trips\n",
                       j ? "free" : "alloc", per(mk[j]->cas, n[j]), per(mk[j]->cas_fail, n[j]),
                       per(mk[j]->rd, n[j]), per(mk[j]->wr, n[j]), per(mk[j]->rtt, n[j]),
                       per(mk[j]->cas, n[j]) - (double)pk[j]->cas,
                       per(mk[j]->rd, n[j]) - (double)pk[j]->rd,
                       per(mk[j]->wr, n[j]) - (double)pk[j]->wr,
                       per(mk[j]->rtt, n[j]) - (double)pk[j]->rtt);
            }
            if (fa)
                printf("  free array: %.2f CAS (%.2f lost) + %.2f READ in %.2f round trips per alloc\n",
                       per(fa->ca.cas, fa->na), per(fa->ca.cas_fail, fa->na), per(fa->ca.rd, fa->na),
                       per(fa->ca.rtt, fa->na));
        }
    }
    const struct result *fa1 = find(res, nres, A_FREEARRAY, sizes[0], threads[0]);
    const struct result *f1 = find(res, nres, A_FMEM, sizes[0], threads[0]);
    if (fa1 && per(fa1->ca.rtt, fa1->na) > 0) {
        double rt = fa1->a.median / per(fa1->ca.rtt, fa1->na) / 1e3;
        printf("One round trip here takes about %.1f us (free array, first configuration: median\n"
               "  alloc / round trips per alloc)", rt);
        if (f1 && rt > 0)
            printf("; fmem's median alloc, %.1f us, is %.1f of them", f1->a.median / 1e3,
                   f1->a.median / 1e3 / rt);
        printf(".\n");
    }
    printf("fmem's frees commit by revoking the key and marking the block quarantined (one\n"
           "  round trip after the checks); the memory node frees the block in its layer once\n"
           "  the old key's window is destroyed, off the caller's clock. The baselines revoke\n"
           "  no keys.\n");
}

static void json_cnt(const char *name, const struct cnt *k, size_t n)
{
    printf("\"%s\":{\"round_trips\":%.4f,\"reads\":%.4f,\"writes\":%.4f,\"cas\":%.4f,"
           "\"cas_lost\":%.4f,\"sends\":%.4f}",
           name, per(k->rtt, n), per(k->rd, n), per(k->wr, n), per(k->cas, n), per(k->cas_fail, n),
           per(k->send, n));
}

static void print_json(const struct result *res, size_t nres, const char *uri, const char *base,
                       unsigned ops, unsigned batch, unsigned warmup)
{
    printf("{\"bench\":\"fmem-rdmabench\",\"fmem_uri\":\"%s\",\"baseline\":\"%s\","
           "\"ops_per_thread\":%u,\"batch\":%u,\"warmup_rounds\":%u,\"results\":[",
           uri ? uri : "", base ? base : "", ops, batch, warmup);
    for (size_t i = 0; i < nres; i++) {
        const struct result *r = &res[i];
        printf("%s{\"allocator\":\"%s\",\"size\":%zu,\"threads\":%u,\"wall_s\":%.3f,"
               "\"alloc\":{\"n\":%zu,\"failed\":%" PRIu64 ",\"median_us\":%.3f,\"p99_us\":%.3f,"
               "\"mean_us\":%.3f,",
               i ? "," : "", alloc_names[r->alloc], r->size, r->threads, r->wall_s, r->na, r->fail_a,
               r->a.median / 1e3, r->a.p99 / 1e3, r->a.mean / 1e3);
        json_cnt("per_op", &r->ca, r->na);
        printf("},\"free\":{\"n\":%zu,\"failed\":%" PRIu64 ",\"median_us\":%.3f,\"p99_us\":%.3f,"
               "\"mean_us\":%.3f,",
               r->nf, r->fail_f, r->f.median / 1e3, r->f.p99 / 1e3, r->f.mean / 1e3);
        json_cnt("per_op", &r->cf, r->nf);
        printf("}}");
    }
    printf("],\"ratios\":[");
    bool first = true;
    for (size_t i = 0; i < nres; i++) {
        const struct result *f = &res[i];
        if (f->alloc != A_FMEM)
            continue;
        for (int b = A_FREEARRAY; b < NALLOC; b++) {
            const struct result *o = find(res, nres, b, f->size, f->threads);
            if (!o || !o->a.median || !o->f.median)
                continue;
            printf("%s{\"size\":%zu,\"threads\":%u,\"vs\":\"%s\",\"alloc_median\":%.4f,"
                   "\"alloc_p99\":%.4f,\"alloc_mean\":%.4f,\"free_median\":%.4f,\"free_p99\":%.4f,"
                   "\"free_mean\":%.4f}",
                   first ? "" : ",", f->size, f->threads, alloc_names[b], f->a.median / o->a.median,
                   f->a.p99 / o->a.p99, f->a.mean / o->a.mean, f->f.median / o->f.median,
                   f->f.p99 / o->f.p99, f->f.mean / o->f.mean);
            first = false;
        }
    }
    printf("]}\n");
}

/* ---- main ----------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: fmem-rdmabench [--fmem URI] [--baseline HOST:PORT] [--threads 1,4]\n"
            "                      [--sizes 4K,64K] [--ops N] [--batch N] [--warmup N]\n"
            "                      [--allocators fmem,free-array,rpc] [--json]\n"
            "       fmem-rdmabench --serve ADDR PORT [--pool-size 64M]\n"
            "  --fmem URI          fmem pool, e.g. rdma://192.168.77.1:7471?token=FILE\n"
            "  --baseline H:P      a serve mode (free-array and rpc baselines)\n"
            "  --threads LIST      client thread counts (default 1,4)\n"
            "  --sizes LIST        block sizes, 4K..2M, powers of two (default 4K,64K)\n"
            "  --ops N             measured allocations (and frees) per thread (default 256)\n"
            "  --batch N           blocks a thread holds before freeing them (default 16)\n"
            "  --warmup N          unmeasured rounds first (default 1)\n");
}

static unsigned parse_list(const char *s, uint64_t *out, unsigned max, bool sizes)
{
    unsigned n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *p = strtok_r(dup, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        uint64_t v = sizes ? rb_parse_size(p) : strtoull(p, NULL, 10);
        if (n == max || v == 0) {
            n = 0;
            break;
        }
        out[n++] = v;
    }
    free(dup);
    return n;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--serve"))
        return rb_serve(argc - 2, argv + 2);
    const char *uri = NULL, *base = NULL;
    uint64_t tv[MAX_SIZES] = {1, 4}, sv[MAX_SIZES] = {4096, 65536};
    unsigned nthreads = 2, nsizes = 2, ops = 256, batch = 16, warmup = 1;
    bool json = false, want[NALLOC] = {true, true, true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!v) {
            usage(stderr);
            return 2;
        } else if (!strcmp(a, "--fmem")) {
            uri = argv[++i];
        } else if (!strcmp(a, "--baseline")) {
            base = argv[++i];
        } else if (!strcmp(a, "--threads")) {
            nthreads = parse_list(argv[++i], tv, MAX_SIZES, false);
        } else if (!strcmp(a, "--sizes")) {
            nsizes = parse_list(argv[++i], sv, MAX_SIZES, true);
        } else if (!strcmp(a, "--ops")) {
            ops = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--batch")) {
            batch = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--warmup")) {
            warmup = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--allocators")) {
            for (int k = 0; k < NALLOC; k++)
                want[k] = false;
            char *dup = strdup(argv[++i]), *save = NULL;
            for (char *p = strtok_r(dup, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
                int k = 0;
                while (k < NALLOC && strcmp(p, alloc_names[k]))
                    k++;
                if (k == NALLOC) {
                    fprintf(stderr, "fmem-rdmabench: unknown allocator %s\n", p);
                    return 2;
                }
                want[k] = true;
            }
            free(dup);
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!nthreads || !nsizes || !batch || ops < batch) {
        fprintf(stderr, "fmem-rdmabench: bad --threads, --sizes, --ops or --batch\n");
        return 2;
    }
    unsigned maxt = 0;
    size_t sizes[MAX_SIZES];
    unsigned threads[MAX_SIZES];
    for (unsigned i = 0; i < nthreads; i++) {
        if (tv[i] > MAX_THREADS) {
            fprintf(stderr, "fmem-rdmabench: at most %d threads\n", MAX_THREADS);
            return 2;
        }
        threads[i] = (unsigned)tv[i];
        maxt = threads[i] > maxt ? threads[i] : maxt;
    }
    for (unsigned i = 0; i < nsizes; i++) {
        sizes[i] = (size_t)sv[i];
        if (sizes[i] < RB_CHUNK || sizes[i] > (size_t)RB_CHUNK * MAX_CHUNKS ||
            (sizes[i] & (sizes[i] - 1))) {
            fprintf(stderr, "fmem-rdmabench: sizes are powers of two from 4K to 2M\n");
            return 2;
        }
    }
    unsigned rounds = ops / batch;
    ops = rounds * batch;
    if (!uri)
        want[A_FMEM] = false;
    if (!base)
        want[A_FREEARRAY] = want[A_RPC] = false;
    if (!want[A_FMEM] && !want[A_FREEARRAY] && !want[A_RPC]) {
        fprintf(stderr, "fmem-rdmabench: nothing to run (give --fmem and/or --baseline)\n");
        usage(stderr);
        return 2;
    }

    fmem_pool *pool = NULL;
    if (want[A_FMEM]) {
        int rc = fmem_open(uri, &pool);
        if (rc) {
            fprintf(stderr, "fmem-rdmabench: %s: %s\n", uri, fmem_strerror(rc));
            return 1;
        }
    }
    static struct rconn conns[2][MAX_THREADS];
    char host[256] = "", *port = NULL, dev[64] = "";
    if (base) {
        snprintf(host, sizeof host, "%s", base);
        port = strrchr(host, ':');
        if (!port) {
            fprintf(stderr, "fmem-rdmabench: --baseline HOST:PORT\n");
            return 2;
        }
        *port++ = 0;
        /* every connection is opened now and kept: connections opened
         * and closed between configurations made soft-RoCE lose one */
        for (unsigned i = 0; i < maxt; i++) {
            if (want[A_FREEARRAY])
                rconn_open(&conns[0][i], host, port, RB_KIND_FREEARRAY);
            if (want[A_RPC])
                rconn_open(&conns[1][i], host, port, RB_KIND_RPC);
        }
        struct rconn *c0 = want[A_FREEARRAY] ? &conns[0][0] : &conns[1][0];
        if (c0->id)
            snprintf(dev, sizeof dev, " on %s", ibv_get_device_name(c0->id->verbs->device));
    }
    if (!json)
        printf("fmem-rdmabench: fmem %s; baselines %s%s; %u allocations per thread and "
               "configuration, %u warm-up round%s\n",
               want[A_FMEM] ? uri : "(not run)", base ? base : "(not run)", dev, ops, warmup,
               warmup == 1 ? "" : "s");

    struct result res[NALLOC * MAX_SIZES * MAX_SIZES];
    size_t nres = 0;
    for (unsigned si = 0; si < nsizes; si++)
        for (unsigned ti = 0; ti < nthreads; ti++) {
            if (!json)
                fprintf(stderr, "fmem-rdmabench: %zu bytes, %u thread(s)...\n", sizes[si],
                        threads[ti]);
            nres += run_config(want, sizes[si], threads[ti], batch, rounds, warmup, pool, conns,
                               res + nres);
        }
    if (json) {
        print_json(res, nres, uri, base, ops, batch, warmup);
    } else {
        print_table(res, nres, sizes, nsizes, threads, nthreads, ops, batch);
        print_paper(res, nres, sizes, nsizes, threads, nthreads);
    }
    for (int k = 0; k < 2; k++)
        for (unsigned i = 0; i < maxt; i++)
            rconn_close(&conns[k][i]);
    if (pool)
        fmem_close(pool);
    return 0;
}
