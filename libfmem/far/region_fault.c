/* region_fault.c - the fault handler thread of a region.
 *
 * Fault path: a missing page in an ABSENT unit takes a cache slot, reads the
 * whole unit from its chunk (fmem_read into a private buffer) or uses zeros
 * when the unit was never written back, and maps it with UFFDIO_COPY,
 * write-protected (mapped writable and dirty at once if the fault was a
 * write, and always when it holds zeros: see region_install_run). The
 * first write to a protected unit raises a write-protect fault:
 * the unit becomes dirty, gets its chunk if it has none (lazy allocation),
 * and is unprotected whole. So a clean unit is never written back.
 * A fault on a unit the writer is evicting is parked (not answered) until
 * the writer wakes the range; with no free slot the fault waits for the
 * writer to evict.
 *
 * Removal events (the program's madvise(MADV_DONTNEED), also behind
 * fmem_region_release) are read before the pages are zapped; the handler
 * drops the units fully covered (freeing chunks no unit uses any more) and
 * zeros partly covered ones. The writer's own madvise calls are recognised
 * by their registered ranges. In a batch of messages removals are handled
 * before faults: a fault that raced with a removal may then see zeros,
 * which is one valid order of the two.
 *
 * After a removal the zap may still be in progress, so a mapped page can
 * vanish from a cached unit: a missing fault in a cached unit is therefore
 * served with a zero page, which is what the removal left there. */
#include <errno.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "region_internal.h"
#include "region_policy.h"

enum { FAULT_DONE, FAULT_RETRY, FAULT_NOSPACE };

#define FRESH_RUN_BYTES ((size_t)1 << 20) /* see fresh_run_max */
/* Read-ahead maps units never written only this far past the stream's
 * last fault. It zeros them on the handler's CPU while the program writes
 * the ones before (a new array filled), but a window that ran on over
 * fresh memory mapped zeros far past what a program wrote, which a heap
 * then released unused: a 1 M-row pandas merge zero-filled 4.4 GiB so. */
#define FRESH_AHEAD_BYTES ((size_t)2 << 20)
#define READ_BATCH 32 /* messages read at once */

static void report(const char *what, int err)
{
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
        fprintf(stderr, "fmem region: %s failed (%s); continuing\n", what,
                err < 0 ? strerror(-err) : fmem_strerror(err));
}

static void fault_push(struct fault_list *l, const struct fault_msg *m)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        struct fault_msg *v = realloc(l->v, cap * sizeof *v);
        if (!v) { /* losing a fault would hang a thread for good */
            fputs("fmem region: out of memory in the fault handler\n", stderr);
            abort();
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *m;
}

/* Pages of unit u covered by [off0, off1) (byte offsets in the region). */
static uint64_t covered_pages(const struct fmem_region *r, uint32_t u, size_t off0, size_t off1)
{
    size_t us = (size_t)u << r->unit_shift, ue = us + r->unit;
    size_t cs = off0 > us ? off0 : us, ce = off1 < ue ? off1 : ue;
    unsigned p0 = (unsigned)((cs - us) / UFFD_PAGE), p1 = (unsigned)((ce - us + UFFD_PAGE - 1) / UFFD_PAGE);
    uint64_t hi = p1 >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << p1) - 1);
    return hi & ~(((uint64_t)1 << p0) - 1);
}

/* Released pages of a unit an installer is mapping: the data not mapped
 * yet must read as zeros (lock held; for the prefetcher's, install_mu). */
static void release_installing(struct fmem_region *r, struct install_ctx *c, uint32_t u,
                               uint64_t pages)
{
    if (!c->active || u - c->first >= c->n)
        return;
    uint32_t i = u - c->first;
    char *b = c->buf + ((size_t)i << r->unit_shift);
    if (c->src[i] == region_zero_page) {
        /* zeros stay zeros (and a fresh run may be longer than the
         * staging buffer) */
    } else if (c->src[i] != b) { /* stage it: the pool copy may go */
        memcpy(b, c->src[i], r->unit);
        c->src[i] = b;
    }
    for (unsigned p = 0; p < r->pages_per_unit && c->src[i] == b; p++)
        if (pages >> p & 1)
            memset(b + (size_t)p * UFFD_PAGE, 0, UFFD_PAGE);
    if (pages == full_mask(r))
        c->released |= (uint64_t)1 << i;
}

