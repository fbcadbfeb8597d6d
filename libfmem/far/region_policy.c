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
 *   - read-ahead per stream (stream_note): up to NSTREAMS sequential
 *     streams are followed, each with its own window and depth (at most
 *     a quarter of the cache); a fault that continues no stream reads
 *     nothing ahead. (The re-fault figures are measured and reported but
 *     not used: in a random gather over a small cache most faults
 *     re-fault whatever the read-ahead does.)
 *   - I/O width: two transfers per path (four on a single path) when
 *     there is read-ahead to keep the paths busy with, one per path
 *     otherwise (demand faults come one unit at a time; the width then
 *     serves eviction batches);
 *   - placement over the paths (policy_place): new chunks go to every
 *     path in proportion to its link's bandwidth, so a scan keeps all
 *     links busy for the same time and their bandwidths add up, where an
 *     even stripe is held up by its slowest path; a path slower than the
 *     fastest gets at most the share that keeps the mean time of a single
 *     demand fetch (a random gather) within PLACE_PENALTY of the fastest
 *     paths' (see place_build);
 *   - tiers: in a pool of fast nodes (memory: mem:, shm:, file:) and slow
 *     ones (ssd:, zmem:: their data is reached through the transport
 *     alone), a chunk is warm when its last fault came within TIER_TURNS
 *     cache turnovers (cap faults each) of the one before: it was evicted
 *     and wanted back soon. Every other chunk is cold, also one that
 *     faulted once (written once, or read once). Only faults count: a
 *     unit hot enough to stay cached keeps its last verdict. A new chunk
 *     goes to a node of the tier its history asks for; at the write-back
 *     of a dirty unit a chunk on the wrong tier moves (region_remote.c);
 *   - the fetch size (fetch_note): a demand read fault brings in the
 *     aligned group of `fetch` units around it (a power of two; the unit
 *     stays the granule of the cache). Faults that continue no stream
 *     are measured: a pair is a fault whose buddy group (the other half
 *     of the aligned group twice the size) was fetched within the
 *     fault's lifetime in the cache (cap / (2 * fetch) faults): had the
 *     fetch been twice as large, that fault would not have happened.
 *     When at least GROW_PCT % of FETCH_WINDOW measured faults are pairs
 *     the fetch size doubles (GROW_PCT_SIDE % while the doubled group
 *     still fits the paths new chunks go to: its transfers run side by
 *     side). To see whether the neighbours a fetch
 *     brings are used (a read of a mapped page is invisible to the
 *     handler), every PROBE_EVERY-th measured fault fetches only the half
 *     of its group around the fault (a probe); a fault on the other half
 *     within its lifetime means the whole group would have been used. A
 *     probe whose other half is cached already is not counted: no fault
 *     can follow it there.
 *     When fewer than SHRINK_PCT % (SHRINK_PCT_SIDE % while the group fits
 *     the paths) of PROBE_WINDOW probes are followed so, the size halves: fetched neighbours go unused (a random
 *     gather, or waste). Write faults and first touches of fresh memory
 *     bring in their own run as before and are not measured.
 *   - stream runs (policy_stream_fetch): a read fault that continues a
 *     stream which reads ahead brings in one unit per placing path from
 *     it on, fetched side by side, and its window starts after them: a
 *     scan faults once per window, and that fault's single unit on one
 *     path left the other links idle before the window's step began.
 *   - drop-behind (stream_drop_behind): the units a confirmed stream went
 *     past are listed for the writer, which takes them before any CLOCK
 *     victim: a scan evicts its own used units rather than what else is
 *     cached (a join's lookup table). Those of a stream longer than the
 *     cache are evicted at once, so its windows find free slots without
 *     waiting for the writer.
 *     (A window used to find 16-32 slots free, take them, and wait for
 *     the writer's next batch for the rest: the scan restarted a few of
 *     its windows per pass at 4-8 units.)
 * The unit size is fixed at creation and not changed.
 * An explicit setting (cfg->prefetch, an explicit cfg->fetch_unit: a
 * fetch size of one unit, fmem_region_tune) always wins; an
 * explicit stripe width without an explicit tier turns tiers off. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"
#include "region_internal.h"
#include "region_policy.h"
#include "transport.h"

#define POLICY_WINDOW 128
#define RECENT 1024 /* units remembered for re-fault distances (hashed) */
#define PLACE_MAX 256 /* chunks per interleave group, at most */
#define PLACE_PENALTY 0.05 /* most a random fetch may slow down on average */
#define TIER_TURNS 8 /* warm: faulted again within this many cache turnovers */

/* A sequential stream the handler follows: its last demand fault and the
 * first unit it has not brought in yet (the end of its read-ahead). */
struct stream {
    uint32_t last, next;
    unsigned run;  /* demand faults that continued it in a row */
    unsigned depth; /* most units it reads ahead at once */
    unsigned window; /* units its last window read ahead */
    int resume;      /* it lost read-ahead: its next window is its depth */
    uint64_t used; /* fault number when it last continued (or began) */
    uint32_t first;  /* where it began */
    uint32_t behind; /* first unit it went past not yet dropped behind */
};
/* continuations before a stream reads ahead: a random fault lands on a
 * candidate's next unit now and then, two in a row hardly ever */
#define STREAM_CONFIRM 2
#define NSTREAMS 8
#define STREAM_KEEP 1024 /* faults an established stream is kept while idle */

/* fetch size (see the head comment) */
#define GROUPS 512        /* recent fetched groups remembered (hashed) */
#define FETCH_WINDOW 64   /* measured faults per decision to grow */
/* a probe every 4th fault, a decision per 8 probes: a random gather
 * that inherited a larger fetch size (from a scan, a run of records) is
 * back at one unit after 64 faults from 4 units, 96 from 16 (with a probe
 * every 8th fault decided per 16 it took 4 times as many) */
#define PROBE_WINDOW 8    /* probes per decision to shrink */
#define PROBE_EVERY 4     /* measured faults per probe, at a fetch size > 1 */
/* % pairs that double the fetch size, and % probes followed on their
 * other half below which it halves: while the group fits the paths new
 * chunks go to (consecutive units are on different paths) its transfers
 * run side by side and a larger fetch costs a demand fault hardly any
 * time, so a quarter of the faults saved pays; beyond, each doubling
 * doubles the transfer time and must save half the faults */
#define GROW_PCT_SIDE 25
#define SHRINK_PCT_SIDE 10
#define GROW_PCT 50
#define SHRINK_PCT 30

struct group_seen {
    uint64_t key;   /* level << 32 | group index, + 1; 0: empty */
    uint64_t stamp; /* fault number of the fetch */
};

struct region_policy {
    /* handler-private */
    struct stream streams[NSTREAMS];
    int cur;               /* stream of the last fault */
    unsigned window;       /* units the last fault reads ahead (its stream's) */
    uint64_t lost;         /* read-ahead found gone before use */
    uint64_t nfaults, win_start_ns;
    uint32_t last_u, win_n, win_seq, win_write, win_refault;
    uint64_t win_dist;
    uint32_t unit_of[RECENT];
    uint64_t stamp[RECENT]; /* fault number + 1; 0: empty */
    unsigned depth_max;     /* full read-ahead depth */
    /* fetch size: the fault being served (units fetched, 0: not
     * measured; a probe?), recent fetches and probes, the counts */
    unsigned fetch_now, probe_now, probe_tick;
    uint32_t f_meas, f_pairs, f_probes, f_probe_used;
    struct group_seen seen[GROUPS], probes[GROUPS];
    /* placement (set at creation, read by whoever allocates chunks) */
    uint8_t place[PLACE_MAX]; /* chunk c of a group goes to place[c % ileave] */
    unsigned share[REGION_MAX_PATHS]; /* entries of place[] per path */
    /* tiers: the nodes of each (tier_node[t][0..ntier[t]-1]), and per
     * chunk the fault numbers of its last fault and the distance to the
     * one before (written by the handler, read by whoever places chunks) */
    uint8_t slow[REGION_MAX_PATHS], tier_node[2][REGION_MAX_PATHS];
    unsigned ntier[2];
    _Atomic unsigned tier; /* FMEM_REGION_TIER_* */
    _Atomic uint64_t *last_fault, *dist, moves;
    /* published */
    _Atomic uint64_t fault_rate, decisions, fetch_changes;
    _Atomic uint32_t seq_pct, write_pct, refault_pct, refault_dist;
};

static unsigned fixed(const struct fmem_region *r, unsigned bit)
{
    return atomic_load_explicit(&r->tune.fixed, memory_order_relaxed) & bit;
}

static void place_build(const struct fmem_region *r, struct region_policy *p);
static unsigned placing_paths(const struct fmem_region *r, const struct region_policy *p);

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
    place_build(r, p);
    for (unsigned i = 0; r->pool->nnodes > 1 && i < r->npaths; i++) {
        p->slow[i] = r->pool->nodes[i]->tp->data_apart;
        p->tier_node[p->slow[i]][p->ntier[p->slow[i]]++] = (uint8_t)i;
    }
    if (p->ntier[0] && p->ntier[1]) {
        p->last_fault = calloc(r->nchunks, sizeof *p->last_fault);
        p->dist = calloc(r->nchunks, sizeof *p->dist);
        if (!p->last_fault || !p->dist) {
            free(p->last_fault);
            free(p->dist);
            free(p);
            return FMEM_ENOMEM;
        }
    }
    r->policy = p;
    atomic_store(&r->tune.prefetch, r->prefetch);
    atomic_store(&r->tune.stripe, placing_paths(r, p));
    atomic_store(&r->tune.io_width, default_io_width(r));
    atomic_store(&r->tune.fetch, 1u);
    /* an explicit unit is what a fault brings in: the fetch size is fixed */
    atomic_store(&r->tune.fixed, (cfg->prefetch ? FMEM_REGION_TUNE_PREFETCH : 0u) |
                                     (cfg->fetch_unit ? FMEM_REGION_TUNE_FETCH : 0u));
    return 0;
}

