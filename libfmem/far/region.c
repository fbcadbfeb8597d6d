/* region.c - far-memory regions: creation, the public calls, teardown.
 * The fault handler is in region_fault.c, eviction and flush in
 * region_writer.c, the pool side in region_remote.c. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "stats_pub.h"
#include "region_hint.h"
#include "region_internal.h"

#define MAX_REGION_BYTES ((size_t)1 << 46)
#define CHUNK_MIN ((size_t)64 * 1024)
#define PREFETCH_BYTES ((size_t)4 << 20) /* default read-ahead window */
#define STEP_BYTES ((size_t)128 * 1024)   /* mapped per read-ahead step */
/* The writer drops the resident units of an aligned window of this size
 * together (region_writer.c): one zap, one TLB shootdown and one removal
 * event for all of them instead of one each. */
#define WINDOW_BYTES ((size_t)2 << 20)

static unsigned log2z(size_t v)
{
    unsigned k = 0;
    while (((size_t)1 << k) < v)
        k++;
    return k;
}

static int check_config(const fmem_region_config *c, size_t *unit)
{
    *unit = c->fetch_unit ? c->fetch_unit : FMEM_REGION_DEFAULT_UNIT;
    if (c->flags || *unit < FMEM_REGION_MIN_UNIT || *unit > FMEM_REGION_MAX_UNIT ||
        (*unit & (*unit - 1)) || c->cache_bytes == 0)
        return FMEM_EINVAL;
    if (c->size == 0 || c->size > MAX_REGION_BYTES)
        return FMEM_ESIZE;
    return 0;
}

static void region_free(struct fmem_region *r)
{
    remote_fini(r); /* I/O workers, policy */
    if (r->base)
        munmap(r->base, r->size);
    if (r->uffd >= 0)
        close(r->uffd);
    if (r->evfd >= 0)
        close(r->evfd);
    if (r->pidfd >= 0)
        close(r->pidfd);
    free(r->units);
    free(r->chunks);
    free(r->ring);
    free(r->free_slots);
    free(r->buf);
    free(r->pf_buf);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->install_mu);
    pthread_cond_destroy(&r->pf_cv);
    pthread_cond_destroy(&r->writer_cv);
    pthread_cond_destroy(&r->done_cv);
    pthread_cond_destroy(&r->park_cv);
    free(r);
}

int region_init_sync(struct fmem_region *r)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* region_wait_1ms */
    int rc = pthread_mutex_init(&r->lock, NULL) || pthread_cond_init(&r->writer_cv, &ca) ||
             pthread_cond_init(&r->done_cv, &ca) || pthread_cond_init(&r->park_cv, NULL) ||
             pthread_mutex_init(&r->install_mu, NULL) || pthread_cond_init(&r->pf_cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc ? FMEM_ENOMEM : 0;
}

static int init_tables(struct fmem_region *r)
{
    r->units = calloc(r->nunits, sizeof *r->units);
    r->chunks = calloc(r->nchunks, sizeof *r->chunks);
    r->ring = malloc(r->cap * sizeof *r->ring);
    r->free_slots = malloc(r->cap * sizeof *r->free_slots);
    /* a step's worth per path: over several nodes the step's fetches run
     * side by side (region_io.c); at most 64 units (install_ctx) */
    size_t step = STEP_BYTES * (r->npaths ? r->npaths : 1);
    r->buf_units = r->unit >= step ? 1 : (uint32_t)(step / r->unit);
    if (r->buf_units > 64)
        r->buf_units = 64;
    r->buf = aligned_alloc(UFFD_PAGE, (size_t)r->buf_units * r->unit);
    if (r->pf_on)
        r->pf_buf = aligned_alloc(UFFD_PAGE, (size_t)r->buf_units * r->unit);
    if (!r->units || !r->chunks || !r->ring || !r->free_slots || !r->buf ||
        (r->pf_on && !r->pf_buf))
        return FMEM_ENOMEM;
    for (uint32_t i = 0; i < r->cap; i++) {
        r->ring[i] = NO_UNIT;
        r->free_slots[i] = i;
    }
    r->nfree = r->cap;
    return 0;
}

static int init_mapping(struct fmem_region *r)
{
    int user_only;
    r->uffd = uffd_open(&user_only);
    if (r->uffd < 0)
        return r->uffd == -ENOTSUP ? FMEM_ENOTSUP : FMEM_EACCES;
    r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->evfd < 0)
        return FMEM_EIO;
    r->pidfd = (int)syscall(SYS_pidfd_open, getpid(), 0u); /* -1 is fine */
    void *p = mmap(NULL, r->size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return FMEM_ENOMEM;
    r->base = p;
    /* pages come in through UFFDIO_COPY one by one; huge pages would only
     * get in the way of write-protect and removal */
    madvise(p, r->size, MADV_NOHUGEPAGE);
    int rc = uffd_register(r->uffd, p, r->size);
    return rc == 0 ? 0 : rc == -ENOTSUP ? FMEM_ENOTSUP : FMEM_EIO;
}