/* The program released `pages` of unit u (lock held). */
static void release_unit(struct fmem_region *r, uint32_t u, uint64_t pages)
{
    struct region_unit *un = &r->units[u];
    int full = pages == full_mask(r);
    switch (un->state) {
    case UNIT_ABSENT:
        release_installing(r, &r->inst, u, pages);
        release_installing(r, &r->pf_inst, u, pages); /* install_mu held */
        if (full) {
            remote_drop(r, u);
            un->heat = 0; /* freed memory: whatever comes next is new */
        } else if (un->flags & UF_REMOTE) {
            int rc = remote_zero_pages(r, u, pages);
            if (rc)
                report("zeroing released pages in the pool", rc);
        }
        break;
    case UNIT_RESIDENT:
        if (full) {
            cache_free_slot(r, un->slot);
            remote_drop(r, u);
            un->state = UNIT_ABSENT;
            un->flags = 0;
            un->heat = 0;
            un->present = 0;
        } else {
            un->present &= ~pages;
            if (un->flags & UF_REMOTE)
                un->flags |= UF_DIRTY;
        }
        break;
    default: /* the writer holds it and finishes the release */
        if (full)
            un->flags |= UF_RELEASED;
        else
            un->zeroed |= pages;
        break;
    }
}

static void on_remove(struct fmem_region *r, uintptr_t start, uintptr_t end)
{
    uintptr_t b = (uintptr_t)r->base, e = b + r->size;
    for (unsigned i = 0; i < r->nzaps; i++)
        if (r->zaps[i].start == start && r->zaps[i].end == end) {
            r->zaps[i] = r->zaps[--r->nzaps]; /* the writer's own eviction */
            return;
        }
    if (start < b)
        start = b;
    if (end > e)
        end = e;
    if (start >= end)
        return;
    stat_add(&r->st.releases, 1);
    size_t off0 = start - b, off1 = end - b;
    uint32_t u0 = (uint32_t)(off0 >> r->unit_shift), u1 = (uint32_t)((off1 - 1) >> r->unit_shift);
    for (uint32_t u = u0; u <= u1; u++)
        release_unit(r, u, covered_pages(r, u, off0, off1));
    if (r->nfree && r->space_wanted)
        region_kick_handler(r);
}

/* Read what the userfaultfd has: removals are handled now, faults queued. */
static int read_msgs(struct fmem_region *r)
{
    struct uffd_msg msgs[READ_BATCH];
    /* a removal read lets its madvise go on: no copy of the prefetcher's
     * may be in flight until the removal is handled here */
    if (r->pf_on)
        pthread_mutex_lock(&r->install_mu);
    ssize_t got = read(r->uffd, msgs, sizeof msgs);
    int n = got > 0 ? (int)(got / (ssize_t)sizeof msgs[0]) : 0;
    int removals = 0;
    for (int i = 0; i < n; i++)
        removals |= msgs[i].event == UFFD_EVENT_REMOVE;
    if (removals) {
        pthread_mutex_lock(&r->lock);
        for (int i = 0; i < n; i++)
            if (msgs[i].event == UFFD_EVENT_REMOVE)
                on_remove(r, (uintptr_t)msgs[i].arg.remove.start,
                          (uintptr_t)msgs[i].arg.remove.end);
        pthread_mutex_unlock(&r->lock);
    }
    if (r->pf_on)
        pthread_mutex_unlock(&r->install_mu);
    if (n == 0)
        return 0;
    for (int i = 0; i < n; i++) {
        if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
            continue;
        struct fault_msg m = {
            .addr = (uintptr_t)msgs[i].arg.pagefault.address,
            .flags = (uint32_t)msgs[i].arg.pagefault.flags,
            .tid = msgs[i].arg.pagefault.feat.ptid,
        };
        stat_add(&r->st.faults, 1);
        stat_add(m.flags & UFFD_PAGEFAULT_FLAG_WP ? &r->st.wp_faults : &r->st.missing_faults, 1);
        fault_push(&r->deferred, &m);
    }
    return n;
}

/* An ioctl saw a removal event waiting: read it so that the madvise behind
 * it can go on, then let that thread run. */
