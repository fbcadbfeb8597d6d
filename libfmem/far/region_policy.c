/* region_policy.c - per-region tuning from what the fault handler sees.
 *
 * The handler reports every missing fault on an absent unit. Over windows
 * of POLICY_WINDOW such faults the policy measures
 *   - the fault rate (faults per second),
 *   - the sequential fraction: faults a little ahead of the previous one
 *     (within the read-ahead depth plus one unit; a scan with read-ahead
 *     faults once per window, a scan without faults on the next unit),
 *   - the write fraction,
 *   - re-faults: faults on a unit that faulted in the last RECENT faults,
 *     and their mean distance in faults (a unit evicted and wanted again
 *     soon: the cache is too small for what read-ahead brings in),
 * and picks, for each parameter not fixed explicitly:
 *   - read-ahead depth: the full depth (a quarter of the cache) when at
 *     least half of the faults are sequential; an eighth of it when at
 *     least one in eight is; none below that. (The re-fault figures are
 *     measured and reported but not used: in a random gather over a small
 *     cache most faults re-fault whatever the read-ahead does.)
 *   - I/O width: two transfers per path (four on a single path) when
 *     there is read-ahead to keep the paths busy with, one per path
 *     otherwise (demand faults come one unit at a time; the width then
 *     serves eviction batches);
 *   - stripe width: the paths whose links carry at least a quarter of the
 *     fastest link's bandwidth (a slow path would hold up every step that
 *     has units on it); placement uses nodes 0..stripe-1, so the first
 *     slow node ends the stripe.
 * The unit size is fixed at creation and not changed.
 * An explicit setting (cfg->prefetch, fmem_region_tune) always wins. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"
#include "region_internal.h"
#include "region_policy.h"
#include "transport.h"

#define POLICY_WINDOW 128
#define RECENT 1024 /* units remembered for re-fault distances (hashed) */

struct region_policy {
    /* handler-private */
    uint64_t nfaults, win_start_ns;
    uint32_t last_u, win_n, win_seq, win_write, win_refault;
    uint64_t win_dist;
    uint32_t unit_of[RECENT];
    uint64_t stamp[RECENT]; /* fault number + 1; 0: empty */
    unsigned depth_max;     /* full read-ahead depth */
    /* published */
    _Atomic uint64_t fault_rate, decisions;
    _Atomic uint32_t seq_pct, write_pct, refault_pct, refault_dist;
};

static unsigned fixed(const struct fmem_region *r, unsigned bit)
{
    return atomic_load_explicit(&r->tune.fixed, memory_order_relaxed) & bit;
}

static unsigned pick_stripe(const struct fmem_region *r);

static unsigned default_io_width(const struct fmem_region *r)
{
    /* a few transfers queued per path even on one: a request waiting to be
     * posted leaves its link idle */
    unsigned w = r->npaths < 2 ? 4 : 2 * r->npaths;
    return w > REGION_IO_MAX ? REGION_IO_MAX : w;
}

int policy_init(struct fmem_region *r, const fmem_region_config *cfg)
{
    struct region_policy *p = calloc(1, sizeof *p);
    if (!p)
        return FMEM_ENOMEM;
    p->last_u = NO_UNIT;
    p->depth_max = r->cap / 4 ? r->cap / 4 : 1;
    r->policy = p;
    atomic_store(&r->tune.prefetch, r->prefetch);
    atomic_store(&r->tune.stripe, pick_stripe(r));
    atomic_store(&r->tune.io_width, default_io_width(r));
    atomic_store(&r->tune.fixed, cfg->prefetch ? FMEM_REGION_TUNE_PREFETCH : 0u);
    return 0;
}

void policy_fini(struct fmem_region *r)
{
    free(r->policy);
    r->policy = NULL;
}

static uint32_t pct(uint32_t a, uint32_t b)
{
    return b ? (uint32_t)((uint64_t)a * 100 / b) : 0;
}

/* Paths fast enough to stripe over: those whose link carries at least a
 * quarter of the fastest link's bandwidth (an unlimited link is the
 * fastest). From the links' declared bandwidth, not from timing the
 * transfers: on a busy machine a transfer's time is mostly how late its
 * thread was woken, which would narrow the stripe at random. */
static unsigned pick_stripe(const struct fmem_region *r)
{
    const fmem_pool *pool = r->pool;
    if (pool->nnodes < 2)
        return r->npaths;
    uint64_t bw[REGION_MAX_PATHS], best = 0;
    for (unsigned i = 0; i < r->npaths; i++) {
        bw[i] = pool->nodes[i]->tp->bw ? pool->nodes[i]->tp->bw : UINT64_MAX;
        if (bw[i] > best)
            best = bw[i];
    }
    /* placement takes nodes 0..stripe-1: stop at the first slow one */
    unsigned n = 0;
    while (n < r->npaths && bw[n] >= best / 4)
        n++;
    return n ? n : 1;
}

