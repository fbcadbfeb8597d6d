/* fmem-mwbench - what it costs to make a block remotely accessible:
 * registering a memory region versus binding a memory window, on one RDMA
 * device, side by side, for blocks of 4 KiB, 64 KiB, 2 MiB and 4 MiB.
 *
 *   MR   ibv_reg_mr + ibv_dereg_mr of S bytes
 *        (LOCAL_WRITE | REMOTE_READ | REMOTE_WRITE | REMOTE_ATOMIC)
 *   MW1  ibv_bind_mw of a type-1 window of S bytes over an MR registered once
 *        (MW_BIND | LOCAL_WRITE), up to the bind completion
 *   MW2  a type-2 window: ibv_post_send IBV_WR_BIND_MW with ibv_inc_rkey's
 *        new key up to its completion, then IBV_WR_LOCAL_INV up to its
 *        completion (only when the device has MEM_WINDOW_TYPE_2B); and the
 *        same bind revoked remotely: a SEND_WITH_INV naming the key, up to
 *        its completion and the receiver's (what a service does to an
 *        application's window on a --mw type2 memory node)
 *
 * Binds are posted on an RC queue pair connected to itself (loopback on the
 * same port) and completions are busy-polled. Memory is plain page-aligned
 * memory with transparent huge pages switched off, touched once before
 * measuring. After each size an RDMA READ through each window checks that it
 * really grants access; at the end a READ with the invalidated type-2 key
 * must fail.
 *
 *   fmem-mwbench [--dev NAME] [--iters N] [--warmup N] [--json]
 *   fmem-mwbench [--dev NAME] --check
 *
 * --check measures nothing: it asserts which queue pair a window's key
 * works from (type 1: any; type 2B: only the one that bound it) and that an
 * invalidated type-2B key is refused (see run_checks).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <infiniband/verbs.h>

#include "clock_rng.h"
#include "samples.h"

#define MAX_SIZE (4u << 20)
#define CHECK_LEN 64
static const size_t sizes[] = { 4u << 10, 64u << 10, 2u << 20, 4u << 20 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

enum { WR_BIND1 = 1, WR_BIND2, WR_INV2, WR_READ, WR_RINV2, WR_RECV };

struct ctx {
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_qp *qp2; /* another loopback QP in the same PD (--check) */
    struct ibv_port_attr pa;
    uint8_t port;
    int gid_index; /* -1: no GRH (InfiniBand, LID routed) */
    bool mw1_ok, mw2_ok;
    const char *mw1_why, *mw2_why;
    char *buf_mr;  /* registered and deregistered in the MR loop */
    char *buf_mw;  /* under the MW_BIND region the windows cover */
    char *buf_chk; /* local target of the check READs */
    struct ibv_mr *mr_mw, *mr_chk;
};

struct row {
    size_t size;
    struct stat_ns mr, mr_reg, mr_dereg, mw1, mw1_rev, mw2_bind, mw2_inv, mw2_rinv;
    bool check_mw1, check_mw2;
};

static void die(const char *what)
{
    fprintf(stderr, "fmem-mwbench: %s: %s\n", what, errno ? strerror(errno) : "failed");
    exit(1);
}

/* busy-poll one completion; its wr_id must be `want`. Returns its status. */
static enum ibv_wc_status wait_wc(struct ctx *c, uint64_t want)
{
    struct ibv_wc wc;
    uint64_t deadline = bench_now_ns() + 10000000000u;
    for (unsigned spin = 0;; spin++) {
        int n = ibv_poll_cq(c->cq, 1, &wc);
        if (n < 0) {
            errno = 0;
            die("ibv_poll_cq");
        }
        if (n == 1)
            break;
        if ((spin & 1023) == 1023 && bench_now_ns() > deadline) {
            fprintf(stderr, "fmem-mwbench: no completion for work request %" PRIu64 " in 10 s\n", want);
            exit(1);
        }
    }
    if (wc.wr_id != want) {
        fprintf(stderr, "fmem-mwbench: completion for work request %" PRIu64 ", expected %" PRIu64 " (%s)\n",
                (uint64_t)wc.wr_id, want, ibv_wc_status_str(wc.status));
        exit(1);
    }
    return wc.status;
}