static void let_events_through(struct fmem_region *r)
{
    if (read_msgs(r) == 0)
        sched_yield();
}

/* Where unit u's pool data can be read in place (shared-memory pools), or
 * NULL. */
static const char *pool_bytes(struct fmem_region *r, uint32_t u)
{
    if (!atomic_load_explicit(&r->direct, memory_order_relaxed))
        return NULL;
    uint64_t off;
    fmem_handle h = remote_handle(r, u, &off);
    void *p;
    if (fmem_map(r->pool, &h, &p) != 0) {
        atomic_store(&r->direct, 0); /* not this transport: fetch with fmem_read */
        return NULL;
    }
    return (const char *)p + off;
}

/* An isolated read fault (serve_fault sets r->hot_addr) gets its own page
 * mapped first, so that the program runs on while the rest of the unit is
 * copied: it reads a few KiB and faults elsewhere (a random gather), and
 * does not wait for the whole unit's copy. Returns the page's offset in
 * the run, or SIZE_MAX when there is none or it could not be mapped (the
 * run's copies then map it as usual). Only the handler's own installs. */
static size_t install_hot_first(struct fmem_region *r, int pf, char *dst, size_t total,
                                const char *const *src, int dirty)
{
    uintptr_t a = r->hot_addr;
    r->hot_addr = 0;
    if (pf || dirty || a < (uintptr_t)dst || a >= (uintptr_t)dst + total)
        return SIZE_MAX;
    size_t hot = (a - (uintptr_t)dst) & ~(size_t)(UFFD_PAGE - 1);
    const char *from = src[hot >> r->unit_shift] + (hot & (r->unit - 1));
    size_t got;
    if (uffd_copy(r->uffd, dst + hot, from, UFFD_PAGE, 1, 0, &got) != 0 || got != UFFD_PAGE)
        return SIZE_MAX;
    stat_add(&r->st.hot_first, 1);
    return hot;
}

/* Map the run of units [first, first+n) (ABSENT, slots taken): units with
 * pool data are copied straight from the pool's memory where the transport
 * allows it, else read into the staging buffer first; the others map the
 * zero page. Sources that follow each other in memory go in one
 * UFFDIO_COPY. `remote[i]`: unit first+i has pool data; `dirty`: map
 * writable and dirty (a write fault or a writing scan); `demand`: a
 * fault asked for it (else read-ahead). `pf`: the prefetcher calls, with
 * install_mu held; it lets go of it between copies (the handler reads
 * events meanwhile) and at the end, and wakes the whole run, as faults on
 * it were left to it (serve_fault). */
