/* transport.c - transport-independent helpers: single operations as batches
 * of one, operation counting, and the injected network delay. */
#include "transport.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <time.h>

#include "fmem.h"

_Thread_local struct tp_trace tp_trace;

uint64_t tp_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleeping cannot wait 2 us (timer granularity is ~10 us or worse), so spin on
 * the clock but yield the core on every turn: a lone thread waits precisely,
 * and many waiting threads share the cores as they would around a NIC. */
void tp_delay(uint64_t ns)
{
    if (ns == 0)
        return;
    uint64_t end = tp_now_ns() + ns;
    while (tp_now_ns() < end)
        sched_yield();
}

static _Atomic uint64_t wait_count, wait_late_ns;

/* A link's deadline. Sleeping gets a thread back only at the timer's
 * expiry plus its timer slack (50 us by default for a normal thread, 0 at
 * real-time priority) plus the scheduler's delay: so the slack is set to
 * 1 ns for each thread that waits here, and the sleep ends a margin early
 * and spins the rest. Short waits (half a round trip before a transfer
 * starts on a free link) spin too. Neither yields: for a normal
 * (SCHED_OTHER) thread on a busy machine sched_yield hands the core to
 * the other runnable processes for up to a whole slice (milliseconds),
 * where at real-time priority it returns at once, so the same link was
 * slower at normal priority. A spin lasts at most 2 * TP_WAIT_MARGIN_NS
 * unless the thread is preempted in it. */
void tp_wait_until(uint64_t when)
{
    static _Thread_local bool slack_set;
    uint64_t now = tp_now_ns();
    if (when > now + 2 * TP_WAIT_MARGIN_NS) {
        if (!slack_set) {
            prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
            slack_set = true;
        }
        uint64_t to = when - TP_WAIT_MARGIN_NS;
        struct timespec ts = {.tv_sec = (time_t)(to / 1000000000u), .tv_nsec = (long)(to % 1000000000u)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        while ((now = tp_now_ns()) < when)
            ;
    } else {
        while ((now = tp_now_ns()) < when)
            ;
    }
    atomic_fetch_add_explicit(&wait_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&wait_late_ns, now - when, memory_order_relaxed);
}

void tp_wait_stats(uint64_t *waits, uint64_t *late_ns)
{
    *waits = atomic_load_explicit(&wait_count, memory_order_relaxed);
    *late_ns = atomic_load_explicit(&wait_late_ns, memory_order_relaxed);
}

int tp_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    if (n == 0)
        return 0;
    int rc = t->ops->batch(t, ops, n);
    uint64_t cas = 0, fail = 0, rd = 0, wr = 0;
    for (size_t i = 0; i < n; i++) {
        switch (ops[i].kind) {
        case TP_CAS:
            cas++;
            fail += ops[i].old != ops[i].expect;
            break;
        case TP_READ: rd++; break;
        case TP_WRITE: wr++; break;
        }
    }
    tp_trace.cas += cas;
    tp_trace.cas_fail += fail;
    tp_trace.reads += rd;
    tp_trace.writes += wr;
    tp_trace.round_trips++;
    atomic_fetch_add_explicit(&t->n_cas, cas, memory_order_relaxed);
    if (fail)
        atomic_fetch_add_explicit(&t->n_cas_fail, fail, memory_order_relaxed);
    if (rd)
        atomic_fetch_add_explicit(&t->n_reads, rd, memory_order_relaxed);
    if (wr)
        atomic_fetch_add_explicit(&t->n_writes, wr, memory_order_relaxed);
    atomic_fetch_add_explicit(&t->n_rtts, 1, memory_order_relaxed);
    return rc;
}

int tp_read(struct transport *t, uint64_t off, void *dst, size_t len)
{
    struct tp_op op = {.kind = TP_READ, .off = off, .buf = dst, .len = len};
    return tp_batch(t, &op, 1);
}

int tp_write(struct transport *t, uint64_t off, const void *src, size_t len)
{
    struct tp_op op = {.kind = TP_WRITE, .off = off, .buf = (void *)src, .len = len};
    return tp_batch(t, &op, 1);
}

int tp_read_key(struct transport *t, uint64_t off, void *dst, size_t len, uint32_t rkey)
{
    struct tp_op op = {.kind = TP_READ, .off = off, .buf = dst, .len = len, .rkey = rkey};
    return tp_batch(t, &op, 1);
}

int tp_write_key(struct transport *t, uint64_t off, const void *src, size_t len, uint32_t rkey)
{
    struct tp_op op = {.kind = TP_WRITE, .off = off, .buf = (void *)src, .len = len, .rkey = rkey};
    return tp_batch(t, &op, 1);
}

int tp_cas(struct transport *t, uint64_t off, uint64_t expect, uint64_t desired,
           uint64_t *old)
{
    struct tp_op op = {.kind = TP_CAS, .off = off, .expect = expect, .desired = desired};
    int rc = tp_batch(t, &op, 1);
    if (rc < 0)
        return rc;
    if (old)
        *old = op.old;
    return op.old == expect;
}

int tp_post(struct transport *t, struct tp_op *op)
{
    bool small_write = op->kind == TP_WRITE && op->len == 8;
    if (!t->ops->post || (op->kind != TP_CAS && !small_write)) {
        int rc = tp_batch(t, op, 1);
        return rc < 0 ? rc : 1;
    }
    int rc = t->ops->post(t, op);
    if (rc == 0 && small_write) { /* in flight: a WRITE, no round trip of the caller's */
        tp_trace.writes++;
        atomic_fetch_add_explicit(&t->n_writes, 1, memory_order_relaxed);
    } else if (rc == 1 && small_write) {
        tp_trace.writes++;
        tp_trace.round_trips++;
        atomic_fetch_add_explicit(&t->n_writes, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->n_rtts, 1, memory_order_relaxed);
    } else if (rc == 0) { /* in flight: a CAS, no round trip of the caller's */
        tp_trace.cas++;
        atomic_fetch_add_explicit(&t->n_cas, 1, memory_order_relaxed);
    } else if (rc == 1) { /* the transport waited for it: count it as tp_batch does */
        bool fail = op->old != op->expect;
        tp_trace.cas++;
        tp_trace.cas_fail += fail;
        tp_trace.round_trips++;
        atomic_fetch_add_explicit(&t->n_cas, 1, memory_order_relaxed);
        if (fail)
            atomic_fetch_add_explicit(&t->n_cas_fail, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->n_rtts, 1, memory_order_relaxed);
    }
    return rc;
}

uint64_t tp_post_lost(struct transport *t)
{
    return t->ops->post_lost ? t->ops->post_lost(t) : 0;
}

uint64_t tp_post_ticket(struct transport *t)
{
    return t->ops->post_ticket ? t->ops->post_ticket(t) : 0;
}

bool tp_post_landed(struct transport *t, uint64_t ticket)
{
    return !ticket || !t->ops->post_landed || t->ops->post_landed(t, ticket);
}

void tp_close(struct transport *t)
{
    if (t)
        t->ops->close(t);
}
