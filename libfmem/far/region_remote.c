/* region_remote.c - the pool allocations behind a region.
 *
 * Granularity: one pool allocation ("chunk") per max(64 KiB, fetch unit) of
 * the region. 64 KiB is half a FineMem span, so every chunk is one
 * span-level CAS to allocate or free, and 64 KiB of fetch buffer per handle
 * keeps the chunk table at 32 B per 64 KiB (0.05 %). Allocating per 4 KiB
 * page would cost a pool round trip on nearly every first write; allocating
 * per 2 MiB section would pin up to 2 MiB of pool per sparsely written
 * area. A chunk is allocated on the first write to any of its units and
 * freed when the last written unit in it is released.
 *
 * A freshly allocated chunk holds someone else's old bytes: a unit is read
 * from the pool only once it has been written back (UF_REMOTE); until then
 * it reads as zeros.
 *
 * Paths: over a pool of several memory nodes the chunks are interleaved
 * (region_internal.h): unit u of a group of `ileave` chunks goes to chunk
 * u % ileave of the group, and each chunk is allocated on its own node, so
 * consecutive units sit on different nodes and a read-ahead step or an
 * eviction batch, run `io_width` transfers at a time (region_io.c), uses
 * every node's path at once. The policy (region_policy.c) picks the node of
 * each new chunk (in proportion to the links' bandwidth), an explicit
 * stripe width spreads them evenly over nodes 0..stripe-1; chunks already
 * placed stay. */
#include <stdio.h>
#include <string.h>

#include "pool_internal.h"
#include "region_internal.h"
#include "region_policy.h"
#include "transport.h"

char region_zero_page[FMEM_REGION_MAX_UNIT] __attribute__((aligned(4096)));

/* The chunk holding unit u and u's place in it. */
static uint32_t chunk_of(const struct fmem_region *r, uint32_t u, uint32_t *slot)
{
    uint32_t group = r->ileave * r->units_per_chunk, idx = u % group;
    *slot = idx / r->ileave;
    return u / group * r->ileave + idx % r->ileave;
}

uint32_t remote_chunk(const struct fmem_region *r, uint32_t u)
{
    uint32_t slot;
    return chunk_of(r, u, &slot);
}

fmem_handle remote_handle(struct fmem_region *r, uint32_t u, uint64_t *off)
{
    uint32_t slot, c = chunk_of(r, u, &slot);
    *off = (uint64_t)slot << r->unit_shift;
    return r->chunks[c].h;
}

static struct region_path *path_of(struct fmem_region *r, const fmem_handle *h)
{
    return &r->paths[h->node < r->npaths ? h->node : r->npaths - 1];
}

static void count_io(struct fmem_region *r, const fmem_handle *h, int write, uint64_t bytes,
                     uint64_t t0)
{
    struct region_path *p = path_of(r, h);
    stat_add(write ? &p->bytes_written : &p->bytes_fetched, bytes);
    stat_add(&p->ops, 1);
    stat_add(&p->busy_ns, tp_now_ns() - t0);
}

unsigned remote_io_width(const struct fmem_region *r)
{
    return atomic_load_explicit(&r->tune.io_width, memory_order_relaxed);
}

int remote_init(struct fmem_region *r, const fmem_region_config *cfg)
{
    fmem_pool *p = r->pool;
    unsigned nodes = p->nnodes; /* 0: a service pool, one path to us */
    r->npaths = nodes == 0 ? 1 : nodes > REGION_MAX_PATHS ? REGION_MAX_PATHS : nodes;
    r->ileave = policy_ileave(r);
    uint32_t group = r->ileave * r->units_per_chunk;
    r->nchunks = (r->nunits + group - 1) / group * r->ileave;
    /* an emulated link (bw=, rtt_ns=) is only paid through the transport:
     * reading the pool's memory in place would skip it */
    for (unsigned i = 0; i < nodes; i++)
        if (p->nodes[i]->tp->bw || p->nodes[i]->tp->rtt_ns)
            r->direct = 0;
    int rc = region_io_init(&r->io);
    if (rc == 0)
        rc = policy_init(r, cfg);
    return rc;
}

void remote_fini(struct fmem_region *r)
{
    region_io_stop(&r->io);
    policy_fini(r);
}

