/* chunk_layer.c - allocation of 1..16 chunks inside a span: one CAS on the
 * span header's free map, which also writes the temporary redo log (the
 * commit point).
 *
 * A span moves between the section layer (detached: its state in the
 * section header is 00 or 11) and the chunk layer (attached: state 01 or 10)
 * only while its header holds a claim record naming the user doing it, so
 * that no two users move it at once and recovery can finish or undo the
 * move of a user that died half-way:
 *   claim:   P: detached, CLAIM(0) -> CLAIM(me);  S: 00 -> 01;
 *            P: CLAIM(me) -> attached + first allocation
 *   release: P: attached, empty -> detached, CLAIM(me);  S: 01/10 -> 00;
 *            P: CLAIM(me) -> CLAIM(0)
 * A span-level allocation takes only spans in state 00, so it never meets an
 * attached span. Spans that become empty stay attached (a churning thread
 * would otherwise claim and release on every allocation) until a span-level
 * allocation finds no free span and releases them. */
#include "crashpoint.h"
#include "fmem.h"
#include "protocol.h"

static _Atomic uint32_t tid_next;
static _Thread_local uint32_t tl_tid;
static _Thread_local struct {
    const struct node *n;
    uint64_t span; /* span + 1; 0: none */
} tl_hints[4];

static uint32_t my_tid(void)
{
    if (!tl_tid)
        tl_tid = atomic_fetch_add_explicit(&tid_next, 1, memory_order_relaxed) + 1;
    return tl_tid;
}

uint64_t home_section(const struct node *n)
{
    return ((uint64_t)my_tid() * 2654435761u) % n->g.nsections;
}

uint64_t *span_hint(const struct node *n)
{
    unsigned i = (unsigned)(((uintptr_t)n >> 4) & 3);
    if (tl_hints[i].n != n) {
        tl_hints[i].n = n;
        tl_hints[i].span = 0;
    }
    return &tl_hints[i].span;
}

static uint32_t run_mask(unsigned off, unsigned len)
{
    return (len >= 32 ? 0xFFFFFFFFu : ((1u << len) - 1)) << off;
}

/* Offset of the lowest aligned run of 2^k free chunks in map, or -1. */
static int find_run(uint32_t map, unsigned k)
{
    if (k == 0)
        return map == 0xFFFFFFFFu ? -1 : __builtin_ctz(~map);
    unsigned len = 1u << k;
    for (unsigned off = 0; off < 32; off += len)
        if (!(map & run_mask(off, len)))
            return (int)off;
    return -1;
}

static uint64_t claim_record(uint64_t h, unsigned uid)
{
    return h_with_log(h, 31, SPAN_LOG_CLAIM, h_ts(h), uid);
}

/* Set span j's state in section x to `to`, starting from header value sh:
 * a hint (contention) or a release step. Gives up if the state is not one
 * of `from_mask` (bit per state). A release must pass a value it has just
 * read: a stale cached value showing `to` already would end it without a
 * CAS, leaving a detached span marked in use for good. */
static void set_span_state(struct node *n, uint64_t x, unsigned j, unsigned to,
                           unsigned from_mask, int tries, uint64_t sh)
{
    while (tries-- > 0) {
        unsigned st = sec_state(sh, j);
        if (st == to || !(from_mask & (1u << st)))
            return;
        uint64_t old;
        int r = tp_cas(n->tp, sec_hdr_off(n, x), sh, sec_with_state(sh, j, to), &old);
        if (r < 0)
            return;
        if (r == 1) {
            cache_put(n->sec_cache, x, sec_with_state(sh, j, to));
            return;
        }
        sh = old;
        cache_put(n->sec_cache, x, old);
    }
}

/* Contention control after a commit in span s that saw `fails` CAS failures. */
static void contention_update(struct node *n, uint64_t s, unsigned fails)
{
    uint64_t x = s / SPANS_PER_SECTION;
    unsigned j = s % SPANS_PER_SECTION;
    unsigned st = sec_state(cache_get(n->sec_cache, x), j);
    if (fails > RETRY_HIGH && st == SPAN_INUSE)
        set_span_state(n, x, j, SPAN_CONTENDED, 1u << SPAN_INUSE, 2, cache_get(n->sec_cache, x));
    else if (fails < RETRY_LOW && st == SPAN_CONTENDED)
        set_span_state(n, x, j, SPAN_INUSE, 1u << SPAN_CONTENDED, 2, cache_get(n->sec_cache, x));
}

/* Allocate 2^k chunks in attached span s. 1: done, 0: no room or too
 * contended (the caller moves on), <0: error. */
