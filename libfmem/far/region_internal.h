/* region_internal.h - the far-memory region behind fmem_region.
 *
 * Threads and ownership:
 *  - the fault handler (region_fault.c) is the only reader of the
 *    userfaultfd: it serves faults, installs units (UFFDIO_COPY) and
 *    processes removal events. It never touches region memory and never
 *    waits for another region thread (but for install_mu, see below),
 *    because a madvise(MADV_DONTNEED) on the region blocks until the
 *    handler has read its removal event.
 *  - the writer (region_writer.c) picks CLOCK victims, writes dirty units
 *    back and drops them with madvise; it also runs flushes.
 *  - the prefetcher (region_prefetch.c, where enabled) maps the read-ahead
 *    window the handler opens, so that the handler stays free for faults.
 *    It claims ABSENT units by taking their slots under `lock` (a unit
 *    that is ABSENT but owns its ring slot is being installed) and holds
 *    `install_mu` while it copies; the handler holds `install_mu` while it
 *    reads and handles events, so that a removal never passes a copy.
 * All unit, chunk and cache state is guarded by `lock`. Nobody holds it
 * while touching region memory or calling madvise. The handler installs
 * ABSENT units without the lock: only it changes ABSENT units. */
#ifndef FMEM_FAR_REGION_INTERNAL_H
#define FMEM_FAR_REGION_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "fmem.h"
#include "fmem_far.h"
#include "fork.h"
#include "uffd.h"

/* Reading region memory that program threads write at other times: the
 * kernel orders the two (write-protect faults, zaps), which ThreadSanitizer
 * cannot see, so its checks are off for those copies. */
#if defined(__SANITIZE_THREAD__)
void __tsan_ignore_thread_begin(void);
void __tsan_ignore_thread_end(void);
#define UNCHECKED_BEGIN() __tsan_ignore_thread_begin()
#define UNCHECKED_END() __tsan_ignore_thread_end()
#else
#define UNCHECKED_BEGIN() ((void)0)
#define UNCHECKED_END() ((void)0)
#endif

enum unit_state {
    UNIT_ABSENT,   /* not mapped (stray zero pages may exist, see fault.c) */
    UNIT_RESIDENT, /* mapped, in the CLOCK ring */
    UNIT_FLUSHING, /* resident; the writer is copying it to the pool */
    UNIT_EVICTING, /* the writer is writing it back and dropping it */
};

enum unit_flag {
    UF_DIRTY = 1u << 0,    /* local copy differs from the pool's */
    UF_REF = 1u << 1,      /* CLOCK reference bit */
    UF_REMOTE = 1u << 2,   /* the pool holds this unit's data */
    UF_WRITTEN = 1u << 3,  /* counts as a user of its chunk */
    UF_WAITERS = 1u << 4,  /* faults parked until the writer is done */
    UF_RELEASED = 1u << 5, /* released while the writer held it */
    UF_DISCARD = 1u << 6,  /* freed by its heap but kept mapped for reuse
                            * (region_hint.h): evicted first, never written
                            * back, its pool copy dropped */
    UF_AHEAD = 1u << 7,    /* mapped by read-ahead, not reached by the
                            * program yet, not passed by the hand yet: the
                            * hand gives it a second chance (region_cache.c) */
};

struct region_unit {
    uint8_t state, flags;
    uint16_t heat;    /* refaults lately: extra turns of the CLOCK hand */
    uint32_t slot;    /* CLOCK ring slot while cached */
    uint64_t present; /* pages mapped, bit per 4 KiB page, while cached */
    uint64_t zeroed;  /* pages released while the writer held the unit */
    uint32_t gone_at; /* r->evict_clock when it was last evicted */
    uint8_t unreached; /* mapped by read-ahead and not reached yet (as
                        * UF_AHEAD, but kept when the hand passes it): no
                        * eviction window takes it, and its eviction
                        * counts as read-ahead thrown away */
};

/* One pool allocation backing `chunk` bytes of the region. */
struct region_chunk {
    fmem_handle h;
    uint32_t users; /* units with UF_WRITTEN; 0 = not allocated */
};

struct fault_msg {
    uintptr_t addr;
    uint32_t flags; /* UFFD_PAGEFAULT_FLAG_* */
    uint32_t tid;
};

struct fault_list {
    struct fault_msg *v;
    size_t n, cap;
};

/* A madvise the writer issued to drop units; its removal event is ours. */
#define REGION_MAX_ZAPS 512
struct zap {
    uintptr_t start, end;
};

/* Units the handler is installing (a run of n units from `first`; unit
 * first+i is copied from src[i]: its slot of r->buf, the pool's own memory
 * or the zero page), so that a removal event read while it waits for
 * UFFDIO_COPY can zero the data not yet mapped. */