int remote_ref(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (un->flags & UF_WRITTEN)
        return 0;
    uint32_t slot, ci = chunk_of(r, u, &slot);
    struct region_chunk *c = &r->chunks[ci];
    if (c->users == 0) {
        pool_alloc_hint = r->pool->nnodes > 1 ? (int)policy_place(r, ci) : -1;
        int rc = fmem_alloc(r->pool, r->chunk, &c->h);
        pool_alloc_hint = -1;
        if (rc == 0)
            stat_add(&path_of(r, &c->h)->chunks, 1);
        if (rc) {
            stat_add(&r->st.alloc_failures, 1);
            return rc;
        }
        uint64_t now = atomic_fetch_add(&r->st.remote_bytes, r->chunk) + r->chunk;
        uint64_t peak = atomic_load(&r->st.remote_peak);
        while (now > peak && !atomic_compare_exchange_weak(&r->st.remote_peak, &peak, now))
            ;
    }
    c->users++;
    un->flags |= UF_WRITTEN;
    return 0;
}

void remote_drop(struct fmem_region *r, uint32_t u)
{
    struct region_unit *un = &r->units[u];
    if (!(un->flags & UF_WRITTEN))
        return;
    un->flags &= (uint8_t)~(UF_WRITTEN | UF_REMOTE);
    uint32_t slot;
    struct region_chunk *c = &r->chunks[chunk_of(r, u, &slot)];
    if (--c->users == 0) {
        atomic_fetch_sub(&path_of(r, &c->h)->chunks, 1);
        fmem_free(r->pool, &c->h);
        memset(&c->h, 0, sizeof c->h);
        atomic_fetch_sub(&r->st.remote_bytes, r->chunk);
    }
}

int remote_fetch(struct fmem_region *r, uint32_t u, void *dst)
{
    uint64_t off;
    fmem_handle h = remote_handle(r, u, &off);
    uint64_t t0 = tp_now_ns();
    int rc = fmem_read(r->pool, &h, off, dst, r->unit);
    if (rc == 0) {
        stat_add(&r->st.bytes_fetched, r->unit);
        count_io(r, &h, 0, r->unit, t0);
    }
    return rc;
}

struct fetch_job {
    struct fmem_region *r;
    char *buf;
    uint32_t first;
    uint8_t idx[64]; /* the units to read, as offsets from first */
};

static void fetch_one(void *arg, unsigned i)
{
    struct fetch_job *j = arg;
    uint32_t k = j->idx[i];
    char *dst = j->buf + ((size_t)k << j->r->unit_shift);
    int rc = remote_fetch(j->r, j->first + k, dst);
    if (rc) {
        static _Atomic int said;
        if (!atomic_exchange(&said, 1))
            fprintf(stderr, "fmem region: reading a unit from the pool failed (%s); continuing\n",
                    fmem_strerror(rc));
        memset(dst, 0, j->r->unit);
    }
}

void remote_fetch_many(struct fmem_region *r, uint32_t first, uint64_t which, char *buf)
{
    struct fetch_job j = {.r = r, .buf = buf, .first = first};
    unsigned n = 0;
    for (; which; which &= which - 1)
        j.idx[n++] = (uint8_t)__builtin_ctzll(which);
    region_io_run(&r->io, remote_io_width(r), n, fetch_one, &j);
}

/* Write runs of pages: from region memory where `from_region` has a bit,
 * zeros elsewhere within `pages`. */
static int write_runs(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t pages,
                      uint64_t from_region)
{
    uint64_t off;
    (void)remote_handle(r, u, &off);
    const char *ua = unit_addr(r, u);
    unsigned n = r->pages_per_unit;
    for (unsigned p = 0; p < n;) {
        if (!(pages >> p & 1)) {
            p++;
            continue;
        }
        int mapped = (int)(from_region >> p & 1);
        unsigned q = p + 1;
        while (q < n && (pages >> q & 1) && (int)(from_region >> q & 1) == mapped)
            q++;
        size_t at = (size_t)p * UFFD_PAGE, len = (size_t)(q - p) * UFFD_PAGE;
        uint64_t t0 = tp_now_ns();
        UNCHECKED_BEGIN();
        int rc = fmem_write(r->pool, &h, off + at, mapped ? ua + at : region_zero_page, len);
        UNCHECKED_END();
        if (rc)
            return rc;
        stat_add(&r->st.bytes_written, len);
        count_io(r, &h, 1, len, t0);
        p = q;
    }
    return 0;
}

/* Tier moves. Unit u is being written back (EVICTING or FLUSHING: its
 * faults wait, nobody reads its pool copy) and is the only written unit of
 * its chunk, which sits on the wrong tier. A new chunk is allocated on the
 * other tier and u written there while the old chunk stays in place; the
 * chunk's handle is switched under the lock, and only if u is still the
 * chunk's only user (another unit that took the chunk meanwhile was written
 * to the old one), then the old chunk is freed. Until the switch every
 * reader finds the old, complete chunk; after it the new, complete one. A
 * failed allocation or write on the new node frees it again and the unit
 * goes to its old chunk as without tiers. `to`: the tier to move to (1
 * slow, 0 fast), or -1 for the one the policy wants. Returns 1 when u was
 * written to its new chunk, 0 when the caller still has to write it to h. */
