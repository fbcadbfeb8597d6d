/* test_security.c - an application that guesses, reuses or steals keys, run
 * on soft-RoCE (tests/rdma/vm-check.sh). The owner is a service-role pool
 * (it runs the allocation protocol); the attacker is an application-role
 * connection to the same memory node: it holds no key of its own and posts
 * raw RDMA requests with whatever key it tries, so no library check stands
 * in the way. Every refusal must come from the NIC: the attacker's count of
 * remote access errors must grow by one per attempt.
 *   FMEM_TEST_RDMA="HOST PORT TOKEN_FILE" */
#include <criterion/criterion.h>
#include <fmem.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <netdb.h>
#include <rdma/rdma_cma.h>

#include "transport.h"
#include "verbs/transport_verbs.h"

#include "key_probe.h"
#include "node_env.h"

static void setup(void)
{
    node_from_env("FMEM_TEST_RDMA");
}

TestSuite(security, .init = setup, .timeout = 120);

static fmem_pool *owner(void)
{
    fmem_pool *p;
    int rc = fmem_open(node, &p);
    cr_assert_eq(rc, 0, "open %s: %s", node, fmem_strerror(rc));
    return p;
}

static struct transport *attacker(void)
{
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_APP};
    struct transport *t;
    int rc = verbs_transport_connect(&cp, &t);
    cr_assert_eq(rc, 0, "application connection: %s", fmem_strerror(rc));
    cr_assert_eq(t->wkeys_size, 0, "an application must not learn the key table");
    return t;
}

static uint64_t data(struct transport *t, const fmem_handle *h) { return t->meta_size + h->addr; }

Test(security, own_key_works_and_neighbours_do_not)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 16384, &h), 0);
    uint64_t secret = 0x5ec2e7c0ffee, got = 0;
    cr_assert_eq(fmem_write(p, &h, 8, &secret, 8), 0);
    /* the key the service handed out works from the application's QP */
    cr_assert_eq(peek(t, data(t, &h) + 8, h.rkey, &got), 0);
    cr_assert_eq(got, secret);
    /* keys one increment away, and a few more guesses */
    refused(t, data(t, &h), h.rkey + 1, "key + 1");
    refused(t, data(t, &h), h.rkey - 1, "key - 1");
    refused(t, data(t, &h), h.rkey ^ 0x80, "key with another low byte");
    for (uint32_t g = 1; g <= 8; g++)
        refused(t, data(t, &h), g * 0x9E3779B9u, "guessed key");
    /* the queue pair was reset after each refusal: the right key still works */
    cr_assert_eq(peek(t, data(t, &h) + 8, h.rkey, &got), 0);
    cr_assert_eq(got, secret);
    /* the key covers its block only: see window_bounds below */
    cr_assert_eq(fmem_free(p, &h), 0);
    tp_close(t);
    fmem_close(p);
}

/* Soft-RoCE (rdma_rxe, at least through Linux 6.1) checks a window's key,
 * state and rights but checks the address against the window's region, not
 * the window: there a live block key reaches the whole data region (never
 * the metadata, a separate region). A NIC that enforces window bounds must
 * refuse; on rxe the test records the limitation instead. */
static bool rxe_unbounded_windows(struct transport *t, const fmem_handle *h)
{
    uint64_t v;
    int rc = peek(t, data(t, h) + h->length, h->rkey, &v);
    if (rc == FMEM_EACCES)
        return false;
    cr_assert_eq(rc, 0);
    cr_assert(getenv("FMEM_TEST_RXE"), "this NIC ignores window bounds and is not rxe");
    fprintf(stderr, "security: soft-RoCE does not check window bounds: cross-block isolation "
                    "is not tested here\n");
    return true;
}