struct install_ctx {
    int active;
    uint32_t first, n;
    const char **src;
    char *buf; /* staging: unit first+i at buf + i * unit */
    uint64_t released; /* bit i: unit first+i was released whole meanwhile
                        * (n <= 64: a run is one read-ahead step) */
};

struct region_counters {
    _Atomic uint64_t faults, missing_faults, wp_faults, hits, fetches, prefetches, zero_fills,
        evictions, writebacks, bytes_fetched, bytes_written, remote_bytes, remote_peak, releases,
        alloc_failures, ahead_unused, ahead_window,
        spin_wakes,     /* the handler found a fault while spinning */
        hot_first,      /* faults answered with their page before the unit */
        spin_preempted, /* spins cut short: the handler lost its CPU */
        handler_sleeps; /* the handler slept in poll(2) */
};

/* region_io.c: worker threads for transfers in parallel (the I/O width) */
#define REGION_IO_MAX FMEM_REGION_MAX_IO_WIDTH
struct io_task;
struct region_io {
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    pthread_t th[REGION_IO_MAX];
    _Atomic pid_t tid[REGION_IO_MAX]; /* kernel thread ids, 0: none */
    unsigned nthreads;
    struct io_task *tasks;
    int stop;
    pid_t pid; /* the process the workers run in */
};
int region_io_init(struct region_io *io);
/* Run fn(arg, i) for i in [0, n), at most `width` at a time, the caller
 * taking part; returns when all are done. */
void region_io_run(struct region_io *io, unsigned width, unsigned n, void (*fn)(void *, unsigned),
                   void *arg);
void region_io_stop(struct region_io *io);
/* A worker writing back for the writer reads region memory like the
 * writer does: the handler treats its faults on evicting units alike. */
int region_io_is_worker(struct region_io *io, uint32_t tid);

/* region_remote.c: the memory nodes ("paths") a region spreads over.
 * Unit u lives in chunk interleave-group by group: consecutive units go to
 * consecutive chunks of a group of `ileave` chunks, and chunk c is placed
 * on node (c % ileave) % stripe, so a scan touches every path in turn. */
#define REGION_MAX_PATHS 16
struct region_path {
    _Atomic uint64_t bytes_fetched, bytes_written, ops, busy_ns, chunks;
};

/* The parameters in force (region_policy.c picks them; an explicit setting
 * wins). Written by the handler (policy) or fmem_region_tune, read by
 * every region thread. */
struct region_tuning {
    _Atomic unsigned prefetch; /* read-ahead depth, units (0: off) */
    _Atomic unsigned stripe;   /* nodes new chunks are spread over */
    _Atomic unsigned io_width; /* transfers in flight at once */
    _Atomic unsigned fetch;    /* units a demand read fault brings in */
    _Atomic unsigned fixed;    /* FMEM_REGION_TUNE_* bits set explicitly */
};

struct fmem_region {
    fmem_pool *pool;
    char *base;
    size_t size, unit, chunk;
    unsigned unit_shift, pages_per_unit, units_per_chunk;
    uint32_t nunits, nchunks;
    uint32_t cap;      /* cache capacity, units */
    uint32_t reserve;  /* free slots the writer keeps */
    unsigned prefetch; /* most units a read-ahead window holds */
    uint32_t window_units; /* eviction window: units zapped together */
    int uffd, evfd;    /* evfd wakes the handler */
    int pidfd;         /* this process, for process_madvise; -1: madvise */
    pthread_t handler, writer;
    _Atomic pid_t writer_tid;

    pthread_mutex_t lock;
    pthread_cond_t writer_cv; /* work for the writer */
    pthread_cond_t done_cv;   /* barrier / flush completions */
    struct region_unit *units;
    struct region_chunk *chunks;
    uint32_t *ring;      /* CLOCK ring: unit per slot, NO_UNIT if free */
    uint32_t *free_slots; /* a FIFO: the ring stays in arrival order */
    uint32_t nfree, free_head, hand;
    uint32_t evict_clock; /* units evicted so far (wraps) */
    struct zap zaps[REGION_MAX_ZAPS];
    unsigned nzaps;
    /* units marked UF_DISCARD, oldest first, for the writer to take before
     * any CLOCK victim (entries are checked when taken: stale ones are
     * skipped; a full list leaves the rest to the CLOCK hand) */
#define REGION_DISCARD_LIST 4096
    uint32_t discard[REGION_DISCARD_LIST];
    uint32_t discard_head, ndiscard;
    /* drop-behind: units a sequential stream of the policy's has gone
     * past, oldest first, for the writer to take after the discarded ones
     * and before any CLOCK victim (region_cache.c); an entry keeps the
     * unit's gone_at, so one evicted and brought back since is skipped */
#define REGION_BEHIND_LIST 1024
    struct behind_entry {
        uint32_t u, gone_at;
    } behind[REGION_BEHIND_LIST];
    uint32_t behind_head, nbehind;
    int behind_eager; /* the last units listed go at once (a long scan's) */
    uint64_t barrier_req, barrier_done, flush_req, flush_done;
    int flush_rc;
    int stop_writer, stop_handler;
    int space_wanted; /* the handler waits for free slots */
    /* fork (region_fork.c): both threads park at a safe point */
    struct fork_watch fork;
    int fork_park;          /* the writer parks; then the handler: */
    int fork_park_handler;  /* only once the writer has (its madvise needs
                             * the handler to read the removal event) */
    int writer_parked, handler_parked;
    pthread_cond_t park_cv; /* the parked handler waits here */
    int running;            /* the two threads run (0: a child lost them) */
    int threads_exempt;     /* how many of them told the fork gate so */