void region_install_run(struct fmem_region *r, int pf, uint32_t first, uint32_t n,
                        const uint8_t *remote, int dirty, int demand)
{
    struct install_ctx *ctx = pf ? &r->pf_inst : &r->inst;
    char *buf = pf ? r->pf_buf : r->buf;
    const char *src[n];
    uint64_t fetch = 0; /* units to read into buf, all at once */
    for (uint32_t i = 0; i < n; i++) {
        char *b = buf + ((size_t)i << r->unit_shift);
        if (!remote[i]) { /* never written back: zeros */
            src[i] = region_zero_page;
            stat_add(&r->st.zero_fills, 1);
            continue;
        }
        stat_add(demand ? &r->st.fetches : &r->st.prefetches, 1);
        if ((src[i] = pool_bytes(r, first + i)) != NULL) {
            stat_add(&r->st.bytes_fetched, r->unit);
            continue;
        }
        src[i] = b;
        fetch |= (uint64_t)1 << i;
    }
    remote_fetch_many(r, first, fetch, buf);
    *ctx = (struct install_ctx){.active = 1, .first = first, .n = n, .src = src, .buf = buf};
    char *dst = unit_addr(r, first);
    size_t done = 0, total = (size_t)n << r->unit_shift;
    size_t hot = install_hot_first(r, pf, dst, total, src, dirty);
    int existed = 0;
    while (done < total) {
        if (done == hot) { /* mapped first */
            done += UFFD_PAGE;
            continue;
        }
        /* the longest stretch from `done` whose sources are contiguous */
        uint32_t i = (uint32_t)(done >> r->unit_shift);
        size_t in = done & (r->unit - 1), len = r->unit - in;
        const char *from = src[i] + in;
        if (src[i] == region_zero_page) {
            /* zeros: the zero page covers FMEM_REGION_MAX_UNIT bytes, so
             * a run of zero units goes in one UFFDIO_COPY too */
            while (i + 1 < n && src[i + 1] == region_zero_page &&
                   len + r->unit <= FMEM_REGION_MAX_UNIT) {
                len += r->unit;
                i++;
            }
        } else {
            while (i + 1 < n && src[i + 1] == src[i] + r->unit) {
                len += r->unit;
                i++;
            }
        }
        if (hot > done && hot < done + len)
            len = hot - done; /* up to the page mapped first */
        size_t got;
        /* zeros go in writable (see the unit flags below) */
        int rc = uffd_copy(r->uffd, dst + done, from, len, !dirty && src[i] != region_zero_page,
                           0, &got);
        done += got;
        if (pf) { /* the handler may read events between two copies */
            pthread_mutex_unlock(&r->install_mu);
            if (rc == -EAGAIN && got == 0)
                sched_yield();
            pthread_mutex_lock(&r->install_mu);
        }
        if (rc == 0)
            continue;
        if (rc == -EEXIST) { /* a stray page, see release_unit: keep it */
            done += UFFD_PAGE;
            existed = 1;
        } else if (rc == -EAGAIN) {
            if (got == 0 && !pf)
                let_events_through(r);
        } else {
            report("UFFDIO_COPY", rc);
            break;
        }
    }
    /* a unit mapped writable but released whole meanwhile holds zeros
     * and has no chunk any more: protect it and keep it clean rather than
     * take pool space for it (more releases may come in while we do) */
    for (uint64_t done = 0, todo; dirty && (todo = ctx->released & ~done) != 0;) {
        unsigned i = (unsigned)__builtin_ctzll(todo);
        while (uffd_wp(r->uffd, unit_addr(r, first + i), r->unit, 1) == -EAGAIN) {
            if (!pf) {
                let_events_through(r);
                continue;
            }
            pthread_mutex_unlock(&r->install_mu);
            sched_yield();
            pthread_mutex_lock(&r->install_mu);
        }
        done |= (uint64_t)1 << i;
    }
    pthread_mutex_lock(&r->lock);
    uint64_t released = ctx->released;
    *ctx = (struct install_ctx){0};
    for (uint32_t u = first; u < first + n; u++) {
        struct region_unit *un = &r->units[u];
        un->state = UNIT_RESIDENT;
        un->present = full_mask(r);
        un->zeroed = 0;
        un->flags = (uint8_t)((un->flags & (UF_REMOTE | UF_WRITTEN)) | (demand ? UF_REF : UF_AHEAD));
        un->unreached = !demand;
        /* A unit never written is mapped writable, as dirty without pool
         * space: most fresh memory is written soon (a new array), often
         * after a read of it, and a write-protect fault each would cost a
         * round trip to this thread. The writer takes such a unit as
         * clean while it holds only zeros (settle_nochunk, flush_if_zero),
         * so one never written still costs no chunk and no write-back. */
        if (!remote[u - first])
            un->flags |= UF_DIRTY;
        if (dirty && !(released >> (u - first) & 1)) {
            un->flags |= UF_DIRTY | UF_REF;
            /* the unit a write fault hit takes its chunk now; others
             * leave it to the writer, which takes a unit still all zeros
             * as clean */
            if (demand && u == first)
                (void)remote_ref(r, u); /* on failure the writer tries again */
        }
    }
    if (r->nfree < r->reserve)
        region_kick_writer(r);
    pthread_mutex_unlock(&r->lock);
    if (pf)
        pthread_mutex_unlock(&r->install_mu);
    if (existed || pf)
        uffd_wake(r->uffd, dst, total);
}

/* Read-ahead. A demand fault on the unit a sequential scan reaches next
 * (the end of the previous window) opens a window of units after it that
 * doubles per such fault up to r->prefetch units. The window is mapped
 * in steps of r->buf_units between the handler's other work, demand faults
 * first, so the program is woken as soon as the first step is in and runs
 * on while the rest comes: it faults again only at the window's end, or
 * on a unit the stream has not reached yet (then it is served on demand
 * and the stream goes on after it). Other faults leave an open window be.
 * A window opened by a write fault maps its units writable and dirty: a
 * scan that writes would otherwise take a write-protect fault on every
 * unit. `span`: the units the fault itself mapped from u (fresh memory
 * is mapped a step at a time). */
