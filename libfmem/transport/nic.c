/* nic.c - NIC emulation for the injected round trip (rtt_mode=nic).
 *
 * The model: the network and the NICs are a processor of their own. A
 * client posts a request and sleeps on a futex, so that waiting for the
 * network costs it no CPU, as waiting on a real NIC does not. One emulator
 * thread per process (shared by all transports and the benchmark's RPC
 * baseline) takes posted requests in and
 *   - runs the request's operations when it reaches the memory node, half a
 *     round trip after it was posted: concurrent CAS race there in the order
 *     they arrive, as over a network, and a CAS's window spans the flight;
 *   - wakes the poster when the answer is back, a full round trip after
 *     posting (later if the request's exec says so, e.g. an RPC server that
 *     was busy).
 * Requests are kept in a heap ordered by the time of their next event. The
 * emulator stands for hardware: while requests are in flight it spins on the
 * clock; it sleeps only after being idle for IDLE_SPIN_NS, and a poster that
 * finds it asleep wakes it.
 *
 * Not in the model, but paid on this machine: waking a sleeper. The
 * emulator pays it (clients never wake each other) and wakes only clients
 * that really went to sleep. A futex wake is a syscall per sleeper, and a
 * syscall is the expensive part (about 1 us where page-table isolation
 * is on), so the wakes of one pass are batched: all of them in one
 * io_uring_enter (IORING_OP_FUTEX_WAKE, Linux 6.7 or later), else two per
 * syscall (FUTEX_WAKE_OP). The emulator runs at the priority of the
 * process: raised above the clients it keeps a core to itself and the
 * clients the scheduler places on that core starve (measured: worse at few
 * threads, no better at many). When the cores are saturated it falls behind
 * the modeled times; nic_get_stats reports by how much.
 *
 * After fork() the child has no emulator thread: the first request there
 * starts a new one (requests other threads of the parent had in flight are
 * gone with those threads). */
#include <errno.h>
#include <linux/futex.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cpu_relax.h"
#include "fmem.h"
#include "transport.h"

#define IDLE_SPIN_NS 200000u /* idle this long before sleeping */
#define HEAP_INIT 256
#define WAKE_BATCH 64 /* wakes per io_uring_enter */

/* Not in older uapi headers. */
#define NIC_IORING_OP_FUTEX_WAKE 52
#define NIC_FUTEX2_SIZE_U32 0x02
#define NIC_FUTEX2_PRIVATE 128

enum { RS_POSTED, RS_SLEEPING, RS_DONE };

struct nic {
    _Alignas(64) _Atomic(struct nic_req *) posted; /* newest first (Treiber stack) */
    _Alignas(64) _Atomic uint32_t sleeping;        /* the emulator is (about to be) asleep */
    _Atomic bool stop;
    _Atomic bool running; /* false in a forked child until restarted */
    unsigned refs;        /* under nic_lock */
    pthread_t thread;
    /* emulator thread only */
    _Alignas(64) struct nic_req **heap;
    size_t nheap, cap;
    uint64_t seq;
};

static pthread_mutex_t nic_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nic *nic_single;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* Written by the emulator thread only (one at a time), read by anyone. */
static struct {
    _Atomic uint64_t requests, late_ns, late_max_ns, wake_calls, woken, cpu_done_ns;
} nstats;

static void add_relaxed(_Atomic uint64_t *a, uint64_t v)
{
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

static void futex_wait(_Atomic uint32_t *a, uint32_t v)
{
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *a)
{
    syscall(SYS_futex, (uint32_t *)a, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static uint64_t thread_cpu_ns(clockid_t c)
{
    struct timespec ts;
    if (clock_gettime(c, &ts))
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the heap of requests in flight, by time of their next event --------- */
static uint64_t key(const struct nic_req *r)
{
    return r->executed ? r->done_at : r->exec_at;
}

static bool before(const struct nic_req *a, const struct nic_req *b)
{
    uint64_t ka = key(a), kb = key(b);
    return ka != kb ? ka < kb : a->seq < b->seq;
}

static void heap_push(struct nic *n, struct nic_req *r)
{
    size_t i = n->nheap++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!before(r, n->heap[p]))
            break;
        n->heap[i] = n->heap[p];
        i = p;
    }
    n->heap[i] = r;
}

static struct nic_req *heap_pop(struct nic *n)
{
    struct nic_req *top = n->heap[0], *last = n->heap[--n->nheap];
    size_t i = 0, cnt = n->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= cnt)
            break;
        if (c + 1 < cnt && before(n->heap[c + 1], n->heap[c]))
            c++;
        if (!before(n->heap[c], last))
            break;
        n->heap[i] = n->heap[c];
        i = c;
    }
    if (cnt)
        n->heap[i] = last;
    return top;
}