static int move_chunk(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t present, int to)
{
    uint32_t ci = remote_chunk(r, u);
    struct region_chunk *c = &r->chunks[ci];
    pthread_mutex_lock(&r->lock);
    int slow = policy_tier_slow(r, ci);
    if (slow >= 0 && to >= 0)
        slow = to;
    if (slow < 0 || c->users != 1 || c->h.addr != h.addr || c->h.node != h.node ||
        policy_node_slow(r, h.node) == slow) {
        pthread_mutex_unlock(&r->lock);
        return 0;
    }
    fmem_handle nh;
    pool_alloc_hint = (int)policy_place_tier(r, ci, slow);
    int rc = fmem_alloc(r->pool, r->chunk, &nh);
    pool_alloc_hint = -1;
    pthread_mutex_unlock(&r->lock);
    if (rc)
        return 0; /* no room there: stay */
    if (policy_node_slow(r, nh.node) != slow) { /* the tier is full */
        fmem_free(r->pool, &nh);
        return 0;
    }
    rc = write_runs(r, u, nh, full_mask(r), present);
    pthread_mutex_lock(&r->lock);
    int moved = rc == 0 && c->users == 1 && c->h.addr == h.addr && c->h.node == h.node;
    fmem_handle gone = moved ? h : nh;
    if (moved) {
        atomic_fetch_sub(&path_of(r, &h)->chunks, 1);
        stat_add(&path_of(r, &nh)->chunks, 1);
        c->h = nh;
        policy_tier_moved(r);
    }
    fmem_free(r->pool, &gone);
    pthread_mutex_unlock(&r->lock);
    return moved;
}

int remote_writeback(struct fmem_region *r, uint32_t u, fmem_handle h, uint64_t present)
{
    if (move_chunk(r, u, h, present, -1))
        return 0;
    int rc = write_runs(r, u, h, full_mask(r), present);
    /* a slow node that fails (a full disk): the unit goes to a fast one */
    if (rc && policy_node_slow(r, h.node) && move_chunk(r, u, h, present, 0))
        rc = 0;
    return rc;
}

int remote_zero_pages(struct fmem_region *r, uint32_t u, uint64_t pages)
{
    uint64_t off;
    fmem_handle h = remote_handle(r, u, &off);
    return write_runs(r, u, h, pages, 0);
}

void remote_free_all(struct fmem_region *r)
{
    for (uint32_t c = 0; c < r->nchunks; c++)
        if (r->chunks[c].users) {
            fmem_free(r->pool, &r->chunks[c].h);
            r->chunks[c].users = 0;
        }
    atomic_store(&r->st.remote_bytes, 0);
    for (unsigned i = 0; i < r->npaths; i++)
        atomic_store(&r->paths[i].chunks, 0);
}

int fmem_region_paths(fmem_region *r, fmem_region_path_t *out, unsigned max)
{
    if (!r || (!out && max))
        return FMEM_EINVAL;
    for (unsigned i = 0; i < r->npaths && i < max; i++) {
        const struct region_path *p = &r->paths[i];
        fmem_region_path_t *o = &out[i];
        memset(o, 0, sizeof *o);
        o->node = i;
        o->placing = r->pool->nnodes > 1 ? policy_path_placing(r, i) : 1;
        o->bytes_fetched = atomic_load(&p->bytes_fetched);
        o->bytes_written = atomic_load(&p->bytes_written);
        o->ops = atomic_load(&p->ops);
        o->busy_ns = atomic_load(&p->busy_ns);
        o->chunks = atomic_load(&p->chunks);
        o->bandwidth = o->busy_ns ? (uint64_t)((unsigned __int128)(o->bytes_fetched + o->bytes_written) *
                                               1000000000u / o->busy_ns)
                                  : 0;
    }
    return (int)r->npaths;
}

void remote_fill_stats(struct fmem_region *r, fmem_region_stats_t *out)
{
    struct policy_figures f;
    policy_figures(r, &f);
    out->paths = r->npaths;
    out->stripe_width = r->pool->nnodes > 1 ? atomic_load(&r->tune.stripe) : 1;
    out->io_width = atomic_load(&r->tune.io_width);
    out->prefetch_units = atomic_load(&r->tune.prefetch);
    out->fault_rate = f.fault_rate;
    out->seq_pct = f.seq_pct;
    out->write_pct = f.write_pct;
    out->refault_pct = f.refault_pct;
    out->refault_dist = f.refault_dist;
    out->tier_moves = f.tier_moves;
    out->fetch_units = atomic_load(&r->tune.fetch);
    out->fetch_max = policy_fetch_max(r);
}
