/* region_prefetch.c - the prefetch thread of a region.
 *
 * The fault handler decides read-ahead (region_fault.c: a window of units
 * after a sequential fault, region_policy.c: which stream and how deep);
 * the prefetcher maps that window, a step of r->buf_units units at a
 * time, while the handler goes back to serving faults. So the program's
 * faults are not queued behind read-ahead copies, and on a machine with a
 * core to spare the window is mapped while the handler copies a demand
 * fault's unit and the writer evicts behind the scan.
 *
 * Claiming: a unit is taken by whoever takes its cache slot first (lock
 * held): a demand fault on a unit the prefetcher claimed is left to it
 * (region_install_run wakes the whole run when it is mapped), and the
 * prefetcher skips units a fault mapped first.
 * Removals: the handler holds install_mu while it reads and handles
 * events and the prefetcher holds it while it copies, so a removal is
 * handled (its range zeroed in what is still to be copied) before the
 * madvise behind it can drop pages, never while a copy is in flight.
 * The prefetcher never waits for the handler while it holds install_mu
 * (an EAGAIN from UFFDIO_COPY means an event waits: it lets go and
 * yields), and the handler never waits for the prefetcher otherwise. */
#include <stdlib.h>
#include <time.h>

#include "region_internal.h"

void region_prefetch_sync(struct fmem_region *r)
{
    /* a writing stream stays on the handler: mostly fresh memory, which
     * its fault path maps a long run at a time, and a unit written ahead
     * of the prefetcher would take a write fault (and pool space) */
    if (r->ra_next == NO_UNIT || r->ra_write)
        return;
    if (r->ra_gen != r->pf_gen) { /* a new window */
        r->pf_gen = r->ra_gen;
        r->pf_next = r->ra_next;
        r->pf_end = r->ra_end;
        r->pf_write = r->ra_write;
        pthread_cond_signal(&r->pf_cv);
    } else if (r->ra_next > r->pf_next && r->ra_next < r->pf_end) {
        r->pf_next = r->ra_next; /* the program is ahead of the prefetcher */
    }
    if (r->pf_next > r->ra_next)
        r->ra_next = r->pf_next;
    if (r->ra_next >= r->ra_end)
        r->ra_next = r->ra_end = NO_UNIT; /* all mapped */
}

/* Wait for work (lock held). Returns 0 when told to stop. */
static int wait_work(struct fmem_region *r)
{
    for (;;) {
        if (r->stop_prefetch)
            return 0;
        if (r->fork_park_prefetch) {
            region_park(r, &r->prefetch_parked, &r->fork_park_prefetch, &r->pf_cv);
            continue;
        }
        if (r->pf_next >= r->pf_end || r->pf_next == NO_UNIT) {
            pthread_cond_wait(&r->pf_cv, &r->lock);
            continue;
        }
        if (r->nfree > 1)
            return 1;
        if (r->reserve == 0) {
            /* a cache as large as the region never evicts: read-ahead
             * must not make it (the writer would drop a whole window) */
            r->pf_next = r->pf_end;
            continue;
        }
        /* no free slot: the writer makes some (slots_freed signals) */
        r->space_wanted = 1;
        region_kick_writer(r);
        region_wait_1ms(&r->pf_cv, &r->lock);
    }
}

/* Claim and map the next step of the window (nothing held on entry). */
static void step(struct fmem_region *r)
{
    uint8_t remote[64];
    pthread_mutex_lock(&r->install_mu);
    pthread_mutex_lock(&r->lock);
    uint32_t first = r->pf_next, end = r->pf_end, n = 0;
    while (first < end && unit_claimed(r, first))
        first++;
    for (; n < r->buf_units && first + n < end && r->nfree > 1; n++) {
        struct region_unit *vn = &r->units[first + n];
        if (unit_claimed(r, first + n) || unit_fresh(vn))
            break;
        remote[n] = !!(vn->flags & UF_REMOTE);
        cache_take_slot(r, first + n);
    }
    /* memory never written ends the window (unit_fresh) */
    r->pf_next = n == 0 && first < end && unit_fresh(&r->units[first]) ? end : first + n;
    int dirty = r->pf_write;
    pthread_mutex_unlock(&r->lock);
    if (n)
        region_install_run(r, 1, first, n, remote, dirty, 0); /* lets go of install_mu */
    else
        pthread_mutex_unlock(&r->install_mu);
}

void *region_prefetch_main(void *arg)
{
    struct fmem_region *r = arg;
    region_thread_exempt(r);
    pthread_mutex_lock(&r->lock);
    while (wait_work(r)) {
        pthread_mutex_unlock(&r->lock);
        step(r);
        pthread_mutex_lock(&r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

void region_prefetch_stop(struct fmem_region *r)
{
    if (!r->pf_on)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop_prefetch = 1;
    pthread_cond_broadcast(&r->pf_cv);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->prefetcher, NULL);
    r->stop_prefetch = 0;
}