void policy_fini(struct fmem_region *r)
{
    if (r->policy) {
        free(r->policy->last_fault);
        free(r->policy->dist);
    }
    free(r->policy);
    r->policy = NULL;
}

static uint32_t pct(uint32_t a, uint32_t b)
{
    return b ? (uint32_t)((uint64_t)a * 100 / b) : 0;
}

/* The link bandwidth of path i: the declared one (bw=), UINT64_MAX for a
 * path without a limit. Declared rather than timed: on a busy machine a
 * transfer's time is mostly how late its thread was woken. */
static uint64_t path_bw(const struct fmem_region *r, unsigned i)
{
    uint64_t bw = r->pool->nodes[i]->tp->bw;
    return bw ? bw : UINT64_MAX;
}

/* Shares of the paths in new chunks. A scan moves share_i of the data over
 * path i in share_i / bw_i: proportional shares make every link take the
 * same time, the most any placement can get from them. A single demand
 * fetch (a random gather, one unit at a time) instead waits for its own
 * path: a path k times slower than the fastest costs (k - 1) times its
 * share in mean fetch time, so each of the nslow slower paths is held to
 * PLACE_PENALTY / nslow / (k - 1); the fastest paths share the rest
 * equally. The shares become small integer weights (w[], their sum
 * returned); all equal when the links are. */