static void readahead_note(struct fmem_region *r, uint32_t u, uint32_t span, int write)
{
    if (r->prefetch == 0)
        return;
    if (r->ra_next != NO_UNIT && u >= r->ra_next && u < r->ra_end) {
        r->ra_next = u + span; /* the program caught up with the stream */
        r->ra_reached = u;
        return;
    }
    /* the policy follows several streams: read ahead only for a fault
     * that continues one (region_policy.c) */
    int win = policy_stream_window(r);
    if (win == 0) {
        policy_stream_ahead(r, u + span);
        return;
    }
    uint64_t w = (uint64_t)win;
    if (win < 0) {
        if (u != r->seq_next) {
            if (r->ra_next == NO_UNIT) { /* not a scan (yet) */
                r->seq_run = 0;
                r->seq_next = u + span;
            }
            return;
        }
        if (r->seq_run < 31)
            r->seq_run++;
        w = (uint64_t)2 << r->seq_run;
    }
    if (w > r->prefetch)
        w = r->prefetch;
    uint64_t end = (uint64_t)u + span + w;
    if (end > r->nunits)
        end = r->nunits;
    r->ra_next = u + span;
    r->ra_reached = u;
    r->ra_end = (uint32_t)end;
    r->ra_write = write;
    r->ra_gen++;
    r->seq_next = r->ra_end;
    policy_stream_ahead(r, r->ra_end);
    if (r->ra_next >= r->ra_end)
        r->ra_next = r->ra_end = NO_UNIT;
}

/* Map the next step of the read-ahead window into free slots. Returns 1
 * while the window has more to map and slots are free for it. */
static int readahead_step(struct fmem_region *r)
{
    if (r->ra_next == NO_UNIT)
        return 0;
    if (r->pf_on && !r->ra_write) { /* the prefetcher maps it */
        pthread_mutex_lock(&r->lock);
        region_prefetch_sync(r);
        pthread_mutex_unlock(&r->lock);
        return 0;
    }
    uint8_t remote[r->buf_units];
    uint32_t first = r->ra_next, n = 0;
    pthread_mutex_lock(&r->lock);
    /* skipping units mapped, or claimed by the prefetcher (an earlier
     * window of its own) */
    while (first < r->ra_end && unit_claimed(r, first))
        first++;
    /* a writing stream maps its units writable and dirty, without a
     * write-protect fault each; read-ahead allocates no pool space for
     * them: the writer does when it evicts one that is not all zeros, so
     * units the program never wrote take none */
    int dirty = r->ra_write;
    uint64_t fresh_end = (uint64_t)r->ra_reached + (FRESH_AHEAD_BYTES >> r->unit_shift);
    for (; n < r->buf_units && first + n < r->ra_end && r->nfree > 1; n++) {
        struct region_unit *vn = &r->units[first + n];
        if (unit_claimed(r, first + n) || (unit_fresh(vn) && first + n >= fresh_end))
            break;
        remote[n] = !!(vn->flags & UF_REMOTE);
        cache_take_slot(r, first + n);
    }
    int waiting = n == 0 && first < r->ra_end;
    if (waiting && first >= fresh_end && unit_fresh(&r->units[first])) {
        /* fresh memory as far ahead as it goes: the stream's next fault
         * moves the limit on (FRESH_AHEAD_BYTES) */
        pthread_mutex_unlock(&r->lock);
        r->ra_next = first;
        return 0;
    }
    if (waiting && r->reserve == 0) {
        /* a cache as large as the region never evicts: read-ahead must
         * not make it (the writer would drop a whole window) */
        first = r->ra_end;
        waiting = 0;
    } else if (waiting) { /* no free slot: the writer wakes us when it made some */
        r->space_wanted = 1;
        region_kick_writer(r);
    }
    pthread_mutex_unlock(&r->lock);
    r->ra_next = first + n;
    if (n)
        region_install_run(r, 0, first, n, remote, dirty, 0);
    if (r->ra_next >= r->ra_end) {
        r->ra_next = r->ra_end = NO_UNIT;
        return 0;
    }
    return !waiting;
}