/* Called by each region thread first: exempt from the fork gate, then
 * counted, so that region_start_threads can wait for all of them. */
void region_thread_exempt(struct fmem_region *r)
{
    fork_gate_exempt();
    pthread_mutex_lock(&r->lock);
    r->threads_exempt++;
    pthread_cond_broadcast(&r->done_cv);
    pthread_mutex_unlock(&r->lock);
}

/* Our threads take no signals: the program's handlers run elsewhere.
 * Returns once both threads are exempt from the fork gate. A fork prepared
 * before that would close the gate holding the lock they register under
 * and then wait for them to park: neither side would move. The callers
 * hold the watch lock (creation, or the child's handler), which keeps any
 * fork out until then. */
int region_start_threads(struct fmem_region *r)
{
    r->threads_exempt = 0;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* the prefetcher first: without it the handler reads ahead itself */
    if (r->pf_on && pthread_create(&r->prefetcher, NULL, region_prefetch_main, r) != 0)
        r->pf_on = 0;
    int rc = pthread_create(&r->handler, NULL, region_handler_main, r);
    if (rc == 0) {
        rc = pthread_create(&r->writer, NULL, region_writer_main, r);
        if (rc) {
            pthread_mutex_lock(&r->lock);
            r->stop_handler = 1;
            pthread_mutex_unlock(&r->lock);
            region_kick_handler(r);
            pthread_join(r->handler, NULL);
        }
    }
    if (rc)
        region_prefetch_stop(r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) {
        pthread_mutex_lock(&r->lock);
        while (r->threads_exempt < 2 + (r->pf_on ? 1 : 0))
            pthread_cond_wait(&r->done_cv, &r->lock);
        pthread_mutex_unlock(&r->lock);
    }
    r->running = rc == 0;
    return rc ? FMEM_ENOMEM : 0;
}

int fmem_region_create(fmem_pool *pool, const fmem_region_config *cfg, fmem_region **out)
{
    if (!out)
        return FMEM_EINVAL;
    *out = NULL;
    if (!pool || !cfg)
        return FMEM_EINVAL;
    size_t unit;
    int rc = check_config(cfg, &unit);
    if (rc)
        return rc;
    struct fmem_region *r = calloc(1, sizeof *r);
    if (!r)
        return FMEM_ENOMEM;
    r->uffd = r->evfd = r->pidfd = -1;
    r->pool = pool;
    r->unit = unit;
    r->unit_shift = log2z(unit);
    r->pages_per_unit = (unsigned)(unit / UFFD_PAGE);
    r->size = (cfg->size + unit - 1) & ~(unit - 1);
    if ((r->size >> r->unit_shift) >= NO_UNIT) {
        free(r);
        return FMEM_ESIZE;
    }
    r->nunits = (uint32_t)(r->size >> r->unit_shift);
    r->chunk = unit > CHUNK_MIN ? unit : CHUNK_MIN;
    r->units_per_chunk = (unsigned)(r->chunk / unit);
    r->window_units = unit >= WINDOW_BYTES ? 1 : (uint32_t)(WINDOW_BYTES / unit);
    r->nchunks = (r->nunits + r->units_per_chunk - 1) / r->units_per_chunk;
    size_t cap = (cfg->cache_bytes + unit - 1) / unit;
    if (cap < FMEM_REGION_MIN_CACHE_UNITS)
        cap = FMEM_REGION_MIN_CACHE_UNITS;
    if (cap > r->nunits)
        cap = r->nunits;
    r->cap = (uint32_t)cap;
    r->reserve = r->cap / 8 > 64 ? 64 : r->cap / 8 ? r->cap / 8 : 1;
    if (r->reserve > r->nunits - r->cap) /* no more free slots than units out */
        r->reserve = r->nunits - r->cap;
    r->prefetch = cfg->prefetch == FMEM_REGION_NO_PREFETCH ? 0
                  : cfg->prefetch                           ? cfg->prefetch
                  : unit >= PREFETCH_BYTES                  ? 1
                                                            : (unsigned)(PREFETCH_BYTES / unit);
    if (r->prefetch > r->cap / 4)
        r->prefetch = r->cap / 4;
    r->seq_next = r->ra_next = r->ra_end = NO_UNIT;
    r->pf_next = r->pf_end = NO_UNIT;
    /* read-ahead on its own thread with FMEM_REGION_PREFETCH_THREAD=1 (off
     * by default: see docs/far-memory.md, "Prefetch thread") */
    const char *pt = getenv("FMEM_REGION_PREFETCH_THREAD");
    r->pf_on = r->prefetch > 0 && pt && pt[0] == '1';
    r->direct = 1; /* until fmem_map says otherwise */
    region_handler_wait_init(r);
    if ((rc = region_init_sync(r)) != 0) {
        free(r);
        return rc;
    }
    if ((rc = remote_init(r, cfg)) != 0) { /* paths, chunk layout, policy */
        region_free(r);
        return rc;
    }
    fork_objects_lock();
    if ((rc = init_tables(r)) != 0 || (rc = init_mapping(r)) != 0 ||
        (rc = region_start_threads(r)) != 0) {
        fork_objects_unlock();
        region_free(r);
        return rc;
    }
    region_fork_watch(r);
    fork_objects_unlock();
    stats_pub_region_add(r); /* live figures for fmem status */
    *out = r;
    return 0;
}

