/* region_fork.c - a region across fork().
 *
 * Region memory is private anonymous memory, so the kernel gives the child
 * a copy-on-write snapshot of every cached unit. What the child does not
 * inherit is the paging: the fault handler and the writer are threads, the
 * userfaultfd belongs to the parent's address space, and write protection
 * (how clean units are told from dirty ones) is dropped from the child's
 * page tables. So:
 *   prepare  park the writer, then the fault handler, at a point where no
 *            unit is being installed, evicted or flushed (the writer first:
 *            its madvise needs the handler to read the removal event);
 *   parent   let both go on;
 *   child    a new userfaultfd over the same range, clean cached units
 *            taken as dirty (see dirty_clean), fresh threads; the unit and chunk tables
 *            are the parent's as of the fork, which is exactly the child's
 *            state. Units that are not cached are read from the pool: from
 *            a private pool (mem:) the child has its own snapshot; a shared
 *            pool gives the child copies of its blocks (pool level).
 * A child that cannot restart paging makes the region inaccessible and
 * says so: a fault then kills it instead of reading zeros. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "region_internal.h"

#define REGION_OF(w) ((struct fmem_region *)((char *)(w) - offsetof(struct fmem_region, fork)))

void region_park(struct fmem_region *r, int *parked, const int *hold, pthread_cond_t *cv)
{
    *parked = 1;
    pthread_cond_broadcast(&r->done_cv);
    while (*hold)
        pthread_cond_wait(cv, &r->lock);
    *parked = 0;
}

static void fork_prepare(struct fork_watch *w)
{
    struct fmem_region *r = REGION_OF(w);
    pthread_mutex_lock(&r->lock);
    if (!r->running)
        return; /* nothing to park; the lock is held until the fork is over */
    r->fork_park = 1;
    region_kick_writer(r);
    while (!r->writer_parked)
        pthread_cond_wait(&r->done_cv, &r->lock);
    if (r->pf_on) { /* before the handler: its copies may need it */
        r->fork_park_prefetch = 1;
        pthread_cond_broadcast(&r->pf_cv);
        while (!r->prefetch_parked)
            pthread_cond_wait(&r->done_cv, &r->lock);
    }
    r->fork_park_handler = 1;
    region_kick_handler(r);
    while (!r->handler_parked)
        pthread_cond_wait(&r->done_cv, &r->lock);
}

static void fork_parent(struct fork_watch *w)
{
    struct fmem_region *r = REGION_OF(w);
    r->fork_park = r->fork_park_handler = r->fork_park_prefetch = 0;
    pthread_cond_broadcast(&r->writer_cv);
    pthread_cond_broadcast(&r->pf_cv);
    pthread_cond_broadcast(&r->park_cv);
    pthread_mutex_unlock(&r->lock);
}

/* Clean cached units were write-protected so that their first write is
 * seen; the child's page tables lost that. Protecting them again costs
 * about 0.2 ms per MiB here (60 ms for a 256 MiB cache, most of a fork),
 * so the child takes them as dirty instead: a unit it evicts is written
 * back once more than needed, and a unit that never was in the pool gets
 * its chunk now (a write-back needs one). */
static void dirty_clean(struct fmem_region *r)
{
    for (uint32_t u = 0; u < r->nunits; u++) {
        struct region_unit *un = &r->units[u];
        if (un->state == UNIT_ABSENT || (un->flags & UF_DIRTY))
            continue;
        un->flags |= UF_DIRTY;
        (void)remote_ref(r, u); /* on failure the writer tries again */
    }
}

static int restart_paging(struct fmem_region *r)
{
    int user_only;
    r->uffd = uffd_open(&user_only);
    if (r->uffd < 0)
        return r->uffd;
    r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->evfd < 0)
        return -errno;
    r->pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u); /* -1 is fine */
    int rc = uffd_register(r->uffd, r->base, r->size);
    if (rc == 0)
        dirty_clean(r);
    if (rc == 0 && region_start_threads(r) != 0)
        rc = -ENOMEM;
    return rc;
}

static void fork_child(struct fork_watch *w)
{
    struct fmem_region *r = REGION_OF(w);
    /* the parked threads do not exist here: fresh locks, nobody waiting */
    region_init_sync(r);
    r->fork_park = r->fork_park_handler = r->writer_parked = r->handler_parked = 0;
    r->running = 0;
    r->deferred.n = 0;
    r->nzaps = 0;
    r->space_wanted = 0;
    r->barrier_done = r->barrier_req;
    r->flush_done = r->flush_req;
    r->inst.active = 0;
    r->pf_inst.active = 0;
    r->fork_park_prefetch = r->prefetch_parked = r->stop_prefetch = 0;
    r->pf_next = r->pf_end = NO_UNIT;
    r->pf_gen = r->ra_gen;
    r->seq_next = NO_UNIT;
    r->seq_run = 0;
    r->ra_next = r->ra_end = NO_UNIT;
    atomic_store(&r->writer_tid, 0);
    /* the parent's descriptors: its userfaultfd must never be read here,
     * and its pidfd would make the writer drop the parent's pages */
    close(r->uffd);
    close(r->evfd);
    if (r->pidfd >= 0)
        close(r->pidfd);
    r->uffd = r->evfd = r->pidfd = -1;
    int rc = restart_paging(r);
    if (rc) {
        fprintf(stderr,
                "fmem region: cannot resume paging in the child of fork() (%s); its %zu bytes "
                "at %p are made inaccessible\n",
                strerror(-rc), r->size, (void *)r->base);
        mprotect(r->base, r->size, PROT_NONE);
    }
}

void region_fork_watch(struct fmem_region *r)
{
    r->fork = (struct fork_watch){.level = FORK_REGION, .prepare = fork_prepare,
                                  .parent = fork_parent, .child = fork_child};
    fork_watch_add(&r->fork);
}