Test(security, window_bounds)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle mine, theirs;
    cr_assert_eq(fmem_alloc(p, 8192, &mine), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &theirs), 0);
    if (!rxe_unbounded_windows(t, &mine)) {
        refused(t, data(t, &mine) + mine.length, mine.rkey, "past the end of the block");
        refused(t, data(t, &mine) - 8, mine.rkey, "before the block");
        refused(t, data(t, &theirs), mine.rkey, "my key on their block");
    }
    cr_assert_eq(fmem_free(p, &mine), 0);
    cr_assert_eq(fmem_free(p, &theirs), 0);
    tp_close(t);
    fmem_close(p);
}

Test(security, another_applications_block)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle mine, theirs;
    cr_assert_eq(fmem_alloc(p, 4096, &mine), 0);
    cr_assert_eq(fmem_alloc(p, 4096, &theirs), 0);
    /* their address with my key's neighbours and theirs */
    refused(t, data(t, &theirs), mine.rkey + 1, "my key + 1 on their block");
    refused(t, data(t, &theirs), theirs.rkey ^ 1, "their key, one bit off");
    cr_assert_eq(fmem_free(p, &mine), 0);
    cr_assert_eq(fmem_free(p, &theirs), 0);
    tp_close(t);
    fmem_close(p);
}

/* A free returns once it is committed; the block stays quarantined until
 * the memory node has destroyed its old window, which takes a regenerator
 * pass (a millisecond or so). Wait until the NIC refuses `rkey`: at most
 * 5 s, then fail. */
static void dies_soon(struct transport *t, uint64_t off, uint32_t rkey, const char *what)
{
    for (int i = 0; i < 5000; i++) {
        uint64_t v, before = verbs_transport_refused(t);
        int rc = peek(t, off, rkey, &v);
        if (rc == FMEM_EACCES) {
            cr_assert_eq(verbs_transport_refused(t), before + 1, "%s: not refused by the NIC", what);
            return;
        }
        cr_assert_eq(rc, 0, "%s: %s", what, fmem_strerror(rc));
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    cr_assert_fail("%s: still works 5 s after the free", what);
}

Test(security, freed_key_dies_before_reuse)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    for (int round = 0; round < 20; round++) {
        fmem_handle h, again;
        uint64_t got;
        cr_assert_eq(fmem_alloc(p, 4096 << (round % 3), &h), 0);
        cr_assert_eq(peek(t, data(t, &h), h.rkey, &got), 0);
        cr_assert_eq(fmem_free(p, &h), 0);
        /* the block handed out again gets another key, and the old one is
         * dead by then, whether the free's quarantine is over or not */
        cr_assert_eq(fmem_alloc(p, h.length, &again), 0);
        if (again.addr == h.addr) {
            cr_assert_neq(again.rkey, h.rkey, "a reused block must get a new key");
            refused(t, data(t, &h), h.rkey, "freed key of a reused block");
        }
        dies_soon(t, data(t, &h), h.rkey, "freed key");
        refused(t, data(t, &h), h.rkey + 1, "freed key + 1");
        cr_assert_eq(peek(t, data(t, &again), again.rkey, &got), 0);
        cr_assert_eq(fmem_free(p, &again), 0);
    }
    tp_close(t);
    fmem_close(p);
}

/* Many threads free and allocate the same few blocks: whenever a block is
 * handed out, the key it had in its last allocation must already be
 * refused by the NIC (its quarantine ended only after its old window was
 * destroyed). Each refusal costs the attacker a reconnect, so only the
 * last key of each block is tried (earlier ones were tried at earlier
 * reuses). */
#define REUSE_THREADS 4
#define REUSE_ROUNDS 12
#define REUSE_MAX_ROUNDS 4000 /* a slow regenerator (a loaded host; each
                               * re-bind costs soft-RoCE ~2 ms of the memory
                               * node's CPU) keeps the freed blocks
                               * quarantined longer than the frees take: go
                               * on until a block came back, */
#define REUSE_WAIT_NS (20 * 1000 * 1000) /* giving it this much time per
                                          * round once the rounds are done */