static unsigned place_weights(const struct fmem_region *r, unsigned w[REGION_MAX_PATHS])
{
    unsigned n = r->npaths;
    for (unsigned i = 0; i < REGION_MAX_PATHS; i++)
        w[i] = i < n;
    if (r->pool->nnodes < 2 || n < 2)
        return n;
    uint64_t best = 0;
    long double sum = 0;
    unsigned nslow = 0, nfast = 0;
    for (unsigned i = 0; i < n; i++)
        best = path_bw(r, i) > best ? path_bw(r, i) : best;
    for (unsigned i = 0; i < n; i++) {
        nslow += path_bw(r, i) < best;
        nfast += path_bw(r, i) == best;
        if (path_bw(r, i) != UINT64_MAX)
            sum += (long double)path_bw(r, i);
    }
    if (nslow == 0)
        return n;
    double f[REGION_MAX_PATHS], slow_total = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t bw = path_bw(r, i);
        f[i] = 0;
        if (bw == best || best == UINT64_MAX) /* beside an unlimited path a limited one gets none */
            continue;
        double prop = (double)((long double)bw / sum), k = (double)best / (double)bw;
        double cap = PLACE_PENALTY / nslow / (k - 1);
        f[i] = prop < cap ? prop : cap;
        slow_total += f[i];
    }
    double ffast = (1 - slow_total) / nfast;
    /* the smallest weights (fastest path F = 1..8) within 3 % of the shares */
    unsigned best_sum = 0;
    double best_err = 2;
    for (unsigned F = 1; F <= 8; F++) {
        unsigned t[REGION_MAX_PATHS], tot = 0;
        for (unsigned i = 0; i < n; i++) {
            double fi = path_bw(r, i) == best ? ffast : f[i];
            t[i] = (unsigned)(fi / ffast * F + 0.5);
            tot += t[i];
        }
        double err = 0;
        for (unsigned i = 0; i < n; i++) {
            double fi = path_bw(r, i) == best ? ffast : f[i], d = (double)t[i] / tot - fi;
            err += d < 0 ? -d : d;
        }
        if (err < best_err - 1e-9) {
            best_err = err;
            best_sum = tot;
            memcpy(w, t, n * sizeof *t);
        }
        if (err < 0.03)
            break;
    }
    return best_sum;
}