int fmem_region_destroy(fmem_region *r)
{
    if (!r)
        return FMEM_EINVAL;
    stats_pub_region_remove(r);
    fork_objects_lock();
    fork_watch_remove(&r->fork);
    if (!r->running) /* a fork child that could not restart them */
        goto gone;
    region_prefetch_stop(r); /* first: it may wait for the others */
    pthread_mutex_lock(&r->lock);
    r->stop_writer = 1;
    region_kick_writer(r);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->writer, NULL);
    pthread_mutex_lock(&r->lock);
    r->stop_handler = 1;
    pthread_mutex_unlock(&r->lock);
    region_kick_handler(r);
    pthread_join(r->handler, NULL);
gone:
    remote_free_all(r);
    region_free(r);
    fork_objects_unlock();
    return 0;
}

void *fmem_region_base(const fmem_region *r)
{
    return r ? r->base : NULL;
}

size_t fmem_region_size(const fmem_region *r)
{
    return r ? r->size : 0;
}

size_t fmem_region_unit(const fmem_region *r)
{
    return r ? r->unit : 0;
}

/* Wait until the handler has processed every event it read so far. */
static void handler_barrier(struct fmem_region *r)
{
    pthread_mutex_lock(&r->lock);
    uint64_t t = ++r->barrier_req;
    pthread_mutex_unlock(&r->lock);
    region_kick_handler(r);
    pthread_mutex_lock(&r->lock);
    while (r->barrier_done < t)
        pthread_cond_wait(&r->done_cv, &r->lock);
    pthread_mutex_unlock(&r->lock);
}