#define REUSE_HELD 3
#define REUSE_SLOTS 256
static pthread_mutex_t reuse_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t addr; uint32_t rkey; } reuse_last[REUSE_SLOTS];
static unsigned reuse_checked;
static uint64_t reuse_frees, reuse_own_frees; /* frees; of them one-CAS own frees */
static fmem_pool *reuse_pool;
static size_t reuse_size = 4096;

static unsigned reuse_slot(uint64_t addr) { return (unsigned)((addr / reuse_size) % REUSE_SLOTS); }

static void *reuse_worker(void *arg)
{
    (void)arg;
    struct transport *t = attacker();
    uint64_t own0 = tp_trace.own_frees, frees = 0;
    for (int r = 0; r < REUSE_MAX_ROUNDS; r++) {
        pthread_mutex_lock(&reuse_mu);
        bool enough = r >= REUSE_ROUNDS && reuse_checked > 0;
        pthread_mutex_unlock(&reuse_mu);
        if (enough)
            break;
        if (r >= REUSE_ROUNDS)
            nanosleep(&(struct timespec){0, REUSE_WAIT_NS}, NULL);
        fmem_handle h[REUSE_HELD];
        for (int i = 0; i < REUSE_HELD; i++) {
            cr_assert_eq(fmem_alloc(reuse_pool, reuse_size, &h[i]), 0);
            pthread_mutex_lock(&reuse_mu);
            unsigned sl = reuse_slot(h[i].addr);
            uint32_t old = reuse_last[sl].addr == h[i].addr ? reuse_last[sl].rkey : 0;
            if (old)
                reuse_checked++;
            pthread_mutex_unlock(&reuse_mu);
            if (old) {
                cr_assert_neq(old, h[i].rkey, "a reused block must get a new key");
                refused(t, data(t, &h[i]), old, "the key of the block's last allocation");
            }
            uint64_t got;
            cr_assert_eq(peek(t, data(t, &h[i]), h[i].rkey, &got), 0, "the new key");
        }
        for (int i = 0; i < REUSE_HELD; i++) {
            pthread_mutex_lock(&reuse_mu);
            unsigned sl = reuse_slot(h[i].addr);
            reuse_last[sl].addr = h[i].addr;
            reuse_last[sl].rkey = h[i].rkey;
            pthread_mutex_unlock(&reuse_mu);
            cr_assert_eq(fmem_free(reuse_pool, &h[i]), 0);
            frees++;
        }
    }
    pthread_mutex_lock(&reuse_mu);
    reuse_frees += frees;
    reuse_own_frees += tp_trace.own_frees - own0;
    pthread_mutex_unlock(&reuse_mu);
    tp_close(t);
    return NULL;
}

static void reuse_run(size_t size, int threads)
{
    reuse_pool = owner();
    reuse_size = size;
    pthread_t th[REUSE_THREADS];
    for (int i = 0; i < threads; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, reuse_worker, NULL), 0);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr,
            "security: %u earlier keys of reused %zu-byte blocks checked; %llu of %llu frees "
            "were one-CAS own frees\n",
            reuse_checked, size, (unsigned long long)reuse_own_frees,
            (unsigned long long)reuse_frees);
    cr_assert_gt(reuse_checked, 0, "no block was reused: nothing was tested");
    /* chunk-layer blocks: the threads free their own allocations, so the
     * frees under test are mostly the one-CAS free with the mark held
     * (alloc.c, own_free) */
    if (size <= 65536)
        cr_assert_geq(reuse_own_frees * 2, reuse_frees, "only %llu of %llu frees were own frees",
                      (unsigned long long)reuse_own_frees, (unsigned long long)reuse_frees);
    fmem_close(reuse_pool);
}

Test(security, quarantined_block_not_reused_while_its_key_works, .timeout = 300)
{
    reuse_run(4096, REUSE_THREADS);
}

/* The same with blocks of two whole sections (4 MiB: one log entry per
 * section, all marked by the free, alloc.c quarantine_sections); two
 * threads holding three each fill most of the test pool. */