static void expect_success(struct ctx *c, uint64_t want, const char *what)
{
    enum ibv_wc_status st = wait_wc(c, want);
    if (st != IBV_WC_SUCCESS) {
        fprintf(stderr, "fmem-mwbench: %s completed with %s\n", what, ibv_wc_status_str(st));
        exit(1);
    }
}

static bool gid_is_ipv4_mapped(const union ibv_gid *g)
{
    static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    return memcmp(g->raw, prefix, sizeof prefix) == 0;
}

/* The GID the loopback path uses: RoCE v2 with an IPv4 address (what
 * librdmacm would take for an IPv4 connection), else the first valid one. */
static int pick_gid(struct ctx *c, const struct ibv_port_attr *pa)
{
    int first = -1;
    for (int i = 0; i < pa->gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(c->verbs, c->port, (uint32_t)i, &e, 0))
            continue;
        if (first < 0)
            first = i;
        if (e.gid_type == IBV_GID_TYPE_ROCE_V2 && gid_is_ipv4_mapped(&e.gid))
            return i;
    }
    if (first < 0) { /* providers without the extended query */
        union ibv_gid g;
        if (ibv_query_gid(c->verbs, c->port, 0, &g) == 0)
            first = 0;
    }
    return first;
}

static void open_device(struct ctx *c, const char *name)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        die("ibv_get_device_list");
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n && !dev; i++)
        if (!name || !strcmp(ibv_get_device_name(list[i]), name))
            dev = list[i];
    if (!dev) {
        fprintf(stderr, "fmem-mwbench: %s\n", name ? "no such RDMA device" : "no RDMA device");
        if (n) {
            fprintf(stderr, "devices:");
            for (int i = 0; i < n; i++)
                fprintf(stderr, " %s", ibv_get_device_name(list[i]));
            fprintf(stderr, "\n");
        }
        exit(1);
    }
    c->verbs = ibv_open_device(dev);
    if (!c->verbs)
        die("ibv_open_device");
    ibv_free_device_list(list);
}

/* An RC queue pair connected to itself (loopback on the same port). */
static struct ibv_qp *loop_qp(struct ctx *c)
{
    struct ibv_qp *qp;
    struct ibv_qp_init_attr qa = {
        .send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
    };
    if (!(qp = ibv_create_qp(c->pd, &qa)))
        die("ibv_create_qp");

    /* connect the QP to itself: RESET -> INIT -> RTR -> RTS */
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = c->port,
        .qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
    };
    if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)))
        die("ibv_modify_qp INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = c->pa.active_mtu;
    a.dest_qp_num = qp->qp_num;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = c->port;
    if (c->gid_index >= 0) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.sgid_index = (uint8_t)c->gid_index;
        a.ah_attr.grh.hop_limit = 64;
        if ((errno = ibv_query_gid(c->verbs, c->port, c->gid_index, &a.ah_attr.grh.dgid)))
            die("ibv_query_gid");
    } else {
        a.ah_attr.dlid = c->pa.lid;
    }
    if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)))
        die("ibv_modify_qp RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if ((errno = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                              IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)))
        die("ibv_modify_qp RTS");
    return qp;
}

