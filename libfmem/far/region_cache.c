/* region_cache.c - the bounded local cache of a region: a ring of `cap`
 * slots, one per cached unit, swept by a CLOCK hand. Free slots are reused
 * first in, first out, so the hand meets units in about the order they
 * came in: FIFO with a second chance, which suits scans.
 *
 * User space sees no accessed bits, so the reference bit is set by what the
 * handler does see: a demand fault that brought the unit in, and a write
 * fault on it. Read-ahead starts unreferenced, so once the program has
 * reached it, it goes first (see below). A unit in constant use never
 * faults while cached, so it would go every second turn of the hand and
 * come straight back: a unit that was faulted back in after an eviction
 * gains heat, and the hand passes a unit with heat by (cooling it) during
 * its first turn of a search. A scan's units never come back soon and stay at no heat.
 * Units their heap freed (UF_DISCARD, region_hint.h) go before all others:
 * dropping one costs no write-back, and it holds nothing anyone reads.
 * Read-ahead is mapped readable, so the program's first read of it faults
 * neither: a unit mapped ahead carries UF_AHEAD (and `unreached`) until the
 * program is known to have reached it: a fault on it, its stream's next
 * fault past it, or a fault right after the marked run it is in (see
 * cache_ahead_reached). Read-ahead is mapped ahead of where the program
 * reads, and a unit thrown away before use is fetched again on demand, so
 * while unreached the writer's eviction windows leave it (region_writer.c:
 * window claims free slots out of the hand's order, so new read-ahead can
 * sit just ahead of the hand), and the hand gives it a second chance, as
 * to a referenced unit (clearing UF_AHEAD). The second time the hand
 * meets it, it goes like any other unit, so a cache full of read-ahead
 * nobody reads still makes room. One evicted unreached is counted
 * (ahead_unused). Units a stream of the policy's went past
 * (region_policy.c) go right after the discarded ones, before the hand
 * moves (drop-behind): a scan through a cache smaller than its data then
 * evicts its own used units, not what else is cached (a join's lookup
 * table), and the writer finds them without a search. All functions but
 * cache_ahead_reached and cache_drop_behind run with the region lock
 * held. */
#include "region_internal.h"

uint32_t cache_take_slot(struct fmem_region *r, uint32_t u)
{
    uint32_t slot = r->free_slots[r->free_head];
    r->free_head = r->free_head + 1 == r->cap ? 0 : r->free_head + 1;
    r->nfree--;
    r->ring[slot] = u;
    r->units[u].slot = slot;
    return slot;
}

void cache_free_slot(struct fmem_region *r, uint32_t slot)
{
    r->ring[slot] = NO_UNIT;
    uint32_t tail = r->free_head + r->nfree;
    r->free_slots[tail >= r->cap ? tail - r->cap : tail] = slot;
    r->nfree++;
}

int victim_space(struct fmem_region *r, uint32_t u)
{
    const struct region_unit *un = &r->units[u];
    return !(un->flags & UF_DIRTY) || un->present == full_mask(r) || remote_ref(r, u) == 0;
}

/* The discarded units first, oldest first. */
static unsigned pick_discarded(struct fmem_region *r, uint32_t *out, unsigned max)
{
    unsigned n = 0;
    while (n < max && r->ndiscard) {
        uint32_t u = r->discard[r->discard_head];
        r->discard_head = (r->discard_head + 1) % REGION_DISCARD_LIST;
        r->ndiscard--;
        struct region_unit *un = &r->units[u];
        if (un->state != UNIT_RESIDENT || !(un->flags & UF_DISCARD))
            continue; /* reused or gone since */
        un->state = UNIT_EVICTING;
        out[n++] = u;
    }
    return n;
}

/* The units streams went past, oldest first (drop-behind): still the
 * residency they were listed in, and neither hot (re-faulted lately) nor
 * read-ahead the program has not reached. */