    /* handler-private */
    char *buf;               /* fetch buffer: one read-ahead step */
    uint32_t buf_units;
    _Atomic int direct;      /* fmem_map works on this pool: copy in place */
    struct install_ctx inst;
    uint64_t spin_ns;           /* region_handler_wait.c; 0: never spin */
    uintptr_t hot_addr;         /* page of the fault being served, to map
                                 * first (region_install_run), or 0 */
    int hot_first;              /* do so (FMEM_REGION_HOT_FIRST=0: never) */
    int spin_on;                /* work comes in quick succession */
    unsigned spin_backoff;      /* waits left without a spin (busy CPUs) */
    struct fault_list deferred; /* to retry (EAGAIN) or waiting for space */
    uint32_t seq_next;          /* unit a sequential scan faults on next */
    unsigned seq_run;
    uint32_t ra_next, ra_end;   /* read-ahead stream still to map, or NO_UNIT */
    uint32_t ra_reached;        /* the stream's last fault: units never
                                 * written are read ahead up to
                                 * FRESH_AHEAD_BYTES past it (region_fault.c) */
    int ra_write;               /* the stream writes: map it dirty */
    uint32_t ra_gen;            /* windows opened so far */

    /* the prefetch thread (region_prefetch.c); pf_on is fixed while the
     * threads run. The window fields are guarded by `lock`, pf_inst by
     * install_mu. */
    int pf_on;
    pthread_t prefetcher;
    pthread_mutex_t install_mu;
    pthread_cond_t pf_cv;
    uint32_t pf_next, pf_end, pf_gen; /* the window as handed over, progress */
    int pf_write;
    int stop_prefetch, fork_park_prefetch, prefetch_parked;
    char *pf_buf;
    struct install_ctx pf_inst;

    struct region_counters st;

    /* paths, I/O width and placement (region_remote.c, region_io.c,
     * region_policy.c) */
    unsigned npaths, ileave; /* memory nodes usable; chunks per group */
    struct region_path paths[REGION_MAX_PATHS];
    struct region_io io;
    struct region_tuning tune;
    struct region_policy *policy;
};

#define NO_UNIT UINT32_MAX

extern char region_zero_page[]; /* FMEM_REGION_MAX_UNIT zero bytes, never written */

/* Wait on cv (a CLOCK_MONOTONIC one, see region_init_sync) for at most
 * a millisecond: the polls that must not sleep past a state change nobody
 * signals. */
static inline void region_wait_1ms(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static inline char *unit_addr(const struct fmem_region *r, uint32_t u)
{
    return r->base + ((size_t)u << r->unit_shift);
}
static inline uint64_t full_mask(const struct fmem_region *r)
{
    return r->pages_per_unit >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << r->pages_per_unit) - 1);
}
static inline void stat_add(_Atomic uint64_t *c, uint64_t v)
{
    atomic_fetch_add_explicit(c, v, memory_order_relaxed);
}

/* region_cache.c: slots of the CLOCK ring (lock held) */
uint32_t cache_take_slot(struct fmem_region *r, uint32_t u);
void cache_free_slot(struct fmem_region *r, uint32_t slot);
/* Whether unit u can be evicted as far as pool space goes: clean, or a
 * chunk is there or could be allocated now, or the unit is wholly mapped
 * (then the writer looks whether it holds only zeros before it takes a
 * chunk for it). */
int victim_space(struct fmem_region *r, uint32_t u);
#define UNIT_HEAT_MAX 3
/* Unit u is cached, or ABSENT but owning its ring slot: being installed
 * (lock held). */
static inline int unit_claimed(const struct fmem_region *r, uint32_t u)
{
    const struct region_unit *un = &r->units[u];
    return un->state != UNIT_ABSENT || r->ring[un->slot] == u;
}
/* Unit un was never written (no pool data, no chunk): it reads as zeros. */
static inline int unit_fresh(const struct region_unit *un)
{
    return !(un->flags & (UF_REMOTE | UF_WRITTEN));
}
/* A demand fault brings unit un back after an eviction (lock held): if
 * fewer units were evicted since than the cache holds, a cache twice as
 * large would have kept it, so it was in use (the refault distance): the
 * hand passes it by UNIT_HEAT_MAX more times. Otherwise it has no heat. */