static void setup(struct ctx *c)
{
    struct ibv_device_attr da;
    if ((errno = ibv_query_device(c->verbs, &da)))
        die("ibv_query_device");
    c->mw1_ok = da.device_cap_flags & IBV_DEVICE_MEM_WINDOW;
    c->mw1_why = c->mw1_ok ? NULL : "device_cap_flags lack IBV_DEVICE_MEM_WINDOW";
    c->mw2_ok = da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    c->mw2_why = c->mw2_ok ? NULL : "device_cap_flags lack IBV_DEVICE_MEM_WINDOW_TYPE_2B";

    /* the first active port */
    struct ibv_port_attr pa;
    c->port = 0;
    for (uint8_t p = 1; p <= da.phys_port_cnt; p++)
        if (ibv_query_port(c->verbs, p, &pa) == 0 && pa.state == IBV_PORT_ACTIVE) {
            c->port = p;
            break;
        }
    if (!c->port) {
        errno = 0;
        die("no active port");
    }
    c->gid_index = -1;
    if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND || pa.lid == 0) {
        c->gid_index = pick_gid(c, &pa);
        if (c->gid_index < 0) {
            errno = 0;
            die("no GID on the port");
        }
    }

    if (!(c->pd = ibv_alloc_pd(c->verbs)))
        die("ibv_alloc_pd");
    if (!(c->cq = ibv_create_cq(c->verbs, 16, NULL, NULL, 0)))
        die("ibv_create_cq");
    c->pa = pa;
    c->qp = loop_qp(c);

    /* plain aligned memory, no transparent huge pages, touched once */
    char **bufs[] = { &c->buf_mr, &c->buf_mw, &c->buf_chk };
    for (size_t i = 0; i < 3; i++) {
        size_t len = i == 2 ? 4096 : MAX_SIZE;
        char *p = aligned_alloc(4096, len);
        if (!p)
            die("aligned_alloc");
        (void)madvise(p, len, MADV_NOHUGEPAGE); /* best effort */
        for (size_t off = 0; off < len; off++)
            p[off] = (char)(off * 131 + i);
        *bufs[i] = p;
    }
    if (c->mw1_ok || c->mw2_ok) {
        c->mr_mw = ibv_reg_mr(c->pd, c->buf_mw, MAX_SIZE, IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE);
        if (!c->mr_mw)
            die("ibv_reg_mr (MW_BIND region)");
    }
    if (!(c->mr_chk = ibv_reg_mr(c->pd, c->buf_chk, 4096, IBV_ACCESS_LOCAL_WRITE)))
        die("ibv_reg_mr (check buffer)");
}

static const unsigned mw_access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

static void post(struct ctx *c, struct ibv_send_wr *wr, const char *what)
{
    struct ibv_send_wr *bad;
    if ((errno = ibv_post_send(c->qp, wr, &bad)))
        die(what);
}

static void bind_mw1(struct ctx *c, struct ibv_mw *mw, size_t size)
{
    struct ibv_mw_bind b = {
        .wr_id = WR_BIND1, .send_flags = IBV_SEND_SIGNALED,
        .bind_info = { .mr = c->mr_mw, .addr = (uintptr_t)c->buf_mw, .length = size,
                       .mw_access_flags = mw_access },
    };
    if ((errno = ibv_bind_mw(c->qp, mw, &b)))
        die("ibv_bind_mw");
    expect_success(c, WR_BIND1, "type-1 bind");
}

static void bind_mw2(struct ctx *c, struct ibv_mw *mw, uint32_t rkey, size_t size)
{
    struct ibv_send_wr wr = {
        .wr_id = WR_BIND2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = { .mw = mw, .rkey = rkey,
                     .bind_info = { .mr = c->mr_mw, .addr = (uintptr_t)c->buf_mw, .length = size,
                                    .mw_access_flags = mw_access } },
    };
    post(c, &wr, "ibv_post_send BIND_MW");
    expect_success(c, WR_BIND2, "type-2 bind");
    /* ibv_post_send leaves mw->rkey alone, but the next bind names the
     * window by it (rxe checks it against the window's current key) */
    mw->rkey = rkey;
}

static void inv_mw2(struct ctx *c, uint32_t rkey)
{
    struct ibv_send_wr wr = {
        .wr_id = WR_INV2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
        .invalidate_rkey = rkey,
    };
    post(c, &wr, "ibv_post_send LOCAL_INV");
    expect_success(c, WR_INV2, "local invalidate");
}

/* Remote invalidation: a SEND_WITH_INV naming rkey arrives at the QP's own
 * responder (it is connected to itself), which invalidates the window
 * before it acknowledges; wait for the send and the receive completion. */