static unsigned lcm_upto(unsigned n)
{
    unsigned l = 1;
    for (unsigned k = 2; k <= n; k++) {
        unsigned a = l, b = k;
        while (b) {
            unsigned t = a % b;
            a = b;
            b = t;
        }
        l = l / a * k;
    }
    return l;
}

unsigned policy_ileave(const struct fmem_region *r)
{
    unsigned w[REGION_MAX_PATHS], sum = place_weights(r, w), n = r->npaths;
    if (sum == n) /* equal links (or one path): one chunk per path */
        return n;
    /* a group holds the weights' cycle lcm(1..paths) times over, so that
     * an explicit stripe of any width still spreads evenly */
    unsigned l = lcm_upto(n);
    if ((uint64_t)l * sum > PLACE_MAX)
        l = n * sum <= PLACE_MAX ? n : 1;
    return l * sum;
}

/* place[] for the chunks of a group: the weights' cycle repeated, each
 * cycle spread by smooth weighted round robin so that consecutive chunks
 * (which hold consecutive units) land on different paths. */
static void place_build(const struct fmem_region *r, struct region_policy *p)
{
    unsigned w[REGION_MAX_PATHS], sum = place_weights(r, w), n = r->npaths;
    memset(p->share, 0, sizeof p->share);
    long cur[REGION_MAX_PATHS] = {0};
    for (unsigned e = 0; e < r->ileave && e < PLACE_MAX; e++) {
        unsigned pick = 0;
        for (unsigned i = 0; i < n; i++) {
            cur[i] += w[i];
            if (cur[i] > cur[pick])
                pick = i;
        }
        cur[pick] -= sum;
        p->place[e] = (uint8_t)pick;
        p->share[pick]++;
    }
}

static unsigned placing_paths(const struct fmem_region *r, const struct region_policy *p)
{
    unsigned k = 0;
    for (unsigned i = 0; i < r->npaths; i++)
        k += p->share[i] > 0;
    return k;
}

/* ---- tiers ---- */

static unsigned tier_mode(const struct fmem_region *r)
{
    const struct region_policy *p = r->policy;
    if (!p || !p->last_fault)
        return FMEM_REGION_TIER_NONE; /* not both kinds of node */
    if (!fixed(r, FMEM_REGION_TUNE_TIER) && fixed(r, FMEM_REGION_TUNE_STRIPE))
        return FMEM_REGION_TIER_NONE; /* an explicit stripe places alone */
    return atomic_load_explicit(&p->tier, memory_order_relaxed);
}

int policy_tier_slow(const struct fmem_region *r, uint32_t chunk)
{
    const struct region_policy *p = r->policy;
    switch (tier_mode(r)) {
    case FMEM_REGION_TIER_FAST:
        return 0;
    case FMEM_REGION_TIER_SLOW:
        return 1;
    case FMEM_REGION_TIER_AUTO: {
        uint64_t turn = (uint64_t)TIER_TURNS * r->cap;
        uint64_t d = atomic_load_explicit(&p->dist[chunk], memory_order_relaxed);
        return !(d && d <= turn);
    }
    default:
        return -1;
    }
}

void policy_tier_moved(struct fmem_region *r)
{
    if (r->policy)
        atomic_fetch_add(&r->policy->moves, 1);
}

int policy_node_slow(const struct fmem_region *r, unsigned node)
{
    return r->policy && node < REGION_MAX_PATHS ? r->policy->slow[node] : 0;
}

unsigned policy_place_tier(const struct fmem_region *r, uint32_t chunk, int slow)
{
    const struct region_policy *p = r->policy;
    unsigned pick = p->place[chunk % r->ileave % PLACE_MAX];
    if (p->slow[pick] == slow)
        return pick;
    return p->tier_node[slow][chunk % p->ntier[slow]];
}

