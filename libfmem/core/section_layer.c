/* section_layer.c - blocks of 1..16 spans (one CAS on the section header
 * flips their states 00 -> 11 and writes the temporary log) and blocks of
 * 2^p whole sections (one CAS per section, undone if a later one fails).
 * State 11 in a section header means "allocated as a span block": a
 * chunk-layer span that fills up stays 01 (its own header says it is full),
 * so a section header is the single authority on span ownership. */
#include "crashpoint.h"
#include "fmem.h"
#include "protocol.h"

/* First aligned run of 2^q free (00) spans in section header sh, or -1. */
static int find_span_run(uint64_t sh, unsigned q)
{
    unsigned len = 1u << q;
    for (unsigned j = 0; j < SPANS_PER_SECTION; j += len)
        if (!(h_lo(sh) & sec_states_mask(j, len)))
            return (int)j;
    return -1;
}

/* One section-header commit: set the states of spans [j, j+2^q) to `full`
 * ? 11 : 00 and log it. For whole-section parts, q = 4 and log code MULTI. */
static uint64_t sec_commit_value(struct node *n, uint64_t sh, unsigned j, unsigned q,
                                 bool alloc, unsigned code, unsigned code_off,
                                 unsigned retry, unsigned uid)
{
    uint32_t m = sec_states_mask(j, 1u << q);
    uint32_t lo = alloc ? (h_lo(sh) | m) : (h_lo(sh) & ~m);
    unsigned ts = log_next_ts(sh, log_sec_prev_alloc(sh), alloc);
    (void)n;
    return h_with_retry(h_with_log(h_with_lo(sh, lo), code_off, code, ts, uid), retry);
}

/* Allocate 2^q spans in section x. 1: done, 0: no run or too contended. */
static int try_section(struct node *n, uint64_t x, unsigned q, unsigned *fails, uint64_t *chunk)
{
    uint64_t sh = cache_get(n->sec_cache, x), old;
    unsigned here = 0;
    for (;;) {
        int j = find_span_run(sh, q);
        if (j < 0)
            return 0;
        log_flush_section(n, x, sh);
        uint64_t nv = sec_commit_value(n, sh, (unsigned)j, q, true, q, (unsigned)j,
                                       retry_level(here), n->uid);
        int r = tp_cas(n->tp, sec_hdr_off(n, x), sh, nv, &old);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->sec_cache, x, nv);
            CRASH_POINT(CP_SPAN_COMMIT);
            log_commit_section(n, x, nv);
            *chunk = (x * SPANS_PER_SECTION + (unsigned)j) * CHUNKS_PER_SPAN;
            return 1;
        }
        (*fails)++;
        here++;
        sh = old;
        cache_put(n->sec_cache, x, old);
        if (here > RETRY_HIGH) {
            /* mark the section contended (retry level 2) so that others
             * steer away; the next commit in it writes its own level */
            uint64_t hot = h_with_retry(sh, 2);
            if (h_retry(sh) != 2 && tp_cas(n->tp, sec_hdr_off(n, x), sh, hot, &old) == 1)
                cache_put(n->sec_cache, x, hot);
            return 0;
        }
    }
}

int span_alloc(struct node *n, unsigned q, uint64_t *chunk, unsigned *fails)
{
    const uint64_t nsec = n->g.nsections;
    for (int pass = 0; pass < 3; pass++) {
        uint64_t x0 = home_section(n), empty = UINT64_MAX, hot = UINT64_MAX;
        for (uint64_t i = 0; i < nsec; i++) {
            uint64_t x = (x0 + i) % nsec;
            uint64_t sh = cache_get(n->sec_cache, x);
            if (find_span_run(sh, q) < 0)
                continue;
            /* keep whole sections whole: prefer partly used ones, and
             * uncontended ones */
            if (h_retry(sh) >= 2) {
                if (hot == UINT64_MAX)
                    hot = x;
                continue;
            }
            if (h_lo(sh) == 0 && q < 4) {
                if (empty == UINT64_MAX)
                    empty = x;
                continue;
            }
            int r = try_section(n, x, q, fails, chunk);
            if (r)
                return r < 0 ? r : 0;
        }
        uint64_t tries[2] = {empty, hot};
        for (int t = 0; t < 2; t++) {
            if (tries[t] == UINT64_MAX)
                continue;
            int r = try_section(n, tries[t], q, fails, chunk);
            if (r)
                return r < 0 ? r : 0;
        }
        if (pass == 1)
            chunk_release_empty(n, (unsigned)n->g.nspans);
        node_refresh_all(n);
    }
    return FMEM_ENOMEM;
}

