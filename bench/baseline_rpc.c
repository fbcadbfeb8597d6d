/* baseline_rpc.c - the RPC baseline of FUSEE / FineMem's "Premmap-RPC": one
 * server (the memory node's single weak core) owns the metadata, a buddy
 * allocator in its local memory; a client sends a request (alloc order /
 * free chunk) and waits for the answer. A request costs one round trip plus
 * the server's time: --rpc-service-ns of modeled CPU per request (receiving
 * the request through the NIC, allocating, answering), one request at a
 * time, first come first served.
 *
 * rtt_mode=nic (the default of fmem-bench): requests travel through the
 * same NIC emulator as fmem's one-sided batches (libfmem/transport/nic.c). The
 * request reaches the server half a round trip after posting; the server's
 * CPU is a modeled processor: a request starts when it has arrived and the
 * previous one is done, and its answer leaves service_ns later and takes
 * the other half round trip. The buddy operation itself runs on the
 * emulator thread when the request arrives (tens of ns): on this machine a
 * real server thread would have to be woken for every request, at a cost
 * larger than the service time being modeled, and taken from the clients'
 * cores.
 *
 * rtt_mode=spin: a real server thread serves a shared-memory queue (MPSC,
 * per-client answer slot) and spins service_ns per request; the network is
 * modeled on the client side, half the round trip before posting and half
 * after the answer (tp_delay), so the server is never held by the delay. */
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench.h"
#include "buddy.h"
#include "transport.h"

enum { SLOT_PENDING, SLOT_WAITING, SLOT_DONE };
enum { REQ_ALLOC, REQ_FREE };

/* Spin (yielding) this many turns before sleeping on a futex. */
#define SERVER_SPIN 32
#define CLIENT_SPIN 8

/* One client's request/answer mailbox. */
struct slot {
    _Alignas(64) _Atomic uint32_t state;
    uint32_t op;
    unsigned order;
    int result;
    uint64_t chunk; /* free: the block; alloc: the answer */
};

/* Bounded MPSC queue of slot numbers (per-cell sequence numbers, as in
 * Vyukov's bounded queue). Never full: it has a cell for every slot and a
 * client has at most one request outstanding. */
struct cell {
    _Atomic uint64_t seq;
    uint32_t slot;
};

struct rpc {
    uint64_t rtt_ns;
    uint64_t service_ns;
    struct nic *nic; /* rtt_mode=nic; NULL: a server thread */
    uint64_t free_at; /* nic: when the modeled server CPU is next free (emulator only) */
    uint64_t gen; /* tells this instance's thread-local slot from a stale one */
    struct buddy b;
    struct slot *slots;
    unsigned nslots;
    _Atomic unsigned slot_next;
    struct cell *cells;
    uint64_t mask;
    _Alignas(64) _Atomic uint64_t tail; /* clients */
    _Alignas(64) uint64_t head;         /* server only */
    _Alignas(64) _Atomic uint32_t server_sleeping;
    _Atomic bool stop;
    /* server load, for the report: written by the server only */
    _Atomic uint64_t busy_ns, requests;
    pthread_t server;
};

static _Atomic uint64_t gen_next;
static _Thread_local struct {
    uint64_t gen;
    unsigned slot;
} tl_slot;

static void futex_wait(_Atomic uint32_t *a, uint32_t v)
{
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *a)
{
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void enqueue(struct rpc *r, uint32_t slot)
{
    uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
    for (;;) {
        struct cell *c = &r->cells[pos & r->mask];
        uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - pos);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&r->tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                c->slot = slot;
                /* seq_cst: ordered before the load of server_sleeping */
                atomic_store_explicit(&c->seq, pos + 1, memory_order_seq_cst);
                return;
            }
        } else if (dif < 0) {
            sched_yield(); /* cannot happen (see struct cell); be safe */
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        } else {
            pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
        }
    }
}

static bool queue_ready(struct rpc *r)
{
    struct cell *c = &r->cells[r->head & r->mask];
    return atomic_load_explicit(&c->seq, memory_order_seq_cst) == r->head + 1;
}

static bool dequeue(struct rpc *r, uint32_t *slot)
{
    if (!queue_ready(r))
        return false;
    struct cell *c = &r->cells[r->head & r->mask];
    *slot = c->slot;
    atomic_store_explicit(&c->seq, r->head + r->mask + 1, memory_order_release);
    r->head++;
    return true;
}

