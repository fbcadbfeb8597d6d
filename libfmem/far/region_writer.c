/* region_writer.c - the writer thread of a region: eviction and flush.
 *
 * Eviction keeps `reserve` cache slots free so that faults rarely wait. It
 * claims a batch of CLOCK victims (UNIT_EVICTING), write-protects and
 * writes back the dirty ones (clean units are protected already), drops
 * them with madvise(MADV_DONTNEED) on coalesced runs, and frees their
 * slots. Faults on a claimed unit are parked by the handler and woken here
 * once the unit is gone, so no write can slip between the copy and the zap.
 * The madvise blocks until the handler has read its removal event, which is
 * why this runs on its own thread and registers each range in r->zaps
 * first: the handler then knows the event is ours, not a release.
 *
 * Flush writes every dirty cached unit back: protect, copy, mark clean.
 * Writes racing with the copy fault, re-dirty the unit and go on. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "region_internal.h"

#define EVICT_BATCH 128

void region_kick_writer(struct fmem_region *r)
{
    pthread_cond_signal(&r->writer_cv);
}

void region_kick_handler(struct fmem_region *r)
{
    uint64_t one = 1;
    (void)!write(r->evfd, &one, sizeof one);
}

static void protect(struct fmem_region *r, uint32_t u)
{
    /* EAGAIN: a removal event is queued; the handler reads it shortly */
    while (uffd_wp(r->uffd, unit_addr(r, u), r->unit, 1) == -EAGAIN)
        sched_yield();
}

static int need_evict(const struct fmem_region *r)
{
    return r->nfree < r->reserve || r->space_wanted;
}

struct victim {
    uint32_t u;
    int dirty, ok;
    uint64_t present;
    fmem_handle h;
};

static int by_unit(const void *a, const void *b)
{
    uint32_t x = ((const struct victim *)a)->u, y = ((const struct victim *)b)->u;
    return x < y ? -1 : x > y;
}

/* Register the zap ranges of consecutive victims (lock held); returns the
 * number of runs written to runs[]. */
static unsigned plan_zaps(struct fmem_region *r, struct victim *v, unsigned n, struct zap *runs)
{
    unsigned nr = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!v[i].ok)
            continue;
        uintptr_t s = (uintptr_t)unit_addr(r, v[i].u);
        if (nr && runs[nr - 1].end == s)
            runs[nr - 1].end += r->unit;
        else
            runs[nr++] = (struct zap){s, s + r->unit};
    }
    for (unsigned i = 0; i < nr; i++)
        r->zaps[r->nzaps++] = runs[i];
    return nr;
}

/* Drop the runs from local memory. One process_madvise(2) call zaps them
 * all with a single TLB shootdown (Linux >= 6.13 accepts MADV_DONTNEED for
 * the calling process); a madvise(2) per run costs a shootdown each. */
static void zap_runs(struct fmem_region *r, const struct zap *runs, unsigned nr)
{
    struct iovec iov[EVICT_BATCH];
    for (unsigned i = 0; i < nr; i++)
        iov[i] = (struct iovec){(void *)runs[i].start, runs[i].end - runs[i].start};
    unsigned done = 0;
    if (r->pidfd >= 0) {
        long rc = syscall(SYS_process_madvise, r->pidfd, iov, (size_t)nr, MADV_DONTNEED, 0u);
        if (rc < 0) {
            if (errno == EINVAL || errno == ENOSYS || errno == EPERM || errno == EBADF) {
                close(r->pidfd); /* not supported here: madvise from now on */
                r->pidfd = -1;
            }
        } else {
            /* a short count stops at a run boundary */
            for (size_t bytes = rc > 0 ? (size_t)rc : 0; done < nr && bytes >= iov[done].iov_len;)
                bytes -= iov[done++].iov_len;
        }
    }
    for (unsigned i = done; i < nr; i++)
        madvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED);
}

/* The unit is gone from local memory (lock held). Returns 1 if faults are
 * parked on it. */
static int finish_eviction(struct fmem_region *r, struct victim *v)
{
    struct region_unit *un = &r->units[v->u];
    if (!v->ok) { /* could not write it back: keep it */
        un->state = UNIT_RESIDENT;
        un->flags |= UF_REF;
        int waiters = !!(un->flags & UF_WAITERS);
        un->flags &= (uint8_t)~UF_WAITERS;
        return waiters;
    }
    cache_free_slot(r, un->slot);
    un->state = UNIT_ABSENT;
    if (v->dirty) {
        un->flags = (uint8_t)((un->flags | UF_REMOTE) & ~UF_DIRTY);
        stat_add(&r->st.writebacks, 1);
    }
    if (un->flags & UF_RELEASED)
        remote_drop(r, v->u);
    else if (un->zeroed && (un->flags & UF_REMOTE))
        (void)remote_zero_pages(r, v->u, un->zeroed);
    int waiters = !!(un->flags & UF_WAITERS);
    un->flags &= UF_REMOTE | UF_WRITTEN;
    un->present = un->zeroed = 0;
    stat_add(&r->st.evictions, 1);
    return waiters;
}

