/* redolog.c - flushing the temporary redo log (written by the commit CAS
 * into a header's high bits) into the full redo log entry of the block's
 * first chunk.
 *
 * A flush is a CAS on the entry that is discarded when the entry already
 * holds this operation or a newer one. Within one timestamp domain (span
 * headers: chunk blocks; section headers: span and section blocks) the 7-bit
 * timestamps decide. Across domains they cannot be compared; there the
 * current layer of the span decides: a chunk-layer log may only be written
 * while the span is attached, a section-layer one while it is detached, and
 * in both cases only while it is still the latest log in its header. */
#include "crashpoint.h"
#include "fmem.h"
#include "node.h"

/* Block described by a temporary log, and whether the op was an allocation. */
struct tlog {
    bool valid;
    bool alloc;
    unsigned layer, log2_chunks, ts, uid;
    uint64_t chunk; /* first chunk: index of the full log entry */
    uint64_t span;  /* first span of the block */
};

static bool span_log_alloc(uint64_t h)
{
    unsigned sz = h_size(h);
    if (sz == SPAN_LOG_CLAIM || h_uid(h) == 0 || h_detached(h))
        return false;
    uint32_t bits = (uint32_t)(((UINT64_C(1) << (1u << sz)) - 1) << h_off(h));
    return (h_lo(h) & bits) == bits;
}

static bool sec_log_alloc(uint64_t h)
{
    unsigned sz = h_size(h);
    if (h_uid(h) == 0)
        return false;
    if (sz == SEC_LOG_MULTI)
        return h_lo(h) == 0xFFFFFFFFu;
    if (sz > 4)
        return false;
    uint32_t m = sec_states_mask(h_off(h), 1u << sz);
    return (h_lo(h) & m) == m; /* every span of the block in state 11 */
}

static struct tlog span_tlog(uint64_t s, uint64_t h)
{
    struct tlog t = {0};
    unsigned sz = h_size(h);
    if (h_uid(h) == 0 || sz == SPAN_LOG_CLAIM || sz > 4)
        return t;
    t.valid = true;
    t.alloc = span_log_alloc(h);
    t.layer = LAYER_CHUNK;
    t.log2_chunks = sz;
    t.ts = h_ts(h);
    t.uid = h_uid(h);
    t.chunk = s * CHUNKS_PER_SPAN + h_off(h);
    t.span = s;
    return t;
}

static struct tlog sec_tlog(uint64_t x, uint64_t h)
{
    struct tlog t = {0};
    unsigned sz = h_size(h);
    if (h_uid(h) == 0 || (sz > 4 && sz != SEC_LOG_MULTI))
        return t;
    t.valid = true;
    t.alloc = sec_log_alloc(h);
    t.ts = h_ts(h);
    t.uid = h_uid(h);
    if (sz == SEC_LOG_MULTI) {
        /* the first part of a block carries log2 of its sections in the
         * offset field, the other parts 0 */
        t.layer = LAYER_SECTION;
        t.log2_chunks = 9 + h_off(h);
        t.span = x * SPANS_PER_SECTION;
    } else {
        t.layer = LAYER_SPAN;
        t.log2_chunks = 5 + sz;
        t.span = x * SPANS_PER_SECTION + h_off(h);
    }
    t.chunk = t.span * CHUNKS_PER_SPAN;
    return t;
}

unsigned log_next_ts(uint64_t h, bool prev_alloc, bool alloc)
{
    return (h_ts(h) + (prev_alloc != alloc)) & TS_MASK;
}

/* hdr_off: the header the log came from; h: its value then. */
static void flush(struct node *n, const struct tlog *t, uint64_t hdr_off, uint64_t h)
{
    uint64_t want = log_make(t->alloc, t->layer, t->log2_chunks, t->ts, t->uid);
    uint64_t eoff = log_off(n, t->chunk);
    uint64_t e;
    if (tp_read(n->tp, eoff, &e, 8) < 0)
        return;
    for (int tries = 0; tries < 64; tries++) {
        if (e == want)
            return;
        if (log_valid(e)) {
            if (log_same_domain(log_layer(e), t->layer)) {
                if (!ts_newer(t->ts, log_ts(e)))
                    return; /* the entry holds this op or a newer one */
            } else {
                /* cross-layer: check the span's current layer and that this
                 * log is still the newest in its header (one batch) */
                uint64_t cur_hdr, cur_span;
                struct tp_op ops[2] = {
                    {.kind = TP_READ, .off = hdr_off, .buf = &cur_hdr, .len = 8},
                    {.kind = TP_READ, .off = span_hdr_off(n, t->span), .buf = &cur_span, .len = 8},
                };
                if (tp_batch(n->tp, ops, 2) < 0)
                    return;
                const uint64_t logmask = ((UINT64_C(1) << 29) - 1) << H_OFF_SHIFT;
                if ((cur_hdr & logmask) != (h & logmask))
                    return;
                if (h_detached(cur_span) != (t->layer != LAYER_CHUNK))
                    return;
            }
        }
        CRASH_POINT(CP_FLUSH_READ);
        int r = tp_cas(n->tp, eoff, e, want, &e);
        tp_trace.log_cas++;
        if (r != 0)
            return; /* written, or a transport error */
    }
}

void log_flush_span(struct node *n, uint64_t s, uint64_t h)
{
    if (!n->log_flush)
        return;
    if (atomic_load_explicit(&n->span_flushed[s], memory_order_relaxed) == h)
        return;
    struct tlog t = span_tlog(s, h);
    if (t.valid)
        flush(n, &t, span_hdr_off(n, s), h);
    atomic_store_explicit(&n->span_flushed[s], h, memory_order_relaxed);
}

void log_flush_section(struct node *n, uint64_t x, uint64_t h)
{
    if (!n->log_flush)
        return;
    if (atomic_load_explicit(&n->sec_flushed[x], memory_order_relaxed) == h)
        return;
    struct tlog t = sec_tlog(x, h);
    if (t.valid)
        flush(n, &t, sec_hdr_off(n, x), h);
    atomic_store_explicit(&n->sec_flushed[x], h, memory_order_relaxed);
}

bool log_span_prev_alloc(uint64_t h) { return span_log_alloc(h); }
bool log_sec_prev_alloc(uint64_t h) { return sec_log_alloc(h); }

void (*fmem_crash_hook)(enum crash_point cp);
const char *const crash_point_names[CP_COUNT] = {
    [CP_CHUNK_COMMIT] = "chunk-commit",
    [CP_CHUNK_FREE_COMMIT] = "chunk-free-commit",
    [CP_CLAIM_RECORDED] = "claim-recorded",
    [CP_CLAIM_SECTION] = "claim-section",
    [CP_RELEASE_DETACHED] = "release-detached",
    [CP_RELEASE_SECTION] = "release-section",
    [CP_SPAN_COMMIT] = "span-commit",
    [CP_SPAN_FREE_COMMIT] = "span-free-commit",
    [CP_MULTI_PART] = "multi-part",
    [CP_MULTI_FREE_PART] = "multi-free-part",
    [CP_FREE_REVOKED] = "free-revoked",
    [CP_FLUSH_READ] = "flush-read",
    [CP_ALLOC_DONE] = "alloc-done",
};