Test(security, quarantined_section_block_not_reused_while_its_key_works, .timeout = 300)
{
    reuse_run((size_t)4 << 20, 2);
}

/* A free of a whole-section block commits (the checks, the parts' entries,
 * the commit chain) without waiting for the memory node to destroy the old
 * window; the key dies soon after and the block comes back. Before, such a
 * free polled the key entry until the regenerator's pass was over. */
Test(security, section_block_free_does_not_wait_for_the_window)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    for (int round = 0; round < 8; round++) {
        size_t sz = (size_t)4 << (20 + round % 2);
        fmem_handle h, again;
        uint64_t got;
        cr_assert_eq(fmem_alloc(p, sz, &h), 0);
        cr_assert_eq(peek(t, data(t, &h), h.rkey, &got), 0);
        uint64_t rt0 = tp_trace.round_trips;
        cr_assert_eq(fmem_free(p, &h), 0);
        uint64_t rt = tp_trace.round_trips - rt0;
        cr_assert_leq(rt, 4, "free of %zu bytes: %llu round trips", sz, (unsigned long long)rt);
        dies_soon(t, data(t, &h), h.rkey, "freed key of a section block");
        int rc;
        for (int i = 0; (rc = fmem_alloc(p, sz, &again)) == FMEM_ENOMEM && i < 5000; i++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        cr_assert_eq(rc, 0, "%s", fmem_strerror(rc));
        if (again.addr == h.addr)
            cr_assert_neq(again.rkey, h.rkey, "a reused block must get a new key");
        cr_assert_eq(peek(t, data(t, &again), again.rkey, &got), 0);
        cr_assert_eq(fmem_free(p, &again), 0);
    }
    tp_close(t);
    fmem_close(p);
}

Test(security, metadata_is_out_of_reach)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle h;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    uint32_t mr = verbs_transport_mr_rkey(t);
    refused(t, 0, 0, "pool header without a key");
    refused(t, 0, mr, "pool header with the region's own key");
    refused(t, 0, mr + 1, "the region's key + 1");
    refused(t, 0, h.rkey, "pool header with a block key");
    refused(t, t->meta_size - 8, h.rkey, "last metadata word with a block key");
    refused(t, data(t, &h), mr, "data with the data region's own key");
    refused(t, data(t, &h), mr + 1, "data with the data region's key + 1");
    cr_assert_eq(fmem_free(p, &h), 0);
    tp_close(t);
    fmem_close(p);
}

Test(security, service_needs_the_token)
{
    struct verbs_connect_params cp = {.host = host, .port = port, .role = VERBS_ROLE_SERVICE,
                                      .token_path = "/dev/null"};
    struct transport *t = NULL;
    cr_assert_neq(verbs_transport_connect(&cp, &t), 0, "a wrong token must be rejected");
    cp.token_path = NULL;
    cr_assert_neq(verbs_transport_connect(&cp, &t), 0, "no token must be rejected");
    FILE *f = fopen("/tmp/fmem-bad-token", "w");
    cr_assert(f);
    fputs("00112233445566778899aabbccddeeff\n", f);
    fclose(f);
    cp.token_path = "/tmp/fmem-bad-token";
    cr_assert_neq(verbs_transport_connect(&cp, &t), 0, "a guessed token must be rejected");
    remove("/tmp/fmem-bad-token");
}

/* Type-1 windows accept their key from any queue pair: a key that leaks
 * while its block is live works for whoever holds it. Type-2B windows
 * would be bound to the owner's queue pair; see docs/verbs-notes.md. */
Test(security, stolen_live_key_works_with_type1_windows)
{
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle h;
    uint64_t v = 42, got = 0;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    cr_assert_eq(fmem_write(p, &h, 0, &v, 8), 0);
    cr_assert_eq(peek(t, data(t, &h), h.rkey, &got), 0);
    cr_assert_eq(got, 42);
    cr_assert_eq(fmem_free(p, &h), 0);
    dies_soon(t, data(t, &h), h.rkey, "the stolen key after the free");
    tp_close(t);
    fmem_close(p);
}