static void rinv_mw2(struct ctx *c, uint32_t rkey)
{
    struct ibv_sge rs = { .addr = (uintptr_t)c->buf_chk + 2048, .length = 64, .lkey = c->mr_chk->lkey },
                   ss = { .addr = (uintptr_t)c->buf_chk + 3072, .length = 8, .lkey = c->mr_chk->lkey };
    struct ibv_recv_wr rw = { .wr_id = WR_RECV, .sg_list = &rs, .num_sge = 1 }, *rbad;
    if ((errno = ibv_post_recv(c->qp, &rw, &rbad)))
        die("ibv_post_recv");
    struct ibv_send_wr wr = {
        .wr_id = WR_RINV2, .opcode = IBV_WR_SEND_WITH_INV, .send_flags = IBV_SEND_SIGNALED,
        .sg_list = &ss, .num_sge = 1, .invalidate_rkey = rkey,
    };
    post(c, &wr, "ibv_post_send SEND_WITH_INV");
    bool sent = false, got = false;
    uint64_t deadline = bench_now_ns() + 10000000000u;
    while (!sent || !got) {
        struct ibv_wc wc;
        int n = ibv_poll_cq(c->cq, 1, &wc);
        if (n < 0)
            die("ibv_poll_cq");
        if (n == 0) {
            if (bench_now_ns() > deadline) {
                fprintf(stderr, "fmem-mwbench: SEND_WITH_INV did not complete in 10 s\n");
                exit(1);
            }
            continue;
        }
        /* (rxe's receive completion does not set IBV_WC_WITH_INV: the
         * invalidation is checked by a READ after the loop) */
        if (wc.status != IBV_WC_SUCCESS || (wc.wr_id != WR_RECV && wc.wr_id != WR_RINV2)) {
            fprintf(stderr, "fmem-mwbench: remote invalidate: work request %" PRIu64 ": %s\n",
                    (uint64_t)wc.wr_id, ibv_wc_status_str(wc.status));
            exit(1);
        }
        sent |= wc.wr_id == WR_RINV2;
        got |= wc.wr_id == WR_RECV;
    }
}

/* RDMA READ of the last CHECK_LEN bytes of a window of `size` bytes through
 * `rkey`; returns the completion status (data compared when it succeeded) */
static enum ibv_wc_status read_on(struct ctx *c, struct ibv_qp *qp, uint32_t rkey, size_t size,
                                  bool *same);
static enum ibv_wc_status read_through(struct ctx *c, uint32_t rkey, size_t size, bool *same)
{
    return read_on(c, c->qp, rkey, size, same);
}

static enum ibv_wc_status read_on(struct ctx *c, struct ibv_qp *qp, uint32_t rkey, size_t size,
                                  bool *same)
{
    memset(c->buf_chk, 0, CHECK_LEN);
    struct ibv_sge sge = { .addr = (uintptr_t)c->buf_chk, .length = CHECK_LEN, .lkey = c->mr_chk->lkey };
    struct ibv_send_wr wr = {
        .wr_id = WR_READ, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { .remote_addr = (uintptr_t)c->buf_mw + size - CHECK_LEN, .rkey = rkey },
    };
    struct ibv_send_wr *bad;
    if ((errno = ibv_post_send(qp, &wr, &bad)))
        die("ibv_post_send RDMA_READ");
    enum ibv_wc_status st = wait_wc(c, WR_READ);
    *same = st == IBV_WC_SUCCESS && memcmp(c->buf_chk, c->buf_mw + size - CHECK_LEN, CHECK_LEN) == 0;
    return st;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: fmem-mwbench [--dev NAME] [--iters N] [--warmup N] [--json] | --check\n"
               "  --dev NAME   RDMA device (default: the first one)\n"
               "  --iters N    measured operations per size and kind (default 1000)\n"
               "  --warmup N   unmeasured operations before them (default iters/10, at most 100)\n"
               "  --json       print one JSON object instead of the table\n");
}

static long parse_count(const char *opt, const char *s, long min)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min || v > 100000000) {
        fprintf(stderr, "fmem-mwbench: %s wants an integer >= %ld, not '%s'\n", opt, min, s);
        exit(2);
    }
    return v;
}

static double us(double ns)
{
    return ns / 1000.0;
}

static void print_size(char *out, size_t n, size_t size)
{
    if (size >= (1u << 20))
        snprintf(out, n, "%zu MiB", size >> 20);
    else
        snprintf(out, n, "%zu KiB", size >> 10);
}