/* The server's work on one request: the buddy operation. */
static int execute(struct rpc *r, uint32_t op, unsigned order, uint64_t *chunk)
{
    if (op == REQ_ALLOC) {
        int64_t c = buddy_alloc(&r->b, order);
        *chunk = c < 0 ? 0 : (uint64_t)c;
        return c < 0 ? FMEM_ENOMEM : 0;
    }
    return buddy_free(&r->b, *chunk, order) ? FMEM_EDOUBLEFREE : 0;
}

static void serve(struct rpc *r, struct slot *s)
{
    uint64_t t0 = r->service_ns ? bench_now_ns() : 0;
    s->result = execute(r, s->op, s->order, &s->chunk);
    while (r->service_ns && bench_now_ns() - t0 < r->service_ns)
        ; /* the modeled CPU cost: this thread is the memory node's core */
    if (atomic_exchange_explicit(&s->state, SLOT_DONE, memory_order_acq_rel) == SLOT_WAITING)
        futex_wake(&s->state);
}

static void add_relaxed(_Atomic uint64_t *a, uint64_t v)
{
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* ---- rtt_mode=nic: through the NIC emulator -------------------------------- */
struct rpc_req {
    struct nic_req nr; /* first */
    struct rpc *r;
    uint32_t op;
    unsigned order;
    uint64_t chunk;
    int result;
};

/* On the emulator thread, when the request reaches the memory node. */
static void rpc_exec(struct nic_req *nr)
{
    struct rpc_req *q = (struct rpc_req *)nr;
    struct rpc *r = q->r;
    uint64_t start = nr->exec_at > r->free_at ? nr->exec_at : r->free_at;
    r->free_at = start + r->service_ns;
    q->result = execute(r, q->op, q->order, &q->chunk);
    add_relaxed(&r->busy_ns, r->service_ns);
    add_relaxed(&r->requests, 1);
    nr->done_at = r->free_at + nr->back_ns;
}

static int call_nic(struct rpc *r, uint32_t op, unsigned order, uint64_t *chunk)
{
    struct rpc_req q = {.nr.exec = rpc_exec, .r = r, .op = op, .order = order, .chunk = *chunk};
    uint64_t half = r->rtt_ns / 2;
    nic_call(r->nic, &q.nr, half, r->rtt_ns - half);
    *chunk = q.chunk;
    return q.result;
}

static void *server_main(void *arg)
{
    struct rpc *r = arg;
    uint64_t busy_since = 0, served = 0; /* current busy period */
    for (;;) {
        uint32_t slot;
        if (dequeue(r, &slot)) {
            if (!busy_since)
                busy_since = bench_now_ns();
            serve(r, &r->slots[slot]);
            served++;
            continue;
        }
        if (busy_since) { /* the queue ran dry: account the busy period */
            add_relaxed(&r->busy_ns, bench_now_ns() - busy_since);
            add_relaxed(&r->requests, served);
            busy_since = served = 0;
        }
        if (atomic_load(&r->stop))
            return NULL;
        bool work = false;
        for (int i = 0; i < SERVER_SPIN && !work; i++) {
            sched_yield();
            work = queue_ready(r);
        }
        if (work)
            continue;
        /* sleep. All four accesses (this store, the queue check, a client's
         * post, its check of the flag) are seq_cst: either we see the post
         * or the client sees the flag and wakes us. */
        atomic_store(&r->server_sleeping, 1);
        if (queue_ready(r) || atomic_load(&r->stop)) {
            atomic_store(&r->server_sleeping, 0);
            continue;
        }
        futex_wait(&r->server_sleeping, 1);
    }
}

static void wake_server(struct rpc *r)
{
    if (atomic_load(&r->server_sleeping) && atomic_exchange(&r->server_sleeping, 0))
        futex_wake(&r->server_sleeping);
}

static int rpc_open(const struct alloc_params *p, void **self)
{
    struct rpc *r = calloc(1, sizeof *r);
    if (!r)
        return FMEM_ENOMEM;
    r->rtt_ns = p->rtt_ns;
    r->service_ns = p->rpc_service_ns;
    r->gen = atomic_fetch_add(&gen_next, 1) + 1;
    r->nslots = p->threads + 1;
    uint64_t cap = 2;
    while (cap < r->nslots)
        cap <<= 1;
    r->mask = cap - 1;
    r->slots = aligned_alloc(64, r->nslots * sizeof *r->slots);
    r->cells = calloc(cap, sizeof *r->cells);
    if (!r->slots || !r->cells || buddy_init(&r->b, p->pool_bytes / CHUNK_BYTES)) {
        free(r->slots);
        free(r->cells);
        free(r);
        return FMEM_ENOMEM;
    }
    for (uint64_t i = 0; i < cap; i++)
        atomic_init(&r->cells[i].seq, i);
    int rc = 0;
    if (p->rtt_mode == TP_RTT_NIC)
        rc = nic_acquire(&r->nic);
    else if (pthread_create(&r->server, NULL, server_main, r))
        rc = FMEM_EIO;
    if (rc) {
        buddy_destroy(&r->b);
        free(r->slots);
        free(r->cells);
        free(r);
        return rc;
    }
    *self = r;
    return 0;
}

static void rpc_close(void *self)
{
    struct rpc *r = self;
    if (r->nic) {
        nic_release(r->nic);
    } else {
        atomic_store(&r->stop, true);
        atomic_store(&r->server_sleeping, 0);
        futex_wake(&r->server_sleeping);
        pthread_join(r->server, NULL);
    }
    buddy_destroy(&r->b);
    free(r->slots);
    free(r->cells);
    free(r);
}

static struct slot *my_slot(struct rpc *r, uint32_t *idx)
{
    if (tl_slot.gen != r->gen) {
        unsigned i = atomic_fetch_add(&r->slot_next, 1);
        if (i >= r->nslots)
            return NULL;
        tl_slot.gen = r->gen;
        tl_slot.slot = i;
    }
    *idx = tl_slot.slot;
    return &r->slots[tl_slot.slot];
}

/* One request round trip. */
static int call(struct rpc *r, uint32_t op, unsigned order, uint64_t *chunk)
{
    if (r->nic)
        return call_nic(r, op, order, chunk);
    uint32_t idx;
    struct slot *s = my_slot(r, &idx);
    if (!s)
        return FMEM_EBUSY;
    s->op = op;
    s->order = order;
    s->chunk = *chunk;
    atomic_store_explicit(&s->state, SLOT_PENDING, memory_order_relaxed);
    uint64_t half = r->rtt_ns / 2;
    tp_delay(half); /* request in flight */
    enqueue(r, idx);
    wake_server(r);
    bool done = false;
    for (int i = 0; i < CLIENT_SPIN && !done; i++) {
        done = atomic_load_explicit(&s->state, memory_order_acquire) == SLOT_DONE;
        if (!done)
            sched_yield();
    }
    if (!done) {
        uint32_t expect = SLOT_PENDING;
        if (atomic_compare_exchange_strong(&s->state, &expect, SLOT_WAITING))
            while (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_DONE)
                futex_wait(&s->state, SLOT_WAITING);
    }
    tp_delay(r->rtt_ns - half); /* answer in flight */
    *chunk = s->chunk;
    return s->result;
}

static unsigned order_of(size_t size)
{
    unsigned k = 0;
    while ((CHUNK_BYTES << k) < size)
        k++;
    return k;
}

static int rpc_alloc(void *self, size_t size, fmem_handle *out, struct op_cost *c)
{
    *c = (struct op_cost){.rtts = 1};
    unsigned o = order_of(size);
    uint64_t chunk = 0;
    int rc = call(self, REQ_ALLOC, o, &chunk);
    if (rc == 0)
        *out = (fmem_handle){.addr = chunk * CHUNK_BYTES, .length = CHUNK_BYTES << o};
    return rc;
}

static int rpc_free(void *self, const fmem_handle *h, struct op_cost *c)
{
    *c = (struct op_cost){.rtts = 1};
    if (h->addr % CHUNK_BYTES || h->length < CHUNK_BYTES)
        return FMEM_EBADHANDLE;
    uint64_t chunk = h->addr / CHUNK_BYTES;
    return call(self, REQ_FREE, order_of(h->length), &chunk);
}

static void rpc_totals(void *self, struct alloc_totals *t)
{
    struct rpc *r = self;
    t->have_server = true;
    t->server_busy_ns = atomic_load_explicit(&r->busy_ns, memory_order_relaxed);
    t->server_requests = atomic_load_explicit(&r->requests, memory_order_relaxed);
}

static void rpc_set_rtt(void *self, uint64_t rtt_ns)
{
    struct rpc *r = self;
    r->rtt_ns = rtt_ns;
}

const struct allocator alloc_rpc = {
    .name = "rpc",
    .what = "one server with a buddy allocator and --rpc-service-ns per request (FUSEE style)",
    .open = rpc_open,
    .close = rpc_close,
    .alloc = rpc_alloc,
    .free = rpc_free,
    .set_rtt = rpc_set_rtt,
    .totals = rpc_totals,
};