static inline void unit_refault(const struct fmem_region *r, struct region_unit *un)
{
    un->heat = r->evict_clock - un->gone_at < r->cap ? UNIT_HEAT_MAX : 0;
}
/* Claim victims (lock held): the discarded units and the units streams
 * went past (up to `max`, all of them the writer may take at once), then
 * CLOCK victims until `want` are claimed. */
unsigned cache_pick_victims(struct fmem_region *r, uint32_t *out, unsigned want, unsigned max);
/* A stream of the policy's went past units [from, to): they go before
 * the CLOCK hand's victims (drop-behind); `eager`: also before the cache
 * needs room, once cache_behind_due says so. Takes the lock. */
void cache_drop_behind(struct fmem_region *r, uint32_t from, uint32_t to, int eager);
/* 1: enough units of an eager stream went past for an eviction batch of
 * their own (lock held). */
int cache_behind_due(const struct fmem_region *r);
/* The program went past units [from, to) of a stream (region_policy.c
 * learned it from the stream's next fault), and past the run of resident
 * read-ahead right before `from` (from == to: a fault on unit `from`):
 * their read-ahead is used. Takes the lock. */
void cache_ahead_reached(struct fmem_region *r, uint32_t from, uint32_t to);

/* region_remote.c: pool allocations behind the units (lock held) */
int remote_ref(struct fmem_region *r, uint32_t u);  /* set UF_WRITTEN */
void remote_drop(struct fmem_region *r, uint32_t u); /* clear WRITTEN/REMOTE */
int remote_fetch(struct fmem_region *r, uint32_t u, void *dst);
/* Write the unit's pages in `present` from region memory and zeros for the
 * others. Called without the lock (the unit is claimed by the caller). */
int remote_writeback(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t present);
int remote_zero_pages(struct fmem_region *r, uint32_t u, uint64_t pages);
fmem_handle remote_handle(struct fmem_region *r, uint32_t u, uint64_t *off);
void remote_free_all(struct fmem_region *r);
/* At creation, after the unit and chunk sizes are set: find the paths,
 * lay out the chunks (r->nchunks), start the policy. 0 or FMEM_E*. */
int remote_init(struct fmem_region *r, const fmem_region_config *cfg);
void remote_fini(struct fmem_region *r);
/* Read the units first+i with bit i in `which` (< 64 units) into
 * buf + i * unit, in parallel over the paths; a unit that cannot be read
 * reads as zeros (and is reported once). */
void remote_fetch_many(struct fmem_region *r, uint32_t first, uint64_t which, char *buf);
/* The I/O width in force. */
unsigned remote_io_width(const struct fmem_region *r);
/* The paths' and the policy's part of fmem_region_stats. */
void remote_fill_stats(struct fmem_region *r, fmem_region_stats_t *out);

/* region.c */
int region_init_sync(struct fmem_region *r);
int region_start_threads(struct fmem_region *r);
void region_thread_exempt(struct fmem_region *r); /* first call of both threads */
/* region_fork.c */
void region_fork_watch(struct fmem_region *r); /* watch lock held */
/* Park the calling region thread while a fork is being prepared (lock
 * held): sets *parked, wakes the fork's waiter, waits on cv while *hold
 * is set, returns when the fork is over. */
void region_park(struct fmem_region *r, int *parked, const int *hold, pthread_cond_t *cv);

/* region_fault.c */
void *region_handler_main(void *arg);
/* Map units [first, first+n) (ABSENT, slots taken by the caller), see
 * region_fault.c. The prefetcher calls it with install_mu held (pf = 1);
 * it returns with install_mu released. */
void region_install_run(struct fmem_region *r, int pf, uint32_t first, uint32_t n,
                        const uint8_t *remote, int dirty, int demand);
/* region_handler_wait.c: the handler's poll(2) on {uffd, evfd}, spinning
 * a little first while faults come in quick succession */
struct pollfd;
void region_handler_wait_init(struct fmem_region *r);
int region_handler_wait(struct fmem_region *r, struct pollfd *p, int timeout);
/* region_prefetch.c */
void *region_prefetch_main(void *arg);
/* The handler's read-ahead window and the prefetcher's progress (lock
 * held): hand a new window over, learn how far it got. */
void region_prefetch_sync(struct fmem_region *r);
void region_prefetch_stop(struct fmem_region *r);
/* region_writer.c */
void *region_writer_main(void *arg);
void region_kick_writer(struct fmem_region *r); /* lock held */
void region_kick_handler(struct fmem_region *r);

#endif