static unsigned pick_behind(struct fmem_region *r, uint32_t *out, unsigned max)
{
    unsigned n = 0;
    while (n < max && r->nbehind) {
        struct behind_entry e = r->behind[r->behind_head];
        r->behind_head = (r->behind_head + 1) % REGION_BEHIND_LIST;
        r->nbehind--;
        struct region_unit *un = &r->units[e.u];
        if (un->state != UNIT_RESIDENT || un->gone_at != e.gone_at || un->heat ||
            un->unreached || (un->flags & UF_DISCARD) || !victim_space(r, e.u))
            continue;
        un->state = UNIT_EVICTING;
        out[n++] = e.u;
    }
    return n;
}

int cache_behind_due(const struct fmem_region *r)
{
    /* half the reserve: a batch's zap and wake-ups are paid for a few
     * units at once, and a stream's next window finds its slots free */
    return r->behind_eager && r->nbehind && r->nbehind >= (r->reserve + 1) / 2;
}

void cache_drop_behind(struct fmem_region *r, uint32_t from, uint32_t to, int eager)
{
    if (to > r->nunits)
        to = r->nunits;
    pthread_mutex_lock(&r->lock);
    for (uint32_t u = from; u < to && r->nbehind < REGION_BEHIND_LIST; u++) {
        const struct region_unit *un = &r->units[u];
        if (un->state != UNIT_RESIDENT || un->heat)
            continue;
        r->behind[(r->behind_head + r->nbehind++) % REGION_BEHIND_LIST] =
            (struct behind_entry){u, un->gone_at};
    }
    r->behind_eager = eager;
    if (cache_behind_due(r))
        region_kick_writer(r);
    pthread_mutex_unlock(&r->lock);
}

unsigned cache_pick_victims(struct fmem_region *r, uint32_t *out, unsigned want, unsigned max)
{
    unsigned n = pick_discarded(r, out, want < max ? want : max);
    n += pick_behind(r, out + n, max - n);
    for (uint64_t steps = 0; steps < 2 * (uint64_t)r->cap && n < want && n < max; steps++) {
        uint32_t slot = r->hand;
        r->hand = r->hand + 1 == r->cap ? 0 : r->hand + 1;
        uint32_t u = r->ring[slot];
        if (u == NO_UNIT)
            continue;
        struct region_unit *un = &r->units[u];
        if (un->state != UNIT_RESIDENT)
            continue;
        if (un->flags & UF_DISCARD) {
            un->state = UNIT_EVICTING;
            out[n++] = u;
            continue;
        }
        if (un->flags & (UF_REF | UF_AHEAD)) {
            un->flags &= (uint8_t)~(UF_REF | UF_AHEAD);
            continue;
        }
        if (un->heat && steps < r->cap) {
            un->heat--;
            un->flags &= (uint8_t)~UF_AHEAD;
            continue;
        }
        /* a dirty unit gets its chunk here if it has none (the writer
         * takes one that holds only zeros as clean, see evict_batch);
         * without pool space it stays cached */
        if (!victim_space(r, u)) {
            un->flags &= (uint8_t)~UF_AHEAD;
            continue;
        }
        un->state = UNIT_EVICTING;
        out[n++] = u;
    }
    return n;
}

void cache_ahead_reached(struct fmem_region *r, uint32_t from, uint32_t to)
{
    if (to > r->nunits)
        to = r->nunits;
    if (from > to)
        return;
    pthread_mutex_lock(&r->lock);
    for (uint32_t u = from; u < to; u++) {
        r->units[u].flags &= (uint8_t)~UF_AHEAD;
        r->units[u].unreached = 0;
    }
    /* and the marked run right before `from`: a program reading on
     * through read-ahead faults first where it ends (after lost read-ahead
     * its stream no longer covers the rest of the window it reads) */
    for (uint32_t u = from, k = 0; u-- > 0 && k < r->cap / 4; k++) {
        struct region_unit *un = &r->units[u];
        if (un->state != UNIT_RESIDENT || !un->unreached)
            break;
        un->flags &= (uint8_t)~UF_AHEAD;
        un->unreached = 0;
    }
    pthread_mutex_unlock(&r->lock);
}