/* Free whole section x (part of a multi-section block), logged as `uid`. */
static int section_part_free(struct node *n, uint64_t x, unsigned code_off, unsigned uid)
{
    uint64_t sh, old;
    if (tp_read(n->tp, sec_hdr_off(n, x), &sh, 8) < 0)
        return FMEM_EIO;
    for (;;) {
        if (h_lo(sh) == 0)
            return FMEM_EDOUBLEFREE;
        if (h_lo(sh) != 0xFFFFFFFFu)
            return FMEM_EBADHANDLE;
        log_flush_section(n, x, sh);
        uint64_t nv = sec_commit_value(n, sh, 0, 4, false, SEC_LOG_MULTI, code_off, 0, uid);
        int r = tp_cas(n->tp, sec_hdr_off(n, x), sh, nv, &old);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->sec_cache, x, nv);
            CRASH_POINT(CP_MULTI_FREE_PART);
            log_commit_section(n, x, nv);
            return 0;
        }
        sh = old;
        cache_put(n->sec_cache, x, old);
    }
}

/* Take sections [base, base+2^p) with one CAS each; undo on failure. The
 * first section's log carries p (offset field), the others 0. */
static int try_multi(struct node *n, uint64_t base, unsigned p, unsigned *fails)
{
    uint64_t nb = UINT64_C(1) << p;
    for (uint64_t i = 0; i < nb; i++) {
        uint64_t x = base + i, sh = cache_get(n->sec_cache, x), old;
        unsigned code_off = i == 0 ? p : 0;
        for (;;) {
            if (h_lo(sh) != 0) {
                while (i-- > 0) /* undo the sections taken so far */
                    section_part_free(n, base + i, i == 0 ? p : 0, n->uid);
                return 0;
            }
            log_flush_section(n, x, sh);
            uint64_t nv = sec_commit_value(n, sh, 0, 4, true, SEC_LOG_MULTI, code_off, 0, n->uid);
            int r = tp_cas(n->tp, sec_hdr_off(n, x), sh, nv, &old);
            if (r < 0)
                return r;
            if (r == 1) {
                cache_put(n->sec_cache, x, nv);
                CRASH_POINT(CP_MULTI_PART);
                log_commit_section(n, x, nv);
                break;
            }
            (*fails)++;
            sh = old;
            cache_put(n->sec_cache, x, old);
        }
    }
    return 1;
}

int multi_alloc(struct node *n, unsigned p, uint64_t *chunk, unsigned *fails)
{
    uint64_t nb = UINT64_C(1) << p;
    if (nb > n->g.nsections)
        return FMEM_ENOMEM;
    for (int pass = 0; pass < 3; pass++) {
        for (uint64_t base = 0; base + nb <= n->g.nsections; base += nb) {
            bool free_run = true;
            for (uint64_t i = 0; i < nb && free_run; i++)
                free_run = h_lo(cache_get(n->sec_cache, base + i)) == 0;
            if (!free_run)
                continue;
            int r = try_multi(n, base, p, fails);
            if (r < 0)
                return r;
            if (r) {
                *chunk = base * CHUNKS_PER_SECTION;
                return 0;
            }
        }
        if (pass == 1)
            chunk_release_empty(n, (unsigned)n->g.nspans);
        node_refresh_all(n);
    }
    return FMEM_ENOMEM;
}

int span_free(struct node *n, uint64_t chunk, unsigned q, unsigned uid, const uint64_t *seen)
{
    uint64_t s = chunk / CHUNKS_PER_SPAN, x = s / SPANS_PER_SECTION, sh, old;
    unsigned j = s % SPANS_PER_SECTION;
    uint32_t m = sec_states_mask(j, 1u << q);
    if (seen)
        sh = *seen;
    else if (tp_read(n->tp, sec_hdr_off(n, x), &sh, 8) < 0)
        return FMEM_EIO;
    for (;;) {
        if (!(h_lo(sh) & m))
            return FMEM_EDOUBLEFREE;
        if ((h_lo(sh) & m) != m)
            return FMEM_EBADHANDLE;
        log_flush_section(n, x, sh);
        uint64_t nv = sec_commit_value(n, sh, j, q, false, q, j, h_retry(sh), uid);
        int r = tp_cas(n->tp, sec_hdr_off(n, x), sh, nv, &old);
        if (r < 0)
            return r;
        if (r == 1) {
            cache_put(n->sec_cache, x, nv);
            CRASH_POINT(CP_SPAN_FREE_COMMIT);
            log_commit_section(n, x, nv);
            return 0;
        }
        sh = old;
        cache_put(n->sec_cache, x, old);
    }
}

int multi_free(struct node *n, uint64_t chunk, unsigned p, unsigned uid)
{
    uint64_t base = chunk / CHUNKS_PER_SECTION, nb = UINT64_C(1) << p;
    /* check every part before changing any */
    for (uint64_t i = 0; i < nb; i++) {
        uint64_t sh;
        if (tp_read(n->tp, sec_hdr_off(n, base + i), &sh, 8) < 0)
            return FMEM_EIO;
        if (h_lo(sh) != 0xFFFFFFFFu)
            return i == 0 && h_lo(sh) == 0 ? FMEM_EDOUBLEFREE : FMEM_EBADHANDLE;
    }
    int rc = 0;
    for (uint64_t i = 0; i < nb; i++) {
        int r = section_part_free(n, base + i, i == 0 ? p : 0, uid);
        if (r && !rc)
            rc = r;
    }
    return rc;
}

int multi_free_part(struct node *n, uint64_t x, unsigned p, unsigned uid)
{
    return section_part_free(n, x, p, uid);
}