static void json_stat(const char *name, const struct stat_ns *s, bool last)
{
    printf("\"%s\":{\"median\":%.3f,\"p99\":%.3f,\"mean\":%.3f}%s", name, us(s->median), us(s->p99),
           us(s->mean), last ? "" : ",");
}

/* --check: what the device enforces for the queue pair of a window. Type 1
 * is bound to no QP; a type-2B window is bound to the QP that posted its
 * bind, and the responder of another QP must refuse its key (rxe checks
 * this in rxe_lookup_mw). Each expected refusal uses a QP of its own (a
 * refused request moves the requester to the error state). Exit status 1
 * if the device does something else. */
static int run_checks(struct ctx *c)
{
    int bad = 0;
    bool same;
    enum ibv_wc_status st;
    struct ibv_qp *other = loop_qp(c), *other2 = loop_qp(c);
    if (c->mw1_ok) {
        struct ibv_mw *mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_1);
        if (!mw)
            die("ibv_alloc_mw type 1");
        bind_mw1(c, mw, 4096);
        st = read_on(c, c->qp, mw->rkey, 4096, &same);
        printf("type 1: key from the binding QP: %s\n", same ? "works" : ibv_wc_status_str(st));
        bad += !same;
        st = read_on(c, other, mw->rkey, 4096, &same);
        printf("type 1: key from another QP: %s (type-1 windows are bound to no QP)\n",
               same ? "works" : ibv_wc_status_str(st));
        bad += !same;
        ibv_dealloc_mw(mw);
    } else {
        printf("type 1: skipped: %s\n", c->mw1_why);
    }
    if (c->mw2_ok) {
        struct ibv_mw *mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
        if (!mw)
            die("ibv_alloc_mw type 2");
        uint32_t k = ibv_inc_rkey(mw->rkey);
        bind_mw2(c, mw, k, 4096);
        st = read_on(c, c->qp, k, 4096, &same);
        printf("type 2B: key from the QP it is bound to: %s\n", same ? "works" : ibv_wc_status_str(st));
        bad += !same;
        st = read_on(c, other, k, 4096, &same);
        printf("type 2B: key from another QP of the same PD: %s\n",
               st == IBV_WC_SUCCESS ? "WORKS (not enforced)" : ibv_wc_status_str(st));
        bad += st == IBV_WC_SUCCESS;
        inv_mw2(c, k);
        st = read_on(c, other2, k, 4096, &same);
        printf("type 2B: key after a local invalidate: %s\n",
               st == IBV_WC_SUCCESS ? "WORKS (not invalidated)" : ibv_wc_status_str(st));
        bad += st == IBV_WC_SUCCESS;
        ibv_dealloc_mw(mw);
    } else {
        printf("type 2B: skipped: %s\n", c->mw2_why);
    }
    printf("fmem-mwbench --check: %s\n", bad ? "FAILED" : "as expected");
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    bool check = false;
    const char *dev = NULL;
    long iters = 1000, warmup = -1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dev") && i + 1 < argc)
            dev = argv[++i];
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = parse_count("--iters", argv[++i], 1);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc)
            warmup = parse_count("--warmup", argv[++i], 0);
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--check"))
            check = true;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (warmup < 0)
        warmup = iters / 10 < 100 ? iters / 10 : 100;

    struct ctx c;
    memset(&c, 0, sizeof c);
    open_device(&c, dev);
    setup(&c);
    if (check)
        return run_checks(&c);

    struct ibv_mw *mw1 = NULL, *mw2 = NULL;
    if (c.mw1_ok && !(mw1 = ibv_alloc_mw(c.pd, IBV_MW_TYPE_1))) {
        c.mw1_ok = false;
        c.mw1_why = errno == EOPNOTSUPP ? "ibv_alloc_mw(IBV_MW_TYPE_1) not supported" : "ibv_alloc_mw(IBV_MW_TYPE_1) failed";
    }
    if (c.mw2_ok && !(mw2 = ibv_alloc_mw(c.pd, IBV_MW_TYPE_2))) {
        c.mw2_ok = false;
        c.mw2_why = errno == EOPNOTSUPP ? "ibv_alloc_mw(IBV_MW_TYPE_2) not supported" : "ibv_alloc_mw(IBV_MW_TYPE_2) failed";
    }
    uint32_t rkey2 = mw2 ? mw2->rkey : 0;

    size_t total = (size_t)(warmup + iters);
    uint64_t *t_mr = calloc(total, sizeof *t_mr), *t_reg = calloc(total, sizeof *t_reg),
             *t_dereg = calloc(total, sizeof *t_dereg), *t_mw1 = calloc(total, sizeof *t_mw1),
             *t_bind2 = calloc(total, sizeof *t_bind2), *t_inv2 = calloc(total, sizeof *t_inv2),
             *t_rinv2 = calloc(total, sizeof *t_rinv2);
    if (!t_mr || !t_reg || !t_dereg || !t_mw1 || !t_bind2 || !t_inv2 || !t_rinv2)
        die("calloc");
    struct row rows[NSIZES];
    memset(rows, 0, sizeof rows);
    const unsigned mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE |
                          IBV_ACCESS_REMOTE_ATOMIC;

    for (size_t si = 0; si < NSIZES; si++) {
        size_t size = sizes[si];
        struct row *r = &rows[si];
        r->size = size;

        for (size_t k = 0; k < total; k++) {
            uint64_t t0 = bench_now_ns();
            struct ibv_mr *mr = ibv_reg_mr(c.pd, c.buf_mr, size, mr_access);
            uint64_t t1 = bench_now_ns();
            if (!mr)
                die("ibv_reg_mr");
            if ((errno = ibv_dereg_mr(mr)))
                die("ibv_dereg_mr");
            uint64_t t2 = bench_now_ns();
            t_reg[k] = t1 - t0;
            t_dereg[k] = t2 - t1;
            t_mr[k] = t2 - t0;
        }
        r->mr = samples_summarize(t_mr + warmup, (size_t)iters);
        r->mr_reg = samples_summarize(t_reg + warmup, (size_t)iters);
        r->mr_dereg = samples_summarize(t_dereg + warmup, (size_t)iters);

        if (c.mw1_ok) {
            for (size_t k = 0; k < total; k++) {
                uint64_t t0 = bench_now_ns();
                bind_mw1(&c, mw1, size);
                t_mw1[k] = bench_now_ns() - t0;
            }
            r->mw1 = samples_summarize(t_mw1 + warmup, (size_t)iters);
            /* what fmem's memory node does to kill a type-1 key: destroy
             * the window and bind a fresh one (a re-bind would keep its
             * index and change only the low key byte) */
            for (size_t k = 0; k < total; k++) {
                uint64_t t0 = bench_now_ns();
                ibv_dealloc_mw(mw1);
                if (!(mw1 = ibv_alloc_mw(c.pd, IBV_MW_TYPE_1)))
                    die("ibv_alloc_mw type 1");
                bind_mw1(&c, mw1, size);
                t_mw1[k] = bench_now_ns() - t0;
            }
            r->mw1_rev = samples_summarize(t_mw1 + warmup, (size_t)iters);
            bool same;
            enum ibv_wc_status st = read_through(&c, mw1->rkey, size, &same);
            if (!same) {
                fprintf(stderr, "fmem-mwbench: READ through the type-1 window of %zu bytes: %s%s\n", size,
                        ibv_wc_status_str(st), st == IBV_WC_SUCCESS ? ", wrong data" : "");
                return 1;
            }
            r->check_mw1 = true;
        }

        if (c.mw2_ok) {
            for (size_t k = 0; k < total; k++) {
                rkey2 = ibv_inc_rkey(rkey2);
                uint64_t t0 = bench_now_ns();
                bind_mw2(&c, mw2, rkey2, size);
                uint64_t t1 = bench_now_ns();
                inv_mw2(&c, rkey2);
                uint64_t t2 = bench_now_ns();
                t_bind2[k] = t1 - t0;
                t_inv2[k] = t2 - t1;
            }
            r->mw2_bind = samples_summarize(t_bind2 + warmup, (size_t)iters);
            r->mw2_inv = samples_summarize(t_inv2 + warmup, (size_t)iters);
            for (size_t k = 0; k < total; k++) {
                rkey2 = ibv_inc_rkey(rkey2);
                bind_mw2(&c, mw2, rkey2, size);
                uint64_t t0 = bench_now_ns();
                rinv_mw2(&c, rkey2);
                t_rinv2[k] = bench_now_ns() - t0;
            }
            r->mw2_rinv = samples_summarize(t_rinv2 + warmup, (size_t)iters);
            /* one more bind, unmeasured, to read through it */
            rkey2 = ibv_inc_rkey(rkey2);
            bind_mw2(&c, mw2, rkey2, size);
            bool same;
            enum ibv_wc_status st = read_through(&c, rkey2, size, &same);
            if (!same) {
                fprintf(stderr, "fmem-mwbench: READ through the type-2 window of %zu bytes: %s%s\n", size,
                        ibv_wc_status_str(st), st == IBV_WC_SUCCESS ? ", wrong data" : "");
                return 1;
            }
            rinv_mw2(&c, rkey2); /* the final check READs with this key */
            r->check_mw2 = true;
        }
    }

    /* last, since a failed READ leaves the QP in the error state: the
     * invalidated type-2 key must no longer work */
    const char *dead = "not run";
    if (c.mw2_ok) {
        bool same;
        enum ibv_wc_status st = read_through(&c, rkey2, sizes[0], &same);
        dead = st == IBV_WC_SUCCESS ? "NO: a READ with it succeeded" : ibv_wc_status_str(st);
        if (st == IBV_WC_SUCCESS) {
            fprintf(stderr, "fmem-mwbench: a READ with an invalidated type-2 key succeeded\n");
            return 1;
        }
    }

    const char *devname = ibv_get_device_name(c.verbs->device);
    if (json) {
        printf("{\"bench\":\"fmem-mwbench\",\"device\":\"%s\",\"port\":%u,\"iters\":%ld,\"warmup\":%ld,", devname,
               c.port, iters, warmup);
        printf("\"mw_type1\":%s,", c.mw1_ok ? "true" : "false");
        if (!c.mw1_ok)
            printf("\"mw_type1_skipped\":\"%s\",", c.mw1_why);
        printf("\"mw_type2b\":%s,", c.mw2_ok ? "true" : "false");
        if (!c.mw2_ok)
            printf("\"mw_type2b_skipped\":\"%s\",", c.mw2_why);
        else
            printf("\"mw2_invalidated_key_read\":\"%s\",", dead);
        printf("\"unit\":\"us\",\"sizes\":[");
        for (size_t si = 0; si < NSIZES; si++) {
            const struct row *r = &rows[si];
            printf("%s{\"size\":%zu,", si ? "," : "", r->size);
            json_stat("mr_reg_dereg", &r->mr, false);
            json_stat("mr_reg", &r->mr_reg, false);
            json_stat("mr_dereg", &r->mr_dereg, false);
            if (c.mw1_ok) {
                json_stat("mw1_bind", &r->mw1, false);
                json_stat("mw1_revoke", &r->mw1_rev, false);
                printf("\"ratio_mr_mw1\":%.2f,", r->mr.median / r->mw1.median);
            }
            if (c.mw2_ok) {
                json_stat("mw2_bind", &r->mw2_bind, false);
                json_stat("mw2_local_inv", &r->mw2_inv, false);
                json_stat("mw2_remote_inv", &r->mw2_rinv, false);
                printf("\"ratio_mr_mw2\":%.2f,", r->mr.median / r->mw2_bind.median);
            }
            printf("\"checked\":%s}", (!c.mw1_ok || r->check_mw1) && (!c.mw2_ok || r->check_mw2) ? "true" : "false");
        }
        printf("]}\n");
        return 0;
    }

    printf("fmem-mwbench: device %s port %u, %ld operations per cell after %ld warm-up, times in us\n", devname,
           c.port, iters, warmup);
    if (!c.mw1_ok)
        printf("MW1 skipped: %s\n", c.mw1_why);
    if (!c.mw2_ok)
        printf("MW2 skipped: %s\n", c.mw2_why);
    printf("%8s  %21s  %19s  %9s %9s  %8s %8s\n", "", "MR reg+dereg", "MW1 bind", "MW2 bind", "MW2 inv",
           "MR/MW1", "MR/MW2");
    printf("%8s  %10s %10s  %9s %9s  %9s %9s  %8s %8s\n", "size", "median", "p99", "median", "p99", "median",
           "median", "median", "median");
    for (size_t si = 0; si < NSIZES; si++) {
        const struct row *r = &rows[si];
        char sz[24], m1[2][16], m2[2][16], q[2][16];
        print_size(sz, sizeof sz, r->size);
        strcpy(m1[0], "-"), strcpy(m1[1], "-"), strcpy(m2[0], "-"), strcpy(m2[1], "-");
        strcpy(q[0], "-"), strcpy(q[1], "-");
        if (c.mw1_ok) {
            snprintf(m1[0], sizeof m1[0], "%.2f", us(r->mw1.median));
            snprintf(m1[1], sizeof m1[1], "%.2f", us(r->mw1.p99));
            snprintf(q[0], sizeof q[0], "%.1fx", r->mr.median / r->mw1.median);
        }
        if (c.mw2_ok) {
            snprintf(m2[0], sizeof m2[0], "%.2f", us(r->mw2_bind.median));
            snprintf(m2[1], sizeof m2[1], "%.2f", us(r->mw2_inv.median));
            snprintf(q[1], sizeof q[1], "%.1fx", r->mr.median / r->mw2_bind.median);
        }
        printf("%8s  %10.2f %10.2f  %9s %9s  %9s %9s  %8s %8s\n", sz, us(r->mr.median), us(r->mr.p99), m1[0],
               m1[1], m2[0], m2[1], q[0], q[1]);
    }
    if (c.mw1_ok || c.mw2_ok) {
        printf("revoking a key and making the block reachable again, medians: type 1 (destroy,\n"
               "  allocate, bind: what fmem's memory node does) vs type 2B (local invalidate + bind)\n"
               "  vs type 2B (remote invalidate by SEND_WITH_INV + bind):");
        for (size_t si = 0; si < NSIZES; si++) {
            char sz[24], a[16] = "-", b[16] = "-", d[16] = "-";
            print_size(sz, sizeof sz, rows[si].size);
            if (c.mw1_ok)
                snprintf(a, sizeof a, "%.2f", us(rows[si].mw1_rev.median));
            if (c.mw2_ok) {
                snprintf(b, sizeof b, "%.2f", us(rows[si].mw2_inv.median + rows[si].mw2_bind.median));
                snprintf(d, sizeof d, "%.2f", us(rows[si].mw2_rinv.median + rows[si].mw2_bind.median));
            }
            printf("%s %s %s vs %s vs %s", si ? "," : "", sz, a, b, d);
        }
        printf("\n");
    }
    if (c.mw2_ok) {
        printf("type 2B invalidation alone, medians: local vs remote (SEND_WITH_INV):");
        for (size_t si = 0; si < NSIZES; si++) {
            char sz[24];
            print_size(sz, sizeof sz, rows[si].size);
            printf("%s %s %.2f vs %.2f", si ? "," : "", sz, us(rows[si].mw2_inv.median),
                   us(rows[si].mw2_rinv.median));
        }
        printf("\n");
    }
    printf("MR reg / dereg medians:");
    for (size_t si = 0; si < NSIZES; si++) {
        char sz[24];
        print_size(sz, sizeof sz, rows[si].size);
        printf("%s %s %.2f / %.2f", si ? "," : "", sz, us(rows[si].mr_reg.median), us(rows[si].mr_dereg.median));
    }
    printf("\n");
    if (c.mw1_ok || c.mw2_ok)
        printf("checks: READ through every bound window returned the data%s%s\n",
               c.mw2_ok ? "; READ with a type-2 key invalidated by SEND_WITH_INV: " : "", c.mw2_ok ? dead : "");
    return 0;
}