struct writeback_job {
    struct fmem_region *r;
    struct victim *v;
};

static void writeback_one(void *arg, unsigned i)
{
    struct writeback_job *j = arg;
    struct victim *v = &j->v[i];
    if (v->dirty)
        v->ok = remote_writeback(j->r, v->u, v->h, v->present) == 0;
}

/* Evict one batch (lock held on entry and exit, dropped inside). */
static void evict_batch(struct fmem_region *r)
{
    struct victim v[EVICT_BATCH];
    uint32_t us[EVICT_BATCH];
    /* evict down to twice the reserve: fewer, larger batches, and each
     * batch costs one TLB shootdown for the zap */
    unsigned want = r->nfree < 2 * r->reserve ? 2 * r->reserve - r->nfree : 1;
    if (want > EVICT_BATCH)
        want = EVICT_BATCH;
    unsigned n = cache_pick_victims(r, us, want);
    if (n == 0) { /* everything is busy or pinned: try again shortly */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->writer_cv, &r->lock, &ts);
        return;
    }
    for (unsigned i = 0; i < n; i++) {
        struct region_unit *un = &r->units[us[i]];
        uint64_t off;
        v[i] = (struct victim){.u = us[i], .dirty = !!(un->flags & UF_DIRTY), .ok = 1,
                               .present = un->present};
        if (v[i].dirty)
            v[i].h = remote_handle(r, us[i], &off);
    }
    pthread_mutex_unlock(&r->lock);

    /* in unit order, the write-backs go to the paths in turn (region_io.c) */
    qsort(v, n, sizeof v[0], by_unit);
    for (unsigned i = 0; i < n; i++)
        if (v[i].dirty)
            protect(r, v[i].u);
    struct writeback_job job = {r, v};
    region_io_run(&r->io, remote_io_width(r), n, writeback_one, &job);

    struct zap runs[EVICT_BATCH];
    pthread_mutex_lock(&r->lock);
    unsigned nr = plan_zaps(r, v, n, runs);
    pthread_mutex_unlock(&r->lock);
    zap_runs(r, runs, nr);

    pthread_mutex_lock(&r->lock);
    int wake[EVICT_BATCH];
    for (unsigned i = 0; i < n; i++)
        wake[i] = finish_eviction(r, &v[i]);
    if (r->space_wanted && r->nfree) {
        r->space_wanted = 0;
        region_kick_handler(r);
    }
    pthread_mutex_unlock(&r->lock);
    for (unsigned i = 0; i < n; i++)
        if (wake[i])
            uffd_wake(r->uffd, unit_addr(r, v[i].u), r->unit);
    pthread_mutex_lock(&r->lock);
}

/* Write one dirty cached unit back (lock held, dropped inside). */
static int flush_unit(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (remote_ref(r, u))
        return FMEM_ENOMEM;
    un->state = UNIT_FLUSHING;
    un->flags &= (uint8_t)~UF_DIRTY;
    uint64_t present = un->present, off;
    fmem_handle h = remote_handle(r, u, &off);
    pthread_mutex_unlock(&r->lock);
    protect(r, u);
    int rc = remote_writeback(r, u, h, present);
    pthread_mutex_lock(&r->lock);
    if (rc)
        un->flags |= UF_DIRTY;
    else {
        un->flags |= UF_REMOTE;
        stat_add(&r->st.writebacks, 1);
    }
    if (un->flags & UF_RELEASED) {
        cache_free_slot(r, un->slot);
        remote_drop(r, u);
        un->state = UNIT_ABSENT;
        un->flags = 0;
        un->present = un->zeroed = 0;
        return rc;
    }
    un->state = UNIT_RESIDENT;
    if (un->zeroed) {
        un->present &= ~un->zeroed;
        un->zeroed = 0;
        if (un->flags & UF_REMOTE)
            un->flags |= UF_DIRTY;
    }
    return rc;
}

static void do_flush(struct fmem_region *r)
{
    uint64_t target = r->flush_req;
    int rc = 0;
    for (uint32_t slot = 0; slot < r->cap; slot++) {
        if (r->fork_park)
            region_park_writer(r);
        if (need_evict(r))
            evict_batch(r);
        uint32_t u = r->ring[slot];
        if (u == NO_UNIT || r->units[u].state != UNIT_RESIDENT || !(r->units[u].flags & UF_DIRTY))
            continue;
        int e = flush_unit(r, u);
        if (e && !rc)
            rc = e;
    }
    r->flush_rc = rc;
    r->flush_done = target;
    pthread_cond_broadcast(&r->done_cv);
}

void *region_writer_main(void *arg)
{
    struct fmem_region *r = arg;
    atomic_store(&r->writer_tid, (pid_t)syscall(SYS_gettid));
    region_thread_exempt(r);
    pthread_mutex_lock(&r->lock);
    while (!r->stop_writer) {
        if (r->fork_park)
            region_park_writer(r);
        else if (r->flush_done != r->flush_req)
            do_flush(r);
        else if (need_evict(r))
            evict_batch(r);
        else
            pthread_cond_wait(&r->writer_cv, &r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}