/* A raw connect request carrying `pd` (len bytes) as private data: the
 * memory node must reject it. Returns the event that ended the attempt. */
static enum rdma_cm_event_type raw_connect(const void *pd, uint8_t len)
{
    struct rdma_event_channel *ec = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
    cr_assert(ec && getaddrinfo(host, port, &hints, &ai) == 0);
    cr_assert_eq(rdma_create_id(ec, &id, NULL, RDMA_PS_TCP), 0);
    enum rdma_cm_event_type last = RDMA_CM_EVENT_ADDR_ERROR;
    struct rdma_cm_event *ev;
    int ok = rdma_resolve_addr(id, NULL, ai->ai_addr, 5000) == 0 && rdma_get_cm_event(ec, &ev) == 0;
    if (ok) {
        ok = ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
        rdma_ack_cm_event(ev);
    }
    ok = ok && rdma_resolve_route(id, 5000) == 0 && rdma_get_cm_event(ec, &ev) == 0;
    if (ok) {
        ok = ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED;
        rdma_ack_cm_event(ev);
    }
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
                                          .max_recv_sge = 1}};
    struct rdma_conn_param cp = {.private_data = pd, .private_data_len = len,
                                 .initiator_depth = 1, .responder_resources = 1};
    if (ok && rdma_create_qp(id, NULL, &qa) == 0 && rdma_connect(id, &cp) == 0 &&
        rdma_get_cm_event(ec, &ev) == 0) {
        last = ev->event;
        rdma_ack_cm_event(ev);
    }
    if (id->qp)
        rdma_destroy_qp(id);
    rdma_destroy_id(id);
    rdma_destroy_event_channel(ec);
    freeaddrinfo(ai);
    return last;
}

Test(security, malformed_connect_requests)
{
    struct verbs_hello good = {.magic = VERBS_MAGIC, .version = VERBS_VERSION,
                               .role = VERBS_ROLE_APP};
    struct verbs_hello bad[] = {good, good, good, good};
    bad[0].magic ^= 1;
    bad[1].version = VERBS_VERSION + 1;
    bad[2].role = 0;
    bad[3].role = 77;
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(raw_connect(&bad[i], sizeof bad[i]), RDMA_CM_EVENT_REJECTED, "hello %u", i);
    cr_assert_eq(raw_connect(NULL, 0), RDMA_CM_EVENT_REJECTED, "no private data");
    /* a service with the right token but no session cannot be fenced */
    struct verbs_hello svc = good;
    svc.role = VERBS_ROLE_SERVICE;
    cr_assert_eq(verbs_token_read(token, svc.token), 0);
    cr_assert_eq(raw_connect(&svc, sizeof svc), RDMA_CM_EVENT_REJECTED, "no session");
    svc.session = 42;
    cr_assert_eq(raw_connect(&svc, sizeof svc), RDMA_CM_EVENT_ESTABLISHED, "with a session");
    /* the CM pads private data with zeros: a hello cut before its role reads
     * as role 0 */
    cr_assert_eq(raw_connect(&good, 12), RDMA_CM_EVENT_REJECTED, "truncated hello");
    uint8_t junk[56];
    memset(junk, 0xA5, sizeof junk);
    cr_assert_eq(raw_connect(junk, sizeof junk), RDMA_CM_EVENT_REJECTED, "junk");
    /* the memory node still serves */
    fmem_pool *p = owner();
    struct transport *t = attacker();
    fmem_handle h;
    uint64_t v;
    cr_assert_eq(fmem_alloc(p, 4096, &h), 0);
    cr_assert_eq(peek(t, data(t, &h), h.rkey, &v), 0);
    cr_assert_eq(fmem_free(p, &h), 0);
    tp_close(t);
    fmem_close(p);
}