/* Map a zero page at `page` of cached (or evicting) unit u (lock held). */
static int zero_fill_page(struct fmem_region *r, uint32_t u, unsigned page, int account)
{
    char *a = unit_addr(r, u) + (size_t)page * UFFD_PAGE;
    size_t n;
    int rc = uffd_copy(r->uffd, a, region_zero_page, UFFD_PAGE, 1, 0, &n);
    if (rc == -EEXIST)
        return uffd_wake(r->uffd, a, UFFD_PAGE);
    if (rc == 0 && account) {
        struct region_unit *un = &r->units[u];
        un->present |= (uint64_t)1 << page;
        if (un->flags & UF_REMOTE)
            un->flags |= UF_DIRTY;
        stat_add(&r->st.zero_fills, 1);
    }
    return rc;
}

/* First write to a clean cached unit (lock held). */
static int make_writable(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    un->flags |= UF_DIRTY | UF_REF;
    (void)remote_ref(r, u); /* lazy allocation; on failure the writer retries */
    return uffd_wp(r->uffd, unit_addr(r, u), r->unit, 0);
}

/* Fresh units mapped along with a first touch: zeros cost no fetch, so a
 * run is longer than a read-ahead step (fewer faults for the program, as
 * fresh memory is mostly written through, e.g. a new array) while the
 * cache has slots free beyond the writer's reserve; otherwise one step,
 * so that zeros do not push out data (lock held). */
#define FRESH_RUN_MAX 64u /* install_ctx.released has a bit per unit */
static uint32_t fresh_run_max(const struct fmem_region *r)
{
    uint32_t most = (uint32_t)(FRESH_RUN_BYTES >> r->unit_shift);
    if (most > FRESH_RUN_MAX)
        most = FRESH_RUN_MAX;
    if (most < r->buf_units || r->nfree < r->reserve + most)
        most = r->buf_units;
    return most > FRESH_RUN_MAX ? FRESH_RUN_MAX : most;
}

/* The fetch size (region_policy.c): a demand read fault on unit u that
 * has pool data or was written brings in the absent units of the aligned
 * group of policy_fetch_units() units around u, as one run with u in it
 * (the units next to u that are absent and not being mapped by the
 * prefetcher, while slots are free). Takes their slots and fills rem[]
 * from index 0 (rem[0] is u's on entry); returns the run's first unit and
 * sets *n to its length (lock held). */
static uint32_t fetch_group(struct fmem_region *r, uint32_t u, uint32_t *n, uint8_t *rem)
{
    uint32_t g = policy_fetch_units(r);
    if (g <= 1)
        return u;
    uint32_t g0 = u & ~(g - 1), g1 = g0 + g > r->nunits ? r->nunits : g0 + g;
    uint32_t first = u, end = u + *n;
#define FREE_UNIT(v) (r->units[v].state == UNIT_ABSENT && r->ring[r->units[v].slot] != (v))
    while (first > g0 && r->nfree > 1 && FREE_UNIT(first - 1))
        cache_take_slot(r, --first);
    while (end < g1 && r->nfree > 1 && FREE_UNIT(end))
        cache_take_slot(r, end++);
#undef FREE_UNIT
    uint8_t remu = rem[0];
    for (uint32_t v = first; v < end; v++)
        rem[v - first] = v == u ? remu : (uint8_t)!!(r->units[v].flags & UF_REMOTE);
    *n = end - first;
    return first;
}

/* A demand read fault that continues a sequential stream (region_policy.c,
 * policy_stream_fetch: `g` units) brings in the absent units from u on
 * as one run, fetched side by side over the paths like a group (a scan
 * would otherwise wait for u's unit alone on one path while the others
 * idle, once per read-ahead window); its read-ahead window then starts
 * after the run. Takes their slots and fills rem[] (rem[0] is u's on
 * entry); returns the run's length (lock held). */
