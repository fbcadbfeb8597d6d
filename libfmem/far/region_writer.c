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

#define EVICT_BATCH 128 /* CLOCK victims a batch picks */
#define EVICT_MAX REGION_MAX_ZAPS /* units a batch claims, windows included */

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
    return r->nfree < r->reserve || r->space_wanted || cache_behind_due(r);
}

struct victim {
    uint32_t u;
    int dirty, ok, nochunk; /* nochunk: dirty, no pool space yet */
    int drop; /* freed (discarded or released): no write-back, pool copy dropped */
    int window; /* claimed with another victim's eviction window */
    uint64_t present;
    fmem_handle h;
};

static int by_unit(const void *a, const void *b)
{
    uint32_t x = ((const struct victim *)a)->u, y = ((const struct victim *)b)->u;
    return x < y ? -1 : x > y;
}

/* A unit the writer may zap along with its neighbours although nobody
 * asked: absent (no pages) and not being installed by the handler (which
 * holds a slot for the units it installs). Lock held. */
static int absent_unclaimed(const struct fmem_region *r, uint32_t u)
{
    const struct region_unit *un = &r->units[u];
    return un->state == UNIT_ABSENT && r->ring[un->slot] != u;
}

/* Plan the zaps (lock held): runs of victims that were written back (or
 * were clean), joined across gaps inside one eviction window whose units
 * are all absent. Those gap units are claimed too (UNIT_EVICTING, listed
 * in gap[], at most gap_cap): a fault on them waits for the zap instead of
 * racing it. Each run is registered in r->zaps; returns the number of
 * runs written to runs[]. */