unsigned policy_place(const struct fmem_region *r, uint32_t chunk)
{
    int slow = policy_tier_slow(r, chunk);
    if (slow >= 0)
        return policy_place_tier(r, chunk, slow);
    unsigned stripe = atomic_load_explicit(&r->tune.stripe, memory_order_relaxed);
    if (fixed(r, FMEM_REGION_TUNE_STRIPE) || !r->policy)
        return chunk % r->ileave % (stripe ? stripe : 1);
    return r->policy->place[chunk % r->ileave % PLACE_MAX];
}

int policy_path_placing(const struct fmem_region *r, unsigned path)
{
    if (fixed(r, FMEM_REGION_TUNE_STRIPE) || !r->policy)
        return path < atomic_load(&r->tune.stripe);
    return path < REGION_MAX_PATHS && r->policy->share[path] > 0;
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

    /* the depth stays full: only faults that continue a stream read
     * ahead, so the depth costs random faults nothing */
    if (!fixed(r, FMEM_REGION_TUNE_PREFETCH))
        atomic_store(&r->tune.prefetch, p->depth_max);
    if (!fixed(r, FMEM_REGION_TUNE_IO_WIDTH)) {
        /* streams read ahead: keep the paths busy with them */
        int ahead = fixed(r, FMEM_REGION_TUNE_PREFETCH) ? atomic_load(&r->tune.prefetch) > 0
                                                        : p->win_seq * 32 >= n;
        unsigned w = ahead ? default_io_width(r) : r->npaths;
        atomic_store(&r->tune.io_width, w);
    }
    if (!fixed(r, FMEM_REGION_TUNE_STRIPE))
        atomic_store(&r->tune.stripe, placing_paths(r, p));
    p->win_n = p->win_seq = p->win_write = p->win_refault = 0;
    p->win_dist = 0;
    p->win_start_ns = now;
}

/* 1: stream s went over more units than the cache holds (a scan: what
 * it went past would be evicted before it came back anyway). */
static int stream_long(const struct fmem_region *r, const struct stream *s)
{
    return s->last - s->first >= r->cap;
}

/* Drop-behind: a confirmed stream (or one that was, before it lost
 * read-ahead) at unit u went past the units before it; all but the one
 * right before u (a program may still be reading across the boundary) go
 * to the writer before the CLOCK hand's victims (region_cache.c), at most
 * a cache's worth. Those of a stream longer than the cache are evicted
 * right away, so its next windows find free slots; a shorter stream's only
 * when the cache needs room (what it read may be read again while
 * cached). Not with the read-ahead depth fixed: its streams are the
 * handler's. */
static void stream_drop_behind(struct fmem_region *r, struct stream *s, uint32_t u)
{
    if ((s->run < STREAM_CONFIRM && !s->resume) || fixed(r, FMEM_REGION_TUNE_PREFETCH) || u < 1)
        return;
    uint32_t from = s->behind, to = u - 1;
    if (to > r->cap && from < to - r->cap)
        from = to - r->cap;
    if (from < to)
        cache_drop_behind(r, from, to, stream_long(r, s));
    if (s->behind < to)
        s->behind = to;
}

/* Which stream fault u continues. A fault at a stream's `next` (the end
 * of what it brought in) continues it. A candidate needs two
 * continuations before it reads ahead (a random fault lands on some
 * candidate's next unit now and then, and each such window is mapped
 * while the next random fault waits), or one that went past more than
 * the previous fault's own unit (a fresh run, a window); its first window
 * is 8 units and doubles per continuation, up to the stream's depth. A
 * continuation right after a window of the stream's whole depth means the
 * program used all of it: the depth doubles, back up to the region's
 * full depth. A fault between its last fault and `next` means units it
 * read ahead were gone before the program reached them (evicted unused,
 * or dropped for another stream's window): the stream's depth halves and
 * it starts over as a candidate (one fault inside a stream's range may be
 * a random one), and once confirmed it resumes at that depth at once
 * (before, a loss restarted it at 4 units and its depth never grew back,
 * so a scan that lost read-ahead a few times went on 2 units at a time).
 * Returns 1 when u continued a stream. A fault that continues none starts
 * a candidate stream in the slot least worth keeping: a candidate (run 0)
 * before an established stream, and an established one only once it has
 * been idle STREAM_KEEP faults, so random faults between a stream's
 * faults do not push it out (a candidate still needs its next fault
 * within 8 other faults). */