/* Move the posted requests into the heap, in posting order. */
static void take_posted(struct nic *n)
{
    struct nic_req *r = atomic_exchange_explicit(&n->posted, NULL, memory_order_acquire), *fifo = NULL;
    while (r) { /* reverse: oldest first */
        struct nic_req *next = r->next;
        r->next = fifo;
        fifo = r;
        r = next;
    }
    while (fifo) {
        if (n->nheap == n->cap) {
            size_t cap = n->cap ? 2 * n->cap : HEAP_INIT;
            struct nic_req **h = realloc(n->heap, cap * sizeof *h);
            if (!h) { /* hand the rest back; retried on the next pass */
                struct nic_req *last = fifo;
                while (last->next)
                    last = last->next;
                struct nic_req *head = atomic_load_explicit(&n->posted, memory_order_relaxed);
                do
                    last->next = head;
                while (!atomic_compare_exchange_weak_explicit(&n->posted, &head, fifo,
                                                              memory_order_release,
                                                              memory_order_relaxed));
                return;
            }
            n->heap = h;
            n->cap = cap;
        }
        struct nic_req *next = fifo->next;
        fifo->seq = n->seq++;
        heap_push(n, fifo);
        fifo = next;
    }
}

/* ---- wake-ups ------------------------------------------------------------------ */
struct uring {
    int fd; /* -1: not available */
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map, *sqe_map;
    size_t sq_len, cq_len, sqe_len;
};

struct waker {
    struct uring u;
    _Atomic uint32_t *w[WAKE_BATCH];
    unsigned n;
};

static void uring_close(struct uring *u)
{
    if (u->sqe_map)
        munmap(u->sqe_map, u->sqe_len);
    if (u->cq_map && u->cq_map != u->sq_map)
        munmap(u->cq_map, u->cq_len);
    if (u->sq_map)
        munmap(u->sq_map, u->sq_len);
    if (u->fd >= 0)
        close(u->fd);
    *u = (struct uring){.fd = -1};
}

/* Queue futex wakes of w[0..n) and submit them; returns how many failed,
 * moving those to the front of w[]. */
static unsigned uring_wake(struct uring *u, _Atomic uint32_t **w, unsigned n)
{
    unsigned tail = *u->sq_tail, mask = *u->sq_mask;
    for (unsigned i = 0; i < n; i++) {
        unsigned idx = (tail + i) & mask;
        struct io_uring_sqe *e = &u->sqes[idx];
        memset(e, 0, sizeof *e);
        e->opcode = NIC_IORING_OP_FUTEX_WAKE;
        e->flags = IOSQE_CQE_SKIP_SUCCESS; /* only failures post a completion */
        e->fd = NIC_FUTEX2_SIZE_U32 | NIC_FUTEX2_PRIVATE;
        e->addr = (uintptr_t)w[i];
        e->off = 1; /* wake one */
        e->addr3 = FUTEX_BITSET_MATCH_ANY;
        e->user_data = (uintptr_t)w[i];
        u->sq_array[idx] = idx;
    }
    __atomic_store_n(u->sq_tail, tail + n, __ATOMIC_RELEASE);
    long rc = syscall(__NR_io_uring_enter, u->fd, n, 0, 0, NULL, 0);
    unsigned failed = 0;
    if (rc < (long)n) { /* not consumed: take them back, wake them otherwise */
        unsigned done = rc > 0 ? (unsigned)rc : 0;
        __atomic_store_n(u->sq_tail, tail + done, __ATOMIC_RELEASE);
        for (unsigned i = done; i < n; i++)
            w[failed++] = w[i];
    }
    unsigned head = *u->cq_head, end = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
    for (; head != end; head++) {
        const struct io_uring_cqe *c = &u->cqes[head & *u->cq_mask];
        /* EFAULT: the sleeper saw its answer, returned and its stack is
         * gone (the wake was not needed) */
        if (c->res != -EFAULT && failed < WAKE_BATCH)
            w[failed++] = (_Atomic uint32_t *)(uintptr_t)c->user_data;
    }
    __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
    return failed;
}

/* Set up a ring and check that it can wake futexes (it cannot before Linux
 * 6.7, or where io_uring is switched off). */