static int region_flush(fmem_region *r)
{
    handler_barrier(r);
    pthread_mutex_lock(&r->lock);
    uint64_t t = ++r->flush_req;
    region_kick_writer(r);
    while (r->flush_done < t)
        pthread_cond_wait(&r->done_cv, &r->lock);
    int rc = r->flush_rc;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* A unit the writer was copying when it was released gives its pool space
 * back when the writer is done with it: wait for that too, so the space
 * is back when a release returns. (The writer finishes within its own
 * step; the wait rechecks every millisecond rather than rely on a
 * broadcast from each of its paths.) */
static void wait_writer_releases(struct fmem_region *r, size_t offset, size_t len)
{
    if (len == 0)
        return;
    size_t u = offset >> r->unit_shift, last = (offset + len - 1) >> r->unit_shift;
    pthread_mutex_lock(&r->lock);
    while (u <= last) {
        const struct region_unit *un = &r->units[u];
        if ((un->state == UNIT_FLUSHING || un->state == UNIT_EVICTING) &&
            (un->flags & UF_RELEASED)) {
            region_wait_1ms(&r->done_cv, &r->lock);
            continue;
        }
        u++;
    }
    pthread_mutex_unlock(&r->lock);
}

static int region_release(fmem_region *r, size_t offset, size_t len)
{
    /* the handler sees the removal event and frees the pool space */
    if (madvise(r->base + offset, len, MADV_DONTNEED) < 0)
        return FMEM_EIO;
    handler_barrier(r);
    wait_writer_releases(r, offset, len);
    return 0;
}

void region_discard(fmem_region *r, size_t off, size_t len)
{
    if (off >= r->size || len > r->size - off)
        return;
    uint32_t u0 = (uint32_t)((off + r->unit - 1) >> r->unit_shift);
    uint32_t u1 = (uint32_t)((off + len) >> r->unit_shift); /* whole units only */
    pthread_mutex_lock(&r->lock);
    for (uint32_t u = u0; u < u1; u++) {
        struct region_unit *un = &r->units[u];
        if (un->state != UNIT_RESIDENT || (un->flags & UF_DISCARD))
            continue;
        un->flags = (uint8_t)((un->flags | UF_DISCARD) & ~UF_REF);
        un->heat = 0;
        if (r->ndiscard < REGION_DISCARD_LIST)
            r->discard[(r->discard_head + r->ndiscard++) % REGION_DISCARD_LIST] = u;
    }
    pthread_mutex_unlock(&r->lock);
}

void region_undiscard(fmem_region *r, size_t off, size_t len)
{
    if (len == 0 || off >= r->size)
        return;
    if (len > r->size - off)
        len = r->size - off;
    uint32_t u0 = (uint32_t)(off >> r->unit_shift), u1 = (uint32_t)((off + len - 1) >> r->unit_shift);
    pthread_mutex_lock(&r->lock);
    for (uint32_t u = u0; u <= u1; u++)
        r->units[u].flags &= (uint8_t)~UF_DISCARD;
    pthread_mutex_unlock(&r->lock);
}

static int region_stats(fmem_region *r, fmem_region_stats_t *out)
{
    memset(out, 0, sizeof *out);
    const struct region_counters *c = &r->st;
    out->faults = atomic_load(&c->faults);
    out->missing_faults = atomic_load(&c->missing_faults);
    out->wp_faults = atomic_load(&c->wp_faults);
    out->hits = atomic_load(&c->hits);
    out->fetches = atomic_load(&c->fetches);
    out->prefetches = atomic_load(&c->prefetches);
    out->zero_fills = atomic_load(&c->zero_fills);
    out->evictions = atomic_load(&c->evictions);
    out->writebacks = atomic_load(&c->writebacks);
    out->bytes_fetched = atomic_load(&c->bytes_fetched);
    out->bytes_written = atomic_load(&c->bytes_written);
    out->remote_bytes = atomic_load(&c->remote_bytes);
    out->remote_peak = atomic_load(&c->remote_peak);
    out->releases = atomic_load(&c->releases);
    out->alloc_failures = atomic_load(&c->alloc_failures);
    out->ahead_unused = atomic_load(&c->ahead_unused);
    out->ahead_window = atomic_load(&c->ahead_window);
    out->cache_bytes = (uint64_t)r->cap * r->unit;
    remote_fill_stats(r, out);
    pthread_mutex_lock(&r->lock);
    out->cached_bytes = (uint64_t)(r->cap - r->nfree) * r->unit;
    pthread_mutex_unlock(&r->lock);
    return 0;
}

/* ---- the public calls that wait for the region's threads: inside the
 * fork gate (fork.h), and refused where a fork child lost the threads */

int fmem_region_flush(fmem_region *r)
{
    if (!r)
        return FMEM_EINVAL;
    if (!r->running)
        return FMEM_EIO;
    fork_gate_enter();
    int rc = region_flush(r);
    fork_gate_leave();
    return rc;
}

int fmem_region_release(fmem_region *r, size_t offset, size_t len)
{
    if (!r || (offset | len) & (UFFD_PAGE - 1))
        return FMEM_EINVAL;
    if (offset > r->size || len > r->size - offset)
        return FMEM_ERANGE;
    if (len == 0)
        return 0;
    if (!r->running)
        return FMEM_EIO;
    fork_gate_enter();
    int rc = region_release(r, offset, len);
    fork_gate_leave();
    return rc;
}

int fmem_region_stats(fmem_region *r, fmem_region_stats_t *out)
{
    if (!r || !out)
        return FMEM_EINVAL;
    fork_gate_enter();
    int rc = region_stats(r, out);
    fork_gate_leave();
    return rc;
}

int fmem_region_fault_stats(fmem_region *r, fmem_region_fault_stats_t *out, size_t size)
{
    if (!r || !out || !size)
        return FMEM_EINVAL;
    const struct region_counters *c = &r->st;
    fmem_region_fault_stats_t all = {
        .spin_wakes = atomic_load(&c->spin_wakes),
        .handler_sleeps = atomic_load(&c->handler_sleeps),
        .spin_preempted = atomic_load(&c->spin_preempted),
        .hot_first = atomic_load(&c->hot_first),
    };
    /* a caller built against an older header passes a smaller size; a
     * newer one a larger: the fields this library does not know are 0 */
    if (size > sizeof all) {
        memset((char *)out + sizeof all, 0, size - sizeof all);
        size = sizeof all;
    }
    memcpy(out, &all, size);
    return 0;
}
