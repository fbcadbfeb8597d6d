/* ring.c - shared-memory request ring with futex wake-ups.
 *
 * Wake-up protocol (both sides use sequentially consistent operations, so
 * of "post, then look at `sleeping`" and "set `sleeping`, then look at
 * `posted`" at least one side sees the other):
 *   client: set the slot's bit in `posted`; if `sleeping`, bump `bell` and
 *           wake it.
 *   worker: set `sleeping` on each of its rings, read their bells, look at
 *           `posted` once more, then wait on all the bells (futex_waitv).
 * A reply is published the same way on the slot's `state` word and its
 * `waiting` flag. Each ring is shared by one application and fmemd only, so
 * a misbehaving application can disturb its own requests alone; the worker
 * also waits with a timeout so that nothing depends on a wake-up that an
 * application chose not to send. */
#include "service/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

uint64_t ring_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int futex_wait_shared(_Atomic uint32_t *w, uint32_t val, uint64_t timeout_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000u),
                          .tv_nsec = (long)(timeout_ns % 1000000000u)};
    return (int)syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, val, timeout_ns ? &ts : NULL,
                        NULL, 0);
}

void futex_wake_shared(_Atomic uint32_t *w, int n)
{
    syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, n, NULL, NULL, 0);
}

int ring_create(int *fdp, struct ring_hdr **out)
{
    int fd = memfd_create("fmem-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return FMEM_EIO;
    if (ftruncate(fd, RING_BYTES) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        close(fd);
        return FMEM_EIO;
    }
    struct ring_hdr *r = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        close(fd);
        return FMEM_EIO;
    }
    r->magic = RING_MAGIC;
    r->nslots = RING_SLOTS;
    *fdp = fd;
    *out = r;
    return 0;
}

int ring_map(int fd, struct ring_hdr **out)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (uint64_t)st.st_size != RING_BYTES)
        return FMEM_ECORRUPT;
    struct ring_hdr *r = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED)
        return FMEM_EIO;
    if (r->magic != RING_MAGIC || r->nslots != RING_SLOTS) {
        munmap(r, RING_BYTES);
        return FMEM_ECORRUPT;
    }
    *out = r;
    return 0;
}

void ring_unmap(struct ring_hdr *r)
{
    if (r)
        munmap(r, RING_BYTES);
}

/* ---- client ------------------------------------------------------------- */

static _Thread_local unsigned slot_hint;
static _Thread_local uint64_t spin_budget = RING_PURE_SPIN_NS;

static int claim_slot(struct ring_hdr *r, bool (*alive)(void *), void *ctx)
{
    if (!slot_hint)
        slot_hint = (unsigned)(uintptr_t)&slot_hint >> 7;
    for (;;) {
        uint32_t seen = atomic_load(&r->free_slots);
        for (unsigned k = 0; k < RING_SLOTS; k++) {
            unsigned i = (slot_hint + k) % RING_SLOTS;
            uint32_t expect = SLOT_FREE;
            if (atomic_load_explicit(&r->slots[i].state, memory_order_relaxed) == SLOT_FREE &&
                atomic_compare_exchange_strong(&r->slots[i].state, &expect, SLOT_CLAIMED)) {
                slot_hint = i;
                return (int)i;
            }
        }
        /* all slots busy: more threads than slots; wait for a free one */
        atomic_fetch_add(&r->slot_waiters, 1);
        futex_wait_shared(&r->free_slots, seen, 10000000);
        atomic_fetch_sub(&r->slot_waiters, 1);
        if (alive && !alive(ctx))
            return FMEM_EIO;
    }
}

static void release_slot(struct ring_hdr *r, unsigned i)
{
    atomic_store(&r->slots[i].state, SLOT_FREE);
    if (atomic_load(&r->slot_waiters)) {
        atomic_fetch_add(&r->free_slots, 1);
        futex_wake_shared(&r->free_slots, 1);
    }
}