static int stream_note(struct fmem_region *r, struct region_policy *p, uint32_t u)
{
    uint64_t now = ++p->nfaults;
    p->window = 0;
    for (int i = 0; i < NSTREAMS; i++) {
        struct stream *s = &p->streams[i];
        if (!s->used || u <= s->last || u > s->next)
            continue;
        /* the previous fault brought in more than its own unit (a fresh
         * run, a window) and the program went past them: a scan */
        int passed = s->next - s->last > 1;
        p->cur = i;
        s->used = now;
        cache_ahead_reached(r, s->last + 1, u); /* the program went past them */
        s->last = u;
        if (r->ra_next != NO_UNIT && u >= r->ra_next && u < r->ra_end) {
            stream_drop_behind(r, s, u);
            return 1; /* it caught up with its window, still being mapped */
        }
        if (u == s->next) {
            s->run += s->run < 31;
            if (passed && s->run < STREAM_CONFIRM)
                s->run = STREAM_CONFIRM;
            if (s->window >= s->depth && s->depth < p->depth_max)
                s->depth = s->depth * 2 < p->depth_max ? s->depth * 2 : p->depth_max;
            unsigned w = s->run < STREAM_CONFIRM             ? 0
                         : s->run >= 16 || s->resume ? s->depth
                                                     : 2u << s->run;
            /* a stream that lost read-ahead keeps `resume` through the
             * continuation that does not confirm it yet, and once
             * confirmed goes on at its depth without ramping up again */
            if (s->run >= STREAM_CONFIRM && s->resume)
                s->run = 16;
            if (s->run >= STREAM_CONFIRM)
                s->resume = 0;
            s->window = p->window = w < s->depth ? w : s->depth;
            s->next = u + 1;
            stream_drop_behind(r, s, u);
            return 1;
        }
        s->depth = s->depth > 1 ? s->depth / 2 : 1;
        s->next = u + 1;
        s->window = 0;
        p->lost++;
        /* a random fault may land in a stream's range too: it starts over
         * as a candidate, and once confirmed resumes at its depth */
        s->resume = s->run >= STREAM_CONFIRM;
        s->run = 0;
        stream_drop_behind(r, s, u); /* a scan that lost read-ahead is still one */
        return 0;
    }
    cache_ahead_reached(r, u, u); /* read-ahead the program read up to u */
    int victim = 0;
    uint64_t worst = UINT64_MAX;
    for (int i = 0; i < NSTREAMS; i++) {
        const struct stream *s = &p->streams[i];
        uint64_t keep = s->used + (s->run ? STREAM_KEEP : 0);
        if (keep < worst) {
            worst = keep;
            victim = i;
        }
    }
    p->streams[victim] = (struct stream){.last = u, .next = u + 1, .run = 0, .used = now,
                                         .depth = p->depth_max, .first = u, .behind = u};
    p->cur = victim;
    return 0;
}

unsigned policy_stream_fetch(struct fmem_region *r, uint32_t u)
{
    struct region_policy *p = r->policy;
    if (!p || r->prefetch == 0 ||
        fixed(r, FMEM_REGION_TUNE_PREFETCH | FMEM_REGION_TUNE_FETCH))
        return 0;
    for (int i = 0; i < NSTREAMS; i++) {
        const struct stream *s = &p->streams[i];
        if (!s->used || u <= s->last || u > s->next)
            continue;
        /* as stream_note decides: it caught up with the window being
         * mapped, or continues a stream that reads ahead after it */
        int caught = r->ra_next != NO_UNIT && u >= r->ra_next && u < r->ra_end;
        int ahead = u == s->next && (s->run + 1 >= STREAM_CONFIRM || s->next - s->last > 1);
        if (!caught && !ahead)
            return 0;
        /* one unit per path new chunks go to (consecutive units sit on
         * different paths): a fault costs the time of one unit's
         * transfer with every link busy; more would wait longer and
         * take cache from the other faults' units */
        unsigned paths = atomic_load_explicit(&r->tune.stripe, memory_order_relaxed), g = 1;
        while (g < paths)
            g *= 2;
        unsigned max = policy_fetch_max(r);
        return g < max ? g : max;
    }
    return 0;
}

int policy_stream_window(struct fmem_region *r)
{
    struct region_policy *p = r->policy;
    if (!p || fixed(r, FMEM_REGION_TUNE_PREFETCH))
        return -1;
    return (int)p->window;
}

void policy_stream_ahead(struct fmem_region *r, uint32_t end)
{
    struct region_policy *p = r->policy;
    if (p && end > p->streams[p->cur].next)
        p->streams[p->cur].next = end;
}

/* ---- fetch size ---- */