static uint32_t stream_run(struct fmem_region *r, uint32_t u, uint32_t g, uint8_t *rem)
{
    uint32_t end = u + 1, last = u + g > r->nunits ? r->nunits : u + g;
    while (end < last && r->nfree > 1 && r->units[end].state == UNIT_ABSENT &&
           r->ring[r->units[end].slot] != end) {
        cache_take_slot(r, end);
        rem[end - u] = (uint8_t)!!(r->units[end].flags & UF_REMOTE);
        end++;
    }
    return end - u;
}

/* After a group's install: the neighbours brought along were not asked
 * for, so they get no reference bit (CLOCK evicts them first if the
 * program never wants them). */
static void fetch_group_done(struct fmem_region *r, uint32_t u, uint32_t first, uint32_t n)
{
    pthread_mutex_lock(&r->lock);
    for (uint32_t v = first; v < first + n; v++)
        if (v != u && r->units[v].state == UNIT_RESIDENT && !(r->units[v].flags & UF_DIRTY))
            r->units[v].flags &= (uint8_t)~UF_REF;
    pthread_mutex_unlock(&r->lock);
}

/* After a stream run's install: the units after u are the start of the
 * stream's read-ahead, and marked so (as region_install_run marks what
 * it maps ahead): the writer's eviction windows leave them until the
 * program reaches them, as a scan with lookups in between (a join) takes
 * a while to. */
static void stream_run_done(struct fmem_region *r, uint32_t u, uint32_t n)
{
    pthread_mutex_lock(&r->lock);
    for (uint32_t v = u + 1; v < u + n; v++) {
        struct region_unit *vn = &r->units[v];
        if (vn->state == UNIT_RESIDENT && !(vn->flags & UF_DIRTY)) {
            vn->flags = (uint8_t)((vn->flags & ~UF_REF) | UF_AHEAD);
            vn->unreached = 1;
        }
    }
    pthread_mutex_unlock(&r->lock);
}

static int serve_fault(struct fmem_region *r, const struct fault_msg *m)
{
    uintptr_t a = m->addr & ~(uintptr_t)(UFFD_PAGE - 1), b = (uintptr_t)r->base;
    if (a < b || a >= b + r->size)
        return FAULT_DONE;
    size_t off = a - b;
    uint32_t u = (uint32_t)(off >> r->unit_shift);
    unsigned page = (unsigned)((off & (r->unit - 1)) / UFFD_PAGE);
    int wp = !!(m->flags & UFFD_PAGEFAULT_FLAG_WP);
    struct region_unit *un = &r->units[u];
    int rc = 0;
    pthread_mutex_lock(&r->lock);
    switch (un->state) {
    case UNIT_ABSENT: {
        if (r->ring[un->slot] == u) {
            /* the prefetcher is mapping it: it wakes the run when done */
            pthread_mutex_unlock(&r->lock);
            return FAULT_DONE;
        }
        if (r->pf_on)
            region_prefetch_sync(r); /* where the stream is (readahead_note) */
        if (r->nfree == 0) {
            r->space_wanted = 1;
            region_kick_writer(r);
            pthread_mutex_unlock(&r->lock);
            return FAULT_NOSPACE;
        }
        int remote = un->flags & UF_REMOTE;
        /* a write-protect fault here is stale or hit a stray page: map the
         * unit first, the retried write then faults again */
        int write = !wp && (m->flags & UFFD_PAGEFAULT_FLAG_WRITE);
        int fresh = unit_fresh(un);
        if (write) /* the chunk exists before the writer is woken */
            (void)remote_ref(r, u);
        if (remote)
            unit_refault(r, un);
        cache_take_slot(r, u);
        uint32_t n = 1, most = fresh_run_max(r);
        uint8_t rem[FRESH_RUN_MAX];
        rem[0] = (uint8_t)!!remote;
        /* first touch of fresh memory: the units after it that were never
         * written are mapped along (zeros; a write fault maps them
         * writable without pool space, see evict_batch), one fault per
         * run instead of one per unit */
        while (fresh && n < most && u + n < r->nunits && r->nfree > 1) {
            const struct region_unit *vn = &r->units[u + n];
            if (unit_claimed(r, u + n) || !unit_fresh(vn))
                break;
            cache_take_slot(r, u + n);
            rem[n++] = 0;
        }
        uint32_t first = u, sg = 0;
        int group = !fresh && !write;
        if (group && (sg = policy_stream_fetch(r, u)) > 1)
            n = stream_run(r, u, sg, rem);
        else if (group)
            first = fetch_group(r, u, &n, rem);
        /* a read of one unit off any scan: its page first */
        r->hot_addr = r->hot_first && n == 1 && !write && remote && u != r->seq_next &&
                              r->pages_per_unit > 1 ? a : 0;
        pthread_mutex_unlock(&r->lock);
        region_install_run(r, 0, first, n, rem, write, 1);
        if (group && n > 1 && sg > 1)
            stream_run_done(r, u, n);
        else if (group && n > 1)
            fetch_group_done(r, u, first, n);
        policy_note_fault(r, u, write);
        readahead_note(r, u, first + n - u, write);
        return FAULT_DONE;
    }
    case UNIT_EVICTING:
        if (!wp && (m->tid == (uint32_t)atomic_load(&r->writer_tid) ||
                    region_io_is_worker(&r->io, m->tid)))
            rc = zero_fill_page(r, u, page, 0); /* released under the writer */
        else
            un->flags |= UF_WAITERS;
        break;
    default:
        stat_add(&r->st.hits, 1);
        un->flags &= (uint8_t)~UF_AHEAD; /* the program reached it */
        un->unreached = 0;
        rc = wp ? make_writable(r, u) : zero_fill_page(r, u, page, 1);
        break;
    }
    pthread_mutex_unlock(&r->lock);
    if (rc == -EAGAIN)
        return FAULT_RETRY;
    if (rc)
        report("resolving a fault", rc);
    return FAULT_DONE;
}