static void uring_open(struct uring *u)
{
    *u = (struct uring){.fd = -1};
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    u->fd = (int)syscall(__NR_io_uring_setup, WAKE_BATCH, &p);
    if (u->fd < 0)
        return;
    u->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    u->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (u->cq_len > u->sq_len)
            u->sq_len = u->cq_len;
        u->cq_len = u->sq_len;
    }
    u->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
    void *sq = mmap(NULL, u->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                    IORING_OFF_SQ_RING);
    if (sq == MAP_FAILED) {
        uring_close(u);
        return;
    }
    u->sq_map = sq;
    void *cq = sq;
    if (!(p.features & IORING_FEAT_SINGLE_MMAP)) {
        cq = mmap(NULL, u->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                  IORING_OFF_CQ_RING);
        if (cq == MAP_FAILED) {
            uring_close(u);
            return;
        }
    }
    u->cq_map = cq;
    void *sqes = mmap(NULL, u->sqe_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                      u->fd, IORING_OFF_SQES);
    if (sqes == MAP_FAILED) {
        uring_close(u);
        return;
    }
    u->sqe_map = sqes;
    u->sqes = sqes;
    u->sq_tail = (unsigned *)((char *)sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)((char *)sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)((char *)sq + p.sq_off.array);
    u->cq_head = (unsigned *)((char *)cq + p.cq_off.head);
    u->cq_tail = (unsigned *)((char *)cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)((char *)cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)((char *)cq + p.cq_off.cqes);
    _Atomic uint32_t probe = 0, *pw = &probe;
    if (uring_wake(u, &pw, 1)) /* the probe failed: no futex ops here */
        uring_close(u);
}

static void waker_flush(struct waker *k)
{
    unsigned n = k->n, calls = 0;
    if (!n)
        return;
    if (k->u.fd >= 0) {
        n = uring_wake(&k->u, k->w, n);
        calls++;
        if (n) /* an op failed: do without the ring from now on */
            uring_close(&k->u);
    }
    unsigned i = 0;
    for (; i + 1 < n; i += 2, calls++)
        /* one on w[i] and one on w[i+1]; the operation on w[i+1] adds 0
         * (the word may already belong to its poster's next request) and
         * the condition (old >= 0) always holds */
        syscall(SYS_futex, (uint32_t *)k->w[i], FUTEX_WAKE_OP_PRIVATE, 1, (void *)(uintptr_t)1,
                (uint32_t *)k->w[i + 1], FUTEX_OP(FUTEX_OP_ADD, 0, FUTEX_OP_CMP_GE, 0));
    if (i < n) {
        futex_wake(k->w[i]);
        calls++;
    }
    add_relaxed(&nstats.wake_calls, calls);
    add_relaxed(&nstats.woken, k->n);
    k->n = 0;
}

static void complete(struct nic_req *r, uint64_t now, struct waker *k)
{
    uint64_t late = now > r->done_at ? now - r->done_at : 0;
    add_relaxed(&nstats.requests, 1);
    add_relaxed(&nstats.late_ns, late);
    if (late > atomic_load_explicit(&nstats.late_max_ns, memory_order_relaxed))
        atomic_store_explicit(&nstats.late_max_ns, late, memory_order_relaxed);
    /* the results (written by exec) are published by this store; from here
     * on the request belongs to its poster again */
    if (atomic_exchange_explicit(&r->state, RS_DONE, memory_order_acq_rel) == RS_SLEEPING) {
        if (k->n == WAKE_BATCH)
            waker_flush(k);
        k->w[k->n++] = &r->state;
    }
}

static void *emulator_main(void *arg)
{
    struct nic *n = arg;
    struct waker k = {.n = 0};
    uring_open(&k.u);
    uint64_t idle_since = 0;
    for (;;) {
        if (atomic_load_explicit(&n->posted, memory_order_relaxed))
            take_posted(n);
        uint64_t now = tp_now_ns();
        while (n->nheap && key(n->heap[0]) <= now) {
            struct nic_req *r = heap_pop(n);
            if (!r->executed) {
                r->exec(r); /* may move done_at later */
                r->executed = true;
                if (r->done_at > now) {
                    heap_push(n, r);
                    continue;
                }
            }
            complete(r, now, &k);
        }
        waker_flush(&k);
        if (n->nheap || atomic_load_explicit(&n->posted, memory_order_relaxed)) {
            idle_since = 0;
            cpu_relax();
            continue;
        }
        if (atomic_load_explicit(&n->stop, memory_order_acquire))
            break;
        if (!idle_since)
            idle_since = now;
        if (now - idle_since < IDLE_SPIN_NS) {
            cpu_relax();
            continue;
        }
        /* sleep. The flag store, the check of the stack, a poster's push
         * and its check of the flag are all seq_cst: either we see the
         * request or the poster sees the flag and wakes us. */
        atomic_store(&n->sleeping, 1);
        if (atomic_load(&n->posted) || atomic_load(&n->stop)) {
            atomic_store(&n->sleeping, 0);
            continue;
        }
        while (atomic_load(&n->sleeping) == 1)
            futex_wait(&n->sleeping, 1);
        idle_since = 0;
    }
    uring_close(&k.u);
    add_relaxed(&nstats.cpu_done_ns, thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID));
    return NULL;
}