static unsigned plan_zaps(struct fmem_region *r, struct victim *v, unsigned n, struct zap *runs,
                          uint32_t *gap, unsigned *ngap, unsigned gap_cap)
{
    unsigned nr = 0;
    uint32_t run_end = NO_UNIT; /* unit after the last run's end */
    *ngap = 0;
    for (unsigned i = 0; i < n; i++) {
        if (!v[i].ok) {
            run_end = NO_UNIT; /* it stays mapped: never zap across it */
            continue;
        }
        uint32_t u = v[i].u;
        int join = nr && run_end != NO_UNIT && u >= run_end &&
                   (run_end - 1) / r->window_units == u / r->window_units &&
                   *ngap + (u - run_end) <= gap_cap;
        for (uint32_t g = run_end; join && g < u; g++)
            join = absent_unclaimed(r, g);
        if (join) {
            for (uint32_t g = run_end; g < u; g++) {
                r->units[g].state = UNIT_EVICTING;
                gap[(*ngap)++] = g;
            }
            runs[nr - 1].end = (uintptr_t)unit_addr(r, u) + r->unit;
        } else {
            uintptr_t s = (uintptr_t)unit_addr(r, u);
            runs[nr++] = (struct zap){s, s + r->unit};
        }
        run_end = u + 1;
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
    struct iovec iov[EVICT_MAX];
    for (unsigned i = 0; i < nr; i++)
        iov[i] = (struct iovec){(void *)runs[i].start, runs[i].end - runs[i].start};
    unsigned done = 0;
    while (r->pidfd >= 0 && done < nr) {
        /* at most IOV_MAX (1024) vectors a call */
        long rc = syscall(SYS_process_madvise, r->pidfd, iov + done, (size_t)(nr - done),
                          MADV_DONTNEED, 0u);
        if (rc < 0) {
            if (errno == EINVAL || errno == ENOSYS || errno == EPERM || errno == EBADF) {
                close(r->pidfd); /* not supported here: madvise from now on */
                r->pidfd = -1;
            }
            break;
        }
        /* a short count stops at a run boundary */
        unsigned before = done;
        for (size_t bytes = (size_t)rc; done < nr && bytes >= iov[done].iov_len;)
            bytes -= iov[done++].iov_len;
        if (done == before)
            break;
    }
    for (unsigned i = done; i < nr; i++)
        madvise(iov[i].iov_base, iov[i].iov_len, MADV_DONTNEED);
}

/* What a release of a claimed unit left to do, once the unit is gone
 * (lock held). */
static void finish_release(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (un->flags & UF_RELEASED)
        remote_drop(r, u);
    else if (un->zeroed && (un->flags & UF_REMOTE))
        (void)remote_zero_pages(r, u, un->zeroed);
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
    if (v->drop) {
        remote_drop(r, v->u); /* reads as zeros from now on */
        un->heat = 0;
    }
    if (v->dirty) {
        un->flags = (uint8_t)((un->flags | UF_REMOTE) & ~UF_DIRTY);
        stat_add(&r->st.writebacks, 1);
    }
    finish_release(r, v->u);
    if (un->unreached && !v->drop) { /* read ahead for nothing */
        stat_add(&r->st.ahead_unused, 1);
        if (v->window)
            stat_add(&r->st.ahead_window, 1);
    }
    un->unreached = 0;
    int waiters = !!(un->flags & UF_WAITERS);
    un->flags &= UF_REMOTE | UF_WRITTEN;
    un->present = un->zeroed = 0;
    un->gone_at = r->evict_clock++;
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
    if (v->dirty && v->ok)
        v->ok = remote_writeback(j->r, v->u, v->h, v->present) == 0;
}

/* An absent unit claimed for a zap is free again (lock held). */
static int finish_gap(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    un->state = UNIT_ABSENT;
    finish_release(r, u);
    int waiters = !!(un->flags & UF_WAITERS);
    un->flags &= UF_REMOTE | UF_WRITTEN;
    un->zeroed = 0;
    return waiters;
}

/* Whether claim_windows leaves resident unit u be (lock held): units with
 * their reference bit set or with heat stay: a program working on a few
 * hot units spread over many windows (a sort, a hash join) would
 * otherwise lose them with every batch and fault them straight back. So
 * does read-ahead the program has not reached yet (`unreached`): it
 * carries no reference bit, and a scan whose read-ahead shares an
 * eviction window with older victims lost it before use, fetched it
 * again and halved its read-ahead depth (region_policy.c). Only the hand
 * evicts such units (after passing one once, see region_cache.c), one at
 * a time; freed units go anyway. */
static int window_keeps(struct fmem_region *r, uint32_t u)
{
    const struct region_unit *un = &r->units[u];
    if (un->flags & UF_DISCARD)
        return 0;
    return (un->flags & UF_REF) || un->unreached || un->heat || !victim_space(r, u);
}

/* Claim the other cold resident units of the eviction window of each of
 * the first n victims in us[] (lock held): a zap costs a TLB shootdown and
 * a removal event whatever its length, so units are dropped a window at a
 * time where the cache allows, but for those window_keeps keeps. Returns
 * the new count. */
static unsigned claim_windows(struct fmem_region *r, uint32_t *us, unsigned n, unsigned max)
{
    unsigned picked = n;
    for (unsigned i = 0; i < picked && n < max; i++) {
        uint32_t w0 = us[i] / r->window_units * r->window_units, w1 = w0 + r->window_units;
        if (w1 > r->nunits)
            w1 = r->nunits;
        for (uint32_t u = w0; u < w1 && n < max; u++) {
            struct region_unit *un = &r->units[u];
            if (un->state != UNIT_RESIDENT || window_keeps(r, u))
                continue;
            un->state = UNIT_EVICTING;
            us[n++] = u;
        }
    }
    return n;
}

/* Write-protect the dirty victims (sorted by unit), a run of neighbours
 * per call: each call is a TLB shootdown. */
static void protect_dirty(struct fmem_region *r, const struct victim *v, unsigned n)
{
    for (unsigned i = 0; i < n;) {
        if (!v[i].dirty) {
            i++;
            continue;
        }
        unsigned j = i + 1;
        while (j < n && v[j].dirty && v[j].u == v[j - 1].u + 1)
            j++;
        size_t len = (size_t)(j - i) << r->unit_shift;
        /* EAGAIN: a removal event is queued; the handler reads it shortly */
        while (uffd_wp(r->uffd, unit_addr(r, v[i].u), len, 1) == -EAGAIN)
            sched_yield();
        i = j;
    }
}

/* Whether unit u holds only zeros (write-protected by the caller). */
static int unit_is_zero(const struct fmem_region *r, uint32_t u)
{
    const uint64_t *p = (const uint64_t *)unit_addr(r, u);
    size_t words = r->unit / 8, i = 0;
    UNCHECKED_BEGIN();
    while (i < words && p[i] == 0)
        i++;
    UNCHECKED_END();
    return i == words;
}

/* A dirty victim without pool space, now write-protected: one a writing
 * read-ahead mapped writable that holds only zeros is clean (it never
 * takes a chunk); else it gets its chunk now, or stays cached without. */
static void settle_nochunk(struct fmem_region *r, struct victim *v)
{
    if (unit_is_zero(r, v->u)) {
        v->dirty = 0;
        return;
    }
    uint64_t off;
    pthread_mutex_lock(&r->lock);
    v->ok = remote_ref(r, v->u) == 0;
    if (v->ok)
        v->h = remote_handle(r, v->u, &off);
    pthread_mutex_unlock(&r->lock);
}

/* Free slots were made: the handler may be waiting for one (lock held). */
static void slots_freed(struct fmem_region *r)
{
    if (r->space_wanted && r->nfree) {
        r->space_wanted = 0;
        region_kick_handler(r);
        if (r->pf_on)
            pthread_cond_signal(&r->pf_cv); /* the prefetcher may wait too */
    }
}

/* Evict one batch (lock held on entry and exit, dropped inside). */
static void evict_batch(struct fmem_region *r)
{
    struct victim v[EVICT_MAX];
    uint32_t us[EVICT_MAX], gap[EVICT_MAX];
    /* evict down to twice the reserve: fewer, larger batches, and each
     * batch costs one TLB shootdown for the zap */
    unsigned want = !(r->nfree < r->reserve || r->space_wanted) ? 0 /* drop-behind only */
                    : r->nfree < 2 * r->reserve                 ? 2 * r->reserve - r->nfree
                                                                : 1;
    if (want > EVICT_BATCH)
        want = EVICT_BATCH;
    unsigned n = cache_pick_victims(r, us, want, EVICT_BATCH);
    if (n == 0 && want == 0)
        return; /* the units streams went past are all gone already */
    if (n == 0) { /* everything is busy or pinned: try again shortly */
        slots_freed(r); /* a flush may have freed some meanwhile */
        region_wait_1ms(&r->writer_cv, &r->lock);
        return;
    }
    unsigned picked = n;
    n = claim_windows(r, us, n, EVICT_MAX);
    for (unsigned i = 0; i < n; i++) {
        struct region_unit *un = &r->units[us[i]];
        uint64_t off;
        v[i] = (struct victim){.u = us[i], .dirty = !!(un->flags & UF_DIRTY), .ok = 1,
                               .present = un->present, .window = i >= picked};
        v[i].nochunk = v[i].dirty && !(un->flags & UF_WRITTEN);
        if (v[i].dirty && !v[i].nochunk)
            v[i].h = remote_handle(r, us[i], &off);
    }
    pthread_mutex_unlock(&r->lock);

    qsort(v, n, sizeof v[0], by_unit);
    protect_dirty(r, v, n);
    /* Freed units are dropped, not written back. Checked only now that
     * every victim is write-protected: a heap that takes a discarded unit
     * back clears the mark before it writes, so either we see the mark
     * cleared and write the unit back, or its writes fault and wait until
     * the unit is gone (then it reads as zeros, which a heap expects of
     * memory it reuses). */
    pthread_mutex_lock(&r->lock);
    for (unsigned i = 0; i < n; i++)
        if (r->units[v[i].u].flags & (UF_DISCARD | UF_RELEASED)) {
            v[i].drop = 1;
            v[i].dirty = v[i].nochunk = 0;
        }
    pthread_mutex_unlock(&r->lock);
    for (unsigned i = 0; i < n; i++)
        if (v[i].nochunk)
            settle_nochunk(r, &v[i]);
    /* in unit order, the write-backs go to the paths in turn (region_io.c) */
    struct writeback_job job = {r, v};
    region_io_run(&r->io, remote_io_width(r), n, writeback_one, &job);

    struct zap runs[EVICT_MAX];
    unsigned ngap;
    pthread_mutex_lock(&r->lock);
    unsigned nr = plan_zaps(r, v, n, runs, gap, &ngap, EVICT_MAX);
    pthread_mutex_unlock(&r->lock);
    zap_runs(r, runs, nr);

    pthread_mutex_lock(&r->lock);
    uint8_t wake[EVICT_MAX], wake_gap[EVICT_MAX];
    for (unsigned i = 0; i < n; i++)
        wake[i] = (uint8_t)finish_eviction(r, &v[i]);
    for (unsigned i = 0; i < ngap; i++)
        wake_gap[i] = (uint8_t)finish_gap(r, gap[i]);
    slots_freed(r);
    pthread_mutex_unlock(&r->lock);
    for (unsigned i = 0; i < n; i++)
        if (wake[i])
            uffd_wake(r->uffd, unit_addr(r, v[i].u), r->unit);
    for (unsigned i = 0; i < ngap; i++)
        if (wake_gap[i])
            uffd_wake(r->uffd, unit_addr(r, gap[i]), r->unit);
    pthread_mutex_lock(&r->lock);
}

/* What a flush leaves to do once it is done with unit u (lock held):
 * a release that came meanwhile. Returns 1 if the unit is gone. */
static int flush_finish(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (un->flags & UF_RELEASED) {
        cache_free_slot(r, un->slot);
        remote_drop(r, u);
        un->state = UNIT_ABSENT;
        un->flags = 0;
        un->present = un->zeroed = 0;
        slots_freed(r);
        return 1;
    }
    un->state = UNIT_RESIDENT;
    if (un->zeroed) {
        un->present &= ~un->zeroed;
        un->zeroed = 0;
        if (un->flags & UF_REMOTE)
            un->flags |= UF_DIRTY;
    }
    return 0;
}

/* A dirty unit without pool space was mapped writable ahead of a writer
 * (a fresh run, a writing read-ahead) and may hold only zeros: then it is
 * clean, as eviction takes it (settle_nochunk), and takes no chunk (lock
 * held, dropped inside). Returns 1 if it was settled so. */
static int flush_if_zero(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    un->state = UNIT_FLUSHING;
    un->flags &= (uint8_t)~UF_DIRTY; /* a write from now on faults and sets it */
    pthread_mutex_unlock(&r->lock);
    protect(r, u);
    int zero = unit_is_zero(r, u);
    pthread_mutex_lock(&r->lock);
    if (!zero)
        un->flags |= UF_DIRTY;
    return flush_finish(r, u) || zero;
}

/* Write one dirty cached unit back (lock held, dropped inside). */
static int flush_unit(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (!(un->flags & UF_WRITTEN) && flush_if_zero(r, u))
        return 0;
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
    flush_finish(r, u);
    return rc;
}

static void do_flush(struct fmem_region *r)
{
    uint64_t target = r->flush_req;
    int rc = 0;
    for (uint32_t slot = 0; slot < r->cap; slot++) {
        if (r->fork_park)
            region_park(r, &r->writer_parked, &r->fork_park, &r->writer_cv);
        if (need_evict(r))
            evict_batch(r);
        uint32_t u = r->ring[slot];
        if (u == NO_UNIT || r->units[u].state != UNIT_RESIDENT || !(r->units[u].flags & UF_DIRTY) ||
            (r->units[u].flags & UF_DISCARD)) /* freed: nothing to keep */
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
            region_park(r, &r->writer_parked, &r->fork_park, &r->writer_cv);
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