/* Serve the queued faults; keep the ones that must wait. */
static void serve_deferred(struct fmem_region *r, int *retry, int *nospace)
{
    size_t keep = 0;
    *retry = *nospace = 0;
    for (size_t i = 0; i < r->deferred.n; i++) {
        struct fault_msg m = r->deferred.v[i];
        int rc = serve_fault(r, &m); /* may append to r->deferred */
        if (rc == FAULT_DONE)
            continue;
        *retry |= rc == FAULT_RETRY;
        *nospace |= rc == FAULT_NOSPACE;
        r->deferred.v[keep++] = m;
    }
    r->deferred.n = keep;
}

void *region_handler_main(void *arg)
{
    struct fmem_region *r = arg;
    int retry = 0, nospace = 0, ahead = 0, fresh = 0;
    region_thread_exempt(r);
    for (;;) {
        pthread_mutex_lock(&r->lock);
        if (r->fork_park_handler)
            region_park(r, &r->handler_parked, &r->fork_park_handler, &r->park_cv);
        int stop = r->stop_handler, space = r->nfree > 0;
        if (r->barrier_done != r->barrier_req) {
            r->barrier_done = r->barrier_req;
            pthread_cond_broadcast(&r->done_cv);
        }
        pthread_mutex_unlock(&r->lock);
        if (stop)
            break;
        /* faults waiting for a slot are woken by whoever frees one while
         * space_wanted is set: the writer (slots_freed) or a release here */
        int timeout = retry || (nospace && space) || ahead || fresh ? 0 : -1;
        int got = 0, n;
        struct pollfd p[2] = {{.fd = r->uffd, .events = POLLIN}, {.fd = r->evfd, .events = POLLIN}};
        int ready = region_handler_wait(r, p, timeout);
        if (ready < 0 && errno != EINTR) {
            report("poll", -errno);
            break;
        }
        if (p[1].revents & POLLIN) {
            uint64_t v;
            (void)!read(r->evfd, &v, sizeof v);
        }
        /* a short read has drained the queue: what comes later polls in */
        while ((n = read_msgs(r)) > 0) {
            got += n;
            if (n < READ_BATCH)
                break;
        }
        serve_deferred(r, &retry, &nospace);
        /* read-ahead only while no fault waits for a slot; faults it read
         * while mapping (see let_events_through) are served next round */
        size_t kept = r->deferred.n;
        ahead = nospace ? 0 : readahead_step(r);
        fresh = r->deferred.n > kept;
        if (retry && !got)
            sched_yield();
    }
    free(r->deferred.v);
    r->deferred = (struct fault_list){0};
    return NULL;
}