int ring_call(struct ring_hdr *r, const struct ring_req *req, struct ring_rsp *rsp,
              bool (*alive)(void *), void *ctx, uint64_t spin_ns)
{
    int i = claim_slot(r, alive, ctx);
    if (i < 0)
        return i;
    struct ring_slot *s = &r->slots[i];
    s->req = *req;
    atomic_store(&s->state, SLOT_POSTED);
    atomic_fetch_or(&r->posted, UINT64_C(1) << i);
    if (atomic_load(&r->sleeping)) {
        atomic_fetch_add(&r->bell, 1);
        futex_wake_shared(&r->bell, 1);
    }
    /* spin first, without giving up the core: a worker that has a core
     * answers in well under a microsecond. How long adapts per thread:
     * replies that came while spinning double the next spin (up to
     * spin_ns), replies that needed the futex halve it, so on a loaded
     * machine, where a spinning client only delays the worker it waits
     * for, it goes to sleep almost at once. */
    uint64_t budget = spin_budget < spin_ns ? spin_budget : spin_ns;
    uint64_t t0 = ring_now_ns();
    unsigned n = 0;
    uint32_t st;
    while ((st = atomic_load_explicit(&s->state, memory_order_acquire)) != SLOT_DONE) {
        cpu_relax();
        if ((++n & 15) == 0 && ring_now_ns() - t0 > budget)
            break;
    }
    bool caught = st == SLOT_DONE;
    if (caught)
        spin_budget = spin_budget * 2 < RING_SPIN_MIN_NS ? RING_SPIN_MIN_NS : spin_budget * 2;
    while (st != SLOT_DONE) {
        atomic_store(&s->waiting, 1);
        st = atomic_load(&s->state);
        if (st == SLOT_DONE)
            break;
        futex_wait_shared(&s->state, st, 20000000); /* 20 ms */
        st = atomic_load(&s->state);
        if (st != SLOT_DONE && alive && !alive(ctx)) {
            atomic_store(&s->waiting, 0);
            return FMEM_EIO; /* the slot stays taken: the service is gone */
        }
    }
    if (!caught) {
        /* a reply that came within spin_ns would have been caught by a
         * spin that long: spin about twice what it took; a later one
         * (a loaded machine) halves the spin */
        uint64_t took = ring_now_ns() - t0;
        spin_budget = took < spin_ns ? (2 * took < RING_SPIN_MIN_NS ? RING_SPIN_MIN_NS : 2 * took)
                                     : spin_budget / 2;
    }
    if (spin_budget > spin_ns)
        spin_budget = spin_ns;
    atomic_store_explicit(&s->waiting, 0, memory_order_relaxed);
    *rsp = s->rsp;
    release_slot(r, (unsigned)i);
    return 0;
}

/* ---- worker --------------------------------------------------------------- */

uint64_t ring_take(struct ring_hdr *r)
{
    if (!atomic_load_explicit(&r->posted, memory_order_relaxed))
        return 0;
    return atomic_exchange(&r->posted, 0);
}

void ring_repost(struct ring_hdr *r, uint64_t bits)
{
    if (bits)
        atomic_fetch_or(&r->posted, bits);
}

bool ring_begin(struct ring_hdr *r, unsigned i, struct ring_req *req)
{
    if (i >= RING_SLOTS)
        return false;
    uint32_t expect = SLOT_POSTED;
    if (!atomic_compare_exchange_strong(&r->slots[i].state, &expect, SLOT_BUSY))
        return false;
    /* one private copy: the application may rewrite the slot meanwhile */
    memcpy(req, (const void *)&r->slots[i].req, sizeof *req);
    return true;
}

void ring_finish(struct ring_hdr *r, unsigned i, const struct ring_rsp *rsp)
{
    struct ring_slot *s = &r->slots[i];
    memcpy((void *)&s->rsp, rsp, sizeof *rsp);
    atomic_store(&s->state, SLOT_DONE);
    if (atomic_load(&s->waiting))
        futex_wake_shared(&s->state, 1);
}

void ring_sleep(struct ring_hdr **rings, const uint32_t *bells, unsigned n, uint64_t timeout_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t end = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + timeout_ns;
    ts.tv_sec = (time_t)(end / 1000000000u);
    ts.tv_nsec = (long)(end % 1000000000u);
    if (n == 0) {
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        return;
    }
    struct futex_waitv w[FUTEX_WAITV_MAX];
    if (n > FUTEX_WAITV_MAX)
        n = FUTEX_WAITV_MAX;
    for (unsigned i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].val = bells[i];
        w[i].uaddr = (uintptr_t)&rings[i]->bell;
        w[i].flags = FUTEX_32; /* shared: no private flag */
    }
    long rc = syscall(SYS_futex_waitv, w, n, 0, &ts, CLOCK_MONOTONIC);
    if (rc < 0 && errno == ENOSYS) {
        /* kernels before 5.16: short naps instead */
        struct timespec nap = {0, 200000};
        nanosleep(&nap, NULL);
    }
}