unsigned policy_fetch_max(const struct fmem_region *r)
{
    /* at most 256 KiB, an eighth of the cache, the staging buffer (a
     * read-ahead step; known once the region is set up) and the 64 units
     * an install tracks */
    size_t m = FMEM_REGION_MAX_UNIT >> r->unit_shift;
    if (r->buf_units && m > r->buf_units)
        m = r->buf_units;
    if (m > r->cap / 8)
        m = r->cap / 8;
    if (m > 64)
        m = 64;
    unsigned f = 1;
    while (f * 2 <= m)
        f *= 2;
    return f;
}

unsigned policy_fetch_units(struct fmem_region *r)
{
    struct region_policy *p = r->policy;
    unsigned f = atomic_load_explicit(&r->tune.fetch, memory_order_relaxed), max = policy_fetch_max(r);
    if (f > max)
        f = max;
    if (!p)
        return f ? f : 1;
    p->probe_now = 0;
    if (!fixed(r, FMEM_REGION_TUNE_FETCH) && f > 1 && ++p->probe_tick % PROBE_EVERY == 0) {
        f /= 2;
        p->probe_now = 1;
    }
    p->fetch_now = f;
    return f;
}

static unsigned log2u(unsigned v)
{
    return v ? 31u - (unsigned)__builtin_clz(v) : 0;
}

static struct group_seen *group_slot(struct group_seen *t, unsigned level, uint32_t g)
{
    uint64_t key = ((uint64_t)level << 32 | g) + 1;
    return &t[(unsigned)((key * 0x9e3779b97f4a7c15ull) >> 40) % GROUPS];
}

/* 1: group g of level `level` is in table t, fetched at most `life`
 * faults ago. */
static int group_recent(struct group_seen *t, unsigned level, uint32_t g, uint64_t now,
                        uint64_t life)
{
    const struct group_seen *e = group_slot(t, level, g);
    return e->key == (((uint64_t)level << 32 | g) + 1) && now - e->stamp <= life;
}

static void group_put(struct group_seen *t, unsigned level, uint32_t g, uint64_t now)
{
    struct group_seen *e = group_slot(t, level, g);
    e->key = ((uint64_t)level << 32 | g) + 1;
    e->stamp = now;
}

/* From `from` to `to`, unless fmem_region_tune set a value meanwhile (the
 * handler checked `fixed` before it was set: the explicit value wins). */
static void fetch_set(struct fmem_region *r, struct region_policy *p, unsigned from, unsigned to)
{
    if (atomic_compare_exchange_strong(&r->tune.fetch, &from, to))
        atomic_fetch_add(&p->fetch_changes, 1);
    p->f_meas = p->f_pairs = p->f_probes = p->f_probe_used = 0;
}

/* 1: a unit of the other half of the group twice 2^k units around u (the
 * half a probe on u left out) is cached or on its way. */
static int other_half_cached(struct fmem_region *r, uint32_t u, unsigned k)
{
    uint32_t first = ((u >> k) ^ 1u) << k, n = 1u << k;
    int cached = 0;
    pthread_mutex_lock(&r->lock);
    for (uint32_t v = first; v < first + n && v < r->nunits && !cached; v++)
        cached = unit_claimed(r, v);
    pthread_mutex_unlock(&r->lock);
    return cached;
}

/* The fault on unit u (handler; `stream`: it continued a stream) was
 * served with p->fetch_now units (0: a write or fresh fault). */