static void wake_emulator(struct nic *n)
{
    if (atomic_load(&n->sleeping) && atomic_exchange(&n->sleeping, 0))
        futex_wake(&n->sleeping);
}

/* ---- life cycle ------------------------------------------------------------- */
static void atfork_child(void)
{
    /* only this thread survives: no emulator, no requests in flight */
    pthread_mutex_init(&nic_lock, NULL);
    if (nic_single) {
        atomic_store(&nic_single->running, false);
        atomic_store(&nic_single->posted, NULL);
        atomic_store(&nic_single->sleeping, 0);
        nic_single->nheap = 0;
    }
}

static void atfork_register(void)
{
    pthread_atfork(NULL, NULL, atfork_child);
}

static int start_locked(struct nic *n)
{
    atomic_store(&n->stop, false);
    int e = pthread_create(&n->thread, NULL, emulator_main, n);
    if (e)
        return e == EAGAIN ? FMEM_ENOMEM : FMEM_EIO;
    atomic_store(&n->running, true);
    return 0;
}

int nic_acquire(struct nic **out)
{
    pthread_once(&atfork_once, atfork_register);
    pthread_mutex_lock(&nic_lock);
    int rc = 0;
    if (!nic_single) {
        struct nic *n = aligned_alloc(64, sizeof *n);
        if (!n) {
            rc = FMEM_ENOMEM;
        } else {
            *n = (struct nic){.refs = 0};
            if ((rc = start_locked(n)) != 0)
                free(n);
            else
                nic_single = n;
        }
    }
    if (rc == 0) {
        nic_single->refs++;
        *out = nic_single;
    }
    pthread_mutex_unlock(&nic_lock);
    return rc;
}

void nic_release(struct nic *n)
{
    if (!n)
        return;
    pthread_mutex_lock(&nic_lock);
    if (--n->refs == 0) {
        if (atomic_load(&n->running)) {
            atomic_store_explicit(&n->stop, true, memory_order_release);
            atomic_store(&n->sleeping, 0);
            futex_wake(&n->sleeping);
            pthread_join(n->thread, NULL);
        }
        free(n->heap);
        free(n);
        nic_single = NULL;
    }
    pthread_mutex_unlock(&nic_lock);
}

void nic_call(struct nic *n, struct nic_req *r, uint64_t to_node_ns, uint64_t back_ns)
{
    if (!atomic_load_explicit(&n->running, memory_order_relaxed)) { /* forked child */
        pthread_mutex_lock(&nic_lock);
        while (!atomic_load(&n->running) && start_locked(n))
            usleep(1000);
        pthread_mutex_unlock(&nic_lock);
    }
    uint64_t now = tp_now_ns();
    r->exec_at = now + to_node_ns;
    r->done_at = r->exec_at + back_ns;
    r->back_ns = back_ns;
    r->executed = false;
    atomic_store_explicit(&r->state, RS_POSTED, memory_order_relaxed);
    struct nic_req *head = atomic_load_explicit(&n->posted, memory_order_relaxed);
    do
        r->next = head;
    while (!atomic_compare_exchange_weak(&n->posted, &head, r)); /* seq_cst: see emulator_main */
    wake_emulator(n);
    for (;;) {
        uint32_t s = atomic_load_explicit(&r->state, memory_order_acquire);
        if (s == RS_DONE)
            return;
        if (s == RS_POSTED &&
            !atomic_compare_exchange_strong_explicit(&r->state, &s, RS_SLEEPING,
                                                     memory_order_acq_rel, memory_order_acquire))
            continue; /* done meanwhile */
        futex_wait(&r->state, RS_SLEEPING);
    }
}

void nic_get_stats(struct nic_stats *st)
{
    pthread_mutex_lock(&nic_lock);
    *st = (struct nic_stats){
        .requests = atomic_load_explicit(&nstats.requests, memory_order_relaxed),
        .late_ns = atomic_load_explicit(&nstats.late_ns, memory_order_relaxed),
        .late_max_ns = atomic_load_explicit(&nstats.late_max_ns, memory_order_relaxed),
        .wake_calls = atomic_load_explicit(&nstats.wake_calls, memory_order_relaxed),
        .woken = atomic_load_explicit(&nstats.woken, memory_order_relaxed),
        .cpu_ns = atomic_load_explicit(&nstats.cpu_done_ns, memory_order_relaxed),
    };
    clockid_t c;
    if (nic_single && atomic_load(&nic_single->running) &&
        pthread_getcpuclockid(nic_single->thread, &c) == 0)
        st->cpu_ns += thread_cpu_ns(c);
    pthread_mutex_unlock(&nic_lock);
}