static int try_span(struct node *n, uint64_t s, unsigned k, unsigned *fails, uint64_t *chunk)
{
    uint64_t hv = cache_get(n->span_cache, s);
    unsigned here = 0;
    for (;;) {
        if (h_detached(hv))
            return 0;
        int off = find_run(h_lo(hv), k);
        if (off < 0)
            return 0;
        log_flush_span(n, s, hv); /* the log we overwrite must be in the full log */
        unsigned ts = log_next_ts(hv, log_span_prev_alloc(hv), true);
        uint64_t nv = h_with_lo(hv, h_lo(hv) | run_mask((unsigned)off, 1u << k));
        nv = h_with_retry(h_with_log(nv, (unsigned)off, k, ts, n->uid), retry_level(here));
        uint64_t old;
        int r = log_commit_cas_span(n, s, hv, nv, &old, s * CHUNKS_PER_SPAN + (unsigned)off, k);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->span_cache, s, nv);
            CRASH_POINT(CP_CHUNK_COMMIT);
            log_commit_span(n, s, nv);
            contention_update(n, s, here);
            *chunk = s * CHUNKS_PER_SPAN + (unsigned)off;
            return 1;
        }
        (*fails)++;
        here++;
        hv = old;
        cache_put(n->span_cache, s, old);
        if (here > RETRY_HIGH) { /* steer away from a hot span */
            uint64_t x = s / SPANS_PER_SECTION;
            set_span_state(n, x, s % SPANS_PER_SECTION, SPAN_CONTENDED, 1u << SPAN_INUSE, 1,
                           cache_get(n->sec_cache, x));
            return 0;
        }
    }
}

/* Move free span j of section x into the chunk layer and allocate 2^k
 * chunks at its start. 1: done, 0: someone else got there first. */
static int claim_and_alloc(struct node *n, uint64_t x, unsigned j, unsigned k,
                           unsigned *fails, uint64_t *chunk)
{
    uint64_t s = x * SPANS_PER_SECTION + j, hoff = span_hdr_off(n, s);
    uint64_t hv, old;
    if (tp_read(n->tp, hoff, &hv, 8) < 0)
        return FMEM_EIO;
    cache_put(n->span_cache, s, hv);
    if (!h_detached(hv) || h_size(hv) != SPAN_LOG_CLAIM || h_uid(hv) != 0 || h_lo(hv))
        return 0; /* attached already, or another user is moving it */
    uint64_t claimed = claim_record(hv, n->uid);
    int r = tp_cas(n->tp, hoff, hv, claimed, &old);
    if (r != 1) {
        if (r == 0) {
            (*fails)++;
            cache_put(n->span_cache, s, old);
        }
        return r < 0 ? r : 0;
    }
    CRASH_POINT(CP_CLAIM_RECORDED);
    /* S: 00 -> 01. Always a CAS, even when the cache already says 01: the
     * cached value may be stale (another client released the span to 00),
     * and attaching under a 00 state would let a span-level allocation take
     * the span too. A CAS whose new value equals the old one validates it. */
    uint64_t sh = cache_get(n->sec_cache, x);
    for (;;) {
        unsigned st = sec_state(sh, j);
        if (st == SPAN_FULL) { /* a span-level allocation took it: undo */
            tp_cas(n->tp, hoff, claimed, hv, NULL);
            return 0;
        }
        uint64_t nsh = st == SPAN_FREE ? sec_with_state(sh, j, SPAN_INUSE) : sh;
        r = tp_cas(n->tp, sec_hdr_off(n, x), sh, nsh, &old);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->sec_cache, x, nsh);
            break;
        }
        (*fails)++;
        sh = old;
        cache_put(n->sec_cache, x, old);
    }
    CRASH_POINT(CP_CLAIM_SECTION);
    /* attach, with the first allocation as the commit */
    unsigned ts = (h_ts(hv) + 1) & TS_MASK; /* the previous op was a free */
    uint64_t nv = h_with_lo(claimed & ~H_DETACHED, run_mask(0, 1u << k));
    nv = h_with_retry(h_with_log(nv, 0, k, ts, n->uid), 0);
    r = tp_cas(n->tp, hoff, claimed, nv, &old);
    if (r != 1) {
        if (r == 0)
            cache_put(n->span_cache, s, old);
        return r < 0 ? r : 0;
    }
    cache_put(n->span_cache, s, nv);
    CRASH_POINT(CP_CHUNK_COMMIT);
    log_commit_span(n, s, nv);
    *chunk = s * CHUNKS_PER_SPAN;
    return 1;
}

static bool span_has_room(uint64_t hv, unsigned k)
{
    return !h_detached(hv) && find_run(h_lo(hv), k) >= 0;
}