static void fetch_note(struct fmem_region *r, struct region_policy *p, uint32_t u, int stream)
{
    unsigned got = p->fetch_now, probe = p->probe_now;
    p->fetch_now = p->probe_now = 0;
    if (got == 0)
        return;
    unsigned f = atomic_load_explicit(&r->tune.fetch, memory_order_relaxed);
    unsigned k = log2u(f), kgot = log2u(got);
    uint64_t now = p->nfaults;
    uint64_t life = r->cap / (2u * f);
    if (life < 2)
        life = 2;
    if (!stream) {
        p->f_meas++;
        p->f_pairs += group_recent(p->seen, k, (u >> k) ^ 1u, now, life);
        if (k > 0) {
            struct group_seen *e = group_slot(p->probes, k - 1, (u >> (k - 1)) ^ 1u);
            if (group_recent(p->probes, k - 1, (u >> (k - 1)) ^ 1u, now, life * 2)) {
                p->f_probe_used++;
                e->key = 0; /* counted once */
            }
        }
    }
    group_put(p->seen, k, u >> k, now);
    if (probe && other_half_cached(r, u, kgot))
        probe = 0; /* no fault can follow it there: it tells nothing */
    if (probe) {
        p->f_probes++;
        group_put(p->probes, kgot, u >> kgot, now);
    }
    if (fixed(r, FMEM_REGION_TUNE_FETCH))
        return;
    unsigned side = atomic_load_explicit(&r->tune.stripe, memory_order_relaxed);
    if (p->f_probes >= PROBE_WINDOW) {
        unsigned pct = f <= side ? SHRINK_PCT_SIDE : SHRINK_PCT;
        if (p->f_probe_used * 100 < pct * p->f_probes && f > 1)
            fetch_set(r, p, f, f / 2);
        else
            p->f_probes = p->f_probe_used = 0;
    } else if (p->f_meas >= FETCH_WINDOW) {
        unsigned pct = 2 * f <= side ? GROW_PCT_SIDE : GROW_PCT;
        if (p->f_pairs * 100 >= pct * p->f_meas && f < policy_fetch_max(r))
            fetch_set(r, p, f, f * 2);
        else
            p->f_meas = p->f_pairs = 0;
    }
}

void policy_note_fault(struct fmem_region *r, uint32_t u, int write)
{
    struct region_policy *p = r->policy;
    if (!p)
        return;
    if (p->win_n == 0 && p->win_start_ns == 0)
        p->win_start_ns = tp_now_ns();
    int stream = stream_note(r, p, u);
    p->win_seq += stream;
    p->win_write += !!write;
    fetch_note(r, p, u, stream);
    unsigned h = (unsigned)((u * 2654435761u) >> 22) % RECENT;
    if (p->stamp[h] && p->unit_of[h] == u) {
        p->win_refault++;
        p->win_dist += p->nfaults - p->stamp[h];
    }
    p->unit_of[h] = u;
    p->stamp[h] = p->nfaults;
    if (p->last_fault) { /* the chunk's fault history, for its tier */
        uint32_t c = remote_chunk(r, u);
        uint64_t prev = atomic_load_explicit(&p->last_fault[c], memory_order_relaxed);
        if (prev)
            atomic_store_explicit(&p->dist[c], p->nfaults - prev, memory_order_relaxed);
        atomic_store_explicit(&p->last_fault[c], p->nfaults, memory_order_relaxed);
    }
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
    out->tier_moves = atomic_load(&p->moves);
    out->fetch_changes = atomic_load(&p->fetch_changes);
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
    if ((t->set & FMEM_REGION_TUNE_TIER) && t->tier > FMEM_REGION_TIER_SLOW)
        return FMEM_EINVAL;
    if ((t->set & FMEM_REGION_TUNE_FETCH) &&
        (t->fetch == 0 || (t->fetch & (t->fetch - 1)) || t->fetch > policy_fetch_max(r)))
        return FMEM_EINVAL;
    /* fix first, then set: the policy (handler) no longer overwrites */
    atomic_store(&r->tune.fixed, t->set);
    if (t->set & FMEM_REGION_TUNE_PREFETCH)
        atomic_store(&r->tune.prefetch, t->prefetch);
    if (t->set & FMEM_REGION_TUNE_STRIPE)
        atomic_store(&r->tune.stripe, t->stripe);
    if (t->set & FMEM_REGION_TUNE_IO_WIDTH)
        atomic_store(&r->tune.io_width, t->io_width);
    if (t->set & FMEM_REGION_TUNE_FETCH)
        atomic_store(&r->tune.fetch, t->fetch);
    if (r->policy)
        atomic_store(&r->policy->tier,
                     t->set & FMEM_REGION_TUNE_TIER ? t->tier : FMEM_REGION_TIER_AUTO);
    return 0;
}

int fmem_region_tuning_get(fmem_region *r, fmem_region_tuning *out)
{
    if (!r || !out)
        return FMEM_EINVAL;
    *out = (fmem_region_tuning){0};
    out->set = atomic_load(&r->tune.fixed);
    out->prefetch = atomic_load(&r->tune.prefetch);
    out->stripe = atomic_load(&r->tune.stripe);
    out->io_width = atomic_load(&r->tune.io_width);
    out->paths = r->npaths;
    out->fetch = atomic_load(&r->tune.fetch);
    out->fetch_max = policy_fetch_max(r);
    out->tier = r->policy ? atomic_load(&r->policy->tier) : FMEM_REGION_TIER_NONE;
    return 0;
}