static void decide(struct fmem_region *r, struct region_policy *p, uint64_t now)
{
    uint32_t n = p->win_n;
    uint64_t dt = now - p->win_start_ns;
    atomic_store(&p->fault_rate, dt ? (uint64_t)n * 1000000000u / dt : 0);
    uint32_t seq = pct(p->win_seq, n), ref = pct(p->win_refault, n);
    atomic_store(&p->seq_pct, seq);
    atomic_store(&p->write_pct, pct(p->win_write, n));
    atomic_store(&p->refault_pct, ref);
    atomic_store(&p->refault_dist, p->win_refault ? (uint32_t)(p->win_dist / p->win_refault) : 0);
    atomic_fetch_add(&p->decisions, 1);

    unsigned depth = seq >= 50 ? p->depth_max : seq >= 12 ? p->depth_max / 8 : 0;
    if (seq >= 12 && depth == 0)
        depth = 1;
    if (!fixed(r, FMEM_REGION_TUNE_PREFETCH))
        atomic_store(&r->tune.prefetch, depth);
    if (!fixed(r, FMEM_REGION_TUNE_IO_WIDTH)) {
        unsigned w = atomic_load(&r->tune.prefetch) ? default_io_width(r) : r->npaths;
        atomic_store(&r->tune.io_width, w);
    }
    if (!fixed(r, FMEM_REGION_TUNE_STRIPE))
        atomic_store(&r->tune.stripe, pick_stripe(r));
    p->win_n = p->win_seq = p->win_write = p->win_refault = 0;
    p->win_dist = 0;
    p->win_start_ns = now;
}

void policy_note_fault(struct fmem_region *r, uint32_t u, int write)
{
    struct region_policy *p = r->policy;
    if (!p)
        return;
    if (p->win_n == 0 && p->win_start_ns == 0)
        p->win_start_ns = tp_now_ns();
    uint64_t reach = (uint64_t)r->prefetch + 1;
    if (p->last_u != NO_UNIT && u > p->last_u && u - p->last_u <= reach)
        p->win_seq++;
    p->win_write += !!write;
    unsigned h = (unsigned)((u * 2654435761u) >> 22) % RECENT;
    if (p->stamp[h] && p->unit_of[h] == u) {
        p->win_refault++;
        p->win_dist += p->nfaults + 1 - p->stamp[h];
    }
    p->unit_of[h] = u;
    p->stamp[h] = ++p->nfaults;
    p->last_u = u;
    if (++p->win_n >= POLICY_WINDOW)
        decide(r, p, tp_now_ns());
    /* the read-ahead depth is the handler's own: apply the one in force */
    unsigned depth = atomic_load_explicit(&r->tune.prefetch, memory_order_relaxed);
    r->prefetch = depth > r->cap / 4 ? r->cap / 4 : depth;
}

void policy_figures(struct fmem_region *r, struct policy_figures *out)
{
    memset(out, 0, sizeof *out);
    struct region_policy *p = r->policy;
    if (!p)
        return;
    out->fault_rate = atomic_load(&p->fault_rate);
    out->seq_pct = atomic_load(&p->seq_pct);
    out->write_pct = atomic_load(&p->write_pct);
    out->refault_pct = atomic_load(&p->refault_pct);
    out->refault_dist = atomic_load(&p->refault_dist);
    out->decisions = atomic_load(&p->decisions);
}

/* ---- public ------------------------------------------------------------- */

int fmem_region_tune(fmem_region *r, const fmem_region_tuning *t)
{
    if (!r || !t || (t->set & ~(unsigned)FMEM_REGION_TUNE_ALL))
        return FMEM_EINVAL;
    if ((t->set & FMEM_REGION_TUNE_STRIPE) && (t->stripe == 0 || t->stripe > r->npaths))
        return FMEM_EINVAL;
    if ((t->set & FMEM_REGION_TUNE_IO_WIDTH) && (t->io_width == 0 || t->io_width > REGION_IO_MAX))
        return FMEM_EINVAL;
    if ((t->set & FMEM_REGION_TUNE_PREFETCH) && t->prefetch > r->cap / 4)
        return FMEM_EINVAL;
    /* fix first, then set: the policy (handler) no longer overwrites */
    atomic_store(&r->tune.fixed, t->set);
    if (t->set & FMEM_REGION_TUNE_PREFETCH)
        atomic_store(&r->tune.prefetch, t->prefetch);
    if (t->set & FMEM_REGION_TUNE_STRIPE)
        atomic_store(&r->tune.stripe, t->stripe);
    if (t->set & FMEM_REGION_TUNE_IO_WIDTH)
        atomic_store(&r->tune.io_width, t->io_width);
    return 0;
}

int fmem_region_tuning_get(fmem_region *r, fmem_region_tuning *out)
{
    if (!r || !out)
        return FMEM_EINVAL;
    out->set = atomic_load(&r->tune.fixed);
    out->prefetch = atomic_load(&r->tune.prefetch);
    out->stripe = atomic_load(&r->tune.stripe);
    out->io_width = atomic_load(&r->tune.io_width);
    out->paths = r->npaths;
    return 0;
}