int chunk_alloc(struct node *n, unsigned k, uint64_t *chunk, unsigned *fails)
{
    uint64_t *hint = span_hint(n);
    if (*hint && *hint <= n->g.nspans) {
        int r = try_span(n, *hint - 1, k, fails, chunk);
        if (r)
            return r < 0 ? r : 0;
    }
    const uint64_t nsec = n->g.nsections;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t x0 = home_section(n);
        uint64_t contended = UINT64_MAX;
        for (uint64_t i = 0; i < nsec; i++) {
            uint64_t x = (x0 + i) % nsec;
            uint64_t sh = cache_get(n->sec_cache, x);
            /* preference: in use (01) > free (00) > contended (10) */
            for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
                uint64_t s = x * SPANS_PER_SECTION + j;
                uint64_t hv = cache_get(n->span_cache, s);
                if (sec_state(sh, j) != SPAN_INUSE || !span_has_room(hv, k))
                    continue;
                if (h_retry(hv) >= 2) {
                    if (contended == UINT64_MAX)
                        contended = s;
                    continue;
                }
                int r = try_span(n, s, k, fails, chunk);
                if (r < 0)
                    return r;
                if (r) {
                    *hint = s + 1;
                    return 0;
                }
            }
            for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
                if (sec_state(sh, j) == SPAN_CONTENDED && contended == UINT64_MAX &&
                    span_has_room(cache_get(n->span_cache, x * SPANS_PER_SECTION + j), k))
                    contended = x * SPANS_PER_SECTION + j;
                if (sec_state(sh, j) != SPAN_FREE)
                    continue;
                int r = claim_and_alloc(n, x, j, k, fails, chunk);
                if (r < 0)
                    return r;
                if (r) {
                    *hint = x * SPANS_PER_SECTION + j + 1;
                    return 0;
                }
                sh = cache_get(n->sec_cache, x);
            }
        }
        if (contended != UINT64_MAX) {
            int r = try_span(n, contended, k, fails, chunk);
            if (r)
                return r < 0 ? r : (*hint = contended + 1, 0);
        }
        node_refresh_all(n); /* the caches may be stale: look once more */
    }
    return FMEM_ENOMEM;
}

int chunk_free(struct node *n, uint64_t chunk, unsigned k, unsigned uid, const uint64_t *seen)
{
    uint64_t s = chunk / CHUNKS_PER_SPAN, hoff = span_hdr_off(n, s);
    unsigned off = chunk % CHUNKS_PER_SPAN;
    uint32_t bits = run_mask(off, 1u << k);
    uint64_t hv, old;
    if (seen)
        hv = *seen;
    else if (tp_read(n->tp, hoff, &hv, 8) < 0)
        return FMEM_EIO;
    for (;;) {
        if (h_detached(hv) || !(h_lo(hv) & bits))
            return FMEM_EDOUBLEFREE;
        if ((h_lo(hv) & bits) != bits)
            return FMEM_EBADHANDLE;
        log_flush_span(n, s, hv);
        unsigned ts = log_next_ts(hv, log_span_prev_alloc(hv), false);
        uint64_t nv = h_with_log(h_with_lo(hv, h_lo(hv) & ~bits), off, k, ts, uid);
        int r = tp_cas(n->tp, hoff, hv, nv, &old);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->span_cache, s, nv);
            CRASH_POINT(CP_CHUNK_FREE_COMMIT);
            log_commit_span(n, s, nv);
            return 0;
        }
        hv = old;
        cache_put(n->span_cache, s, old);
    }
}

/* Release one empty attached span (see the top of this file). */
static bool release_span(struct node *n, uint64_t s, uint64_t hv)
{
    uint64_t hoff = span_hdr_off(n, s), old;
    log_flush_span(n, s, hv);
    uint64_t claimed = claim_record(hv | H_DETACHED, n->uid);
    if (tp_cas(n->tp, hoff, hv, claimed, &old) != 1) {
        cache_put(n->span_cache, s, old);
        return false;
    }
    CRASH_POINT(CP_RELEASE_DETACHED);
    uint64_t x = s / SPANS_PER_SECTION, sh;
    if (tp_read(n->tp, sec_hdr_off(n, x), &sh, 8) < 0)
        return true; /* the claim record stays: recovery finishes the move */
    set_span_state(n, x, s % SPANS_PER_SECTION, SPAN_FREE,
                   (1u << SPAN_INUSE) | (1u << SPAN_CONTENDED), 1000, sh);
    CRASH_POINT(CP_RELEASE_SECTION);
    uint64_t done = claim_record(claimed, 0);
    if (tp_cas(n->tp, hoff, claimed, done, &old) == 1)
        cache_put(n->span_cache, s, done);
    return true;
}

unsigned chunk_release_empty(struct node *n, unsigned max)
{
    unsigned released = 0;
    for (uint64_t s = 0; s < n->g.nspans && released < max; s++) {
        uint64_t hv = cache_get(n->span_cache, s);
        if (!h_detached(hv) && h_lo(hv) == 0 && release_span(n, s, hv))
            released++;
    }
    return released;
}

void chunk_clear_claim(struct node *n, uint64_t s, unsigned uid)
{
    uint64_t hoff = span_hdr_off(n, s), hv;
    if (tp_read(n->tp, hoff, &hv, 8) < 0)
        return;
    if (!h_detached(hv) || h_size(hv) != SPAN_LOG_CLAIM || h_uid(hv) != uid || uid == 0)
        return;
    /* uid is dead: nobody else may move this span, so finishing is safe */
    uint64_t x = s / SPANS_PER_SECTION, sh;
    if (tp_read(n->tp, sec_hdr_off(n, x), &sh, 8) < 0)
        return;
    set_span_state(n, x, s % SPANS_PER_SECTION, SPAN_FREE,
                   (1u << SPAN_INUSE) | (1u << SPAN_CONTENDED), 1000, sh);
    uint64_t done = claim_record(hv, 0);
    if (tp_cas(n->tp, hoff, hv, done, NULL) == 1)
        cache_put(n->span_cache, s, done);
}
