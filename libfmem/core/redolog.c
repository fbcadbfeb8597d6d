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
#include <stdlib.h>
#include <string.h>

#include "crashpoint.h"
#include "env_flag.h"
#include "fmem.h"
#include "node.h"
#include "thread_table.h"

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
    /* chunk blocks are 1..16 chunks; 7 is a claim record, 5 and 6 are
     * never written (a corrupt header may hold them) */
    if (sz > 4 || h_uid(h) == 0 || h_detached(h))
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

/* A log names a block by its first chunk and size: it must be a block of
 * this pool, aligned to its size. A corrupt header can say anything, and
 * its flush must not write outside the log (into the data behind it). */
static bool tlog_in_pool(const struct node *n, const struct tlog *t)
{
    if (t->log2_chunks > 40)
        return false;
    uint64_t len = UINT64_C(1) << t->log2_chunks;
    return t->chunk < n->g.nchunks && len <= n->g.nchunks - t->chunk &&
           (t->chunk & (len - 1)) == 0 && t->span < n->g.nspans;
}

static struct tlog span_tlog(uint64_t s, uint64_t h)
{
    struct tlog t = {0};
    unsigned sz = h_size(h);
    /* a header someone rewrote may name a block outside its span */
    if (h_uid(h) == 0 || sz == SPAN_LOG_CLAIM || sz > 4 ||
        h_off(h) + (1u << sz) > CHUNKS_PER_SPAN)
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
    if (h_uid(h) == 0 || (sz > 4 && sz != SEC_LOG_MULTI) ||
        (sz != SEC_LOG_MULTI && h_off(h) + (1u << sz) > SPANS_PER_SECTION))
        return t; /* nothing, or a block outside its section */
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

/* Write temporary log t (from the header at hdr_off, whose value was h) into
 * its full log entry, unless it is stale. One round trip reads the entry, the
 * header and the span's own header; then:
 *  - the entry already holds t: done;
 *  - the header no longer holds t: t was superseded, and whoever replaced it
 *    flushed it first (every header CAS flushes the pending log), so this
 *    flush arrived late: discard it;
 *  - t comes from a section header but its span is attached: a chunk-layer
 *    epoch began after t: discard;
 *  - otherwise t is the newest operation on its block: CAS it in.
 * The 7-bit timestamps alone cannot decide this: an entry whose block sat
 * idle while its header flipped 64 times looks newer than it is. They still
 * make successive entries of a block distinct, so the CAS cannot ABA. */
_Thread_local struct key_read log_key_read;

/* The calling thread's last allocation whose flush it posted without
 * waiting (tp_post): its next batch on that node's transport executes after
 * the flush, so it need not flush that header value again. Other threads
 * (other queue pairs) do not know it and flush it themselves. */
static _Thread_local struct {
    const struct node *n;
    uint64_t hdr_off, h, lost;
} posted_flush;

static bool own_posted_flush(const struct node *n, uint64_t hdr_off, uint64_t h)
{
    return posted_flush.n == n && posted_flush.hdr_off == hdr_off && posted_flush.h == h &&
           posted_flush.lost == tp_post_lost(n->tp);
}

/* Returns true when the flush was posted without waiting for it. */
static bool flush(struct node *n, const struct tlog *t, uint64_t hdr_off, uint64_t h, bool commit)
{
    const uint64_t logmask = ((UINT64_C(1) << 29) - 1) << H_OFF_SHIFT;
    uint64_t want = log_make(t->alloc, t->layer, t->log2_chunks, t->ts, t->uid);
    uint64_t eoff = log_off(n, t->chunk);
    uint64_t e, cur_hdr, cur_span, key;
    struct tp_op ops[4] = {
        {.kind = TP_READ, .off = eoff, .buf = &e, .len = 8},
        {.kind = TP_READ, .off = hdr_off, .buf = &cur_hdr, .len = 8},
        {.kind = TP_READ, .off = span_hdr_off(n, t->span), .buf = &cur_span, .len = 8},
    };
    bool section_domain = t->layer != LAYER_CHUNK;
    size_t nops = section_domain ? 3 : 2;
    /* the commit of node_alloc's own allocation: read the block's key too */
    bool key_too = commit && log_key_read.armed && t->alloc && t->layer != LAYER_SECTION;
    /* the commit CAS read the entry and key already (log_commit_cas_span):
     * the header then held this very log */
    bool have = commit && log_key_read.armed && log_key_read.entry_read &&
                log_key_read.chunk == t->chunk && log_key_read.log2c == t->log2_chunks &&
                t->alloc && !section_domain;
    bool from_snap = have && log_key_read.entry_snap;
    if (have) {
        log_key_read.entry_read = false;
        key_too = false;
        e = log_key_read.entry;
        cur_hdr = h;
    }
    if (key_too)
        ops[nops++] = (struct tp_op){.kind = TP_READ, .off = key_off(n, t->chunk, t->log2_chunks),
                                     .buf = &key, .len = 8};
    /* The flush of node_alloc's own allocation, right after its commit read
     * the entry: posted without waiting (the allocation returns a round trip
     * earlier). Until it lands the header holds the log, and whoever needs
     * the entry flushes it from there (alloc.c: settle), as after a crash
     * between commit and flush. */
    bool post = have;
    for (int tries = 0; tries < 64; tries++) {
        if (have)
            have = false;
        else if (tp_batch(n->tp, ops, nops) < 0)
            return false;
        if (key_too) {
            log_key_read = (struct key_read){.armed = true, .done = true, .chunk = t->chunk,
                                             .log2c = t->log2_chunks, .key = key};
            key_too = false;
            nops--;
        }
        if (log_op(e) == want) /* a quarantine mark is newer than its allocation */
            return false;
        if ((cur_hdr & logmask) != (h & logmask))
            return false;
        if (section_domain && !h_detached(cur_span))
            return false;
        CRASH_POINT(CP_FLUSH_READ);
        int r;
        if (post) {
            post = false;
            uint64_t lost = tp_post_lost(n->tp);
            struct tp_op op = {.kind = TP_CAS, .off = eoff, .expect = e, .desired = want};
            r = tp_post(n->tp, &op);
            tp_trace.log_cas++;
            atomic_fetch_add_explicit(&n->tp->n_logs, 1, memory_order_relaxed);
            if (r == 0) {
                posted_flush.n = n;
                posted_flush.hdr_off = hdr_off;
                posted_flush.h = h;
                posted_flush.lost = lost;
                return true;
            }
            if (r == 1) {
                r = op.old == e;
                if (from_snap && op.old != e && log_op(op.old) != want)
                    atomic_fetch_add_explicit(&log_snap_wrong, 1, memory_order_relaxed);
            }
        } else {
            r = tp_cas(n->tp, eoff, e, want, NULL);
            tp_trace.log_cas++;
            atomic_fetch_add_explicit(&n->tp->n_logs, 1, memory_order_relaxed);
        }
        if (r != 0)
            return false; /* written, or a transport error */
    }
    return false;
}

void log_flush_span(struct node *n, uint64_t s, uint64_t h)
{
    if (n->log_none)
        return;
    if (atomic_load_explicit(&n->span_flushed[s], memory_order_relaxed) == h ||
        own_posted_flush(n, span_hdr_off(n, s), h))
        return;
    struct tlog t = span_tlog(s, h);
    if (t.valid && tlog_in_pool(n, &t))
        flush(n, &t, span_hdr_off(n, s), h, false);
    atomic_store_explicit(&n->span_flushed[s], h, memory_order_relaxed);
}

void log_flush_section(struct node *n, uint64_t x, uint64_t h)
{
    if (n->log_none)
        return;
    if (atomic_load_explicit(&n->sec_flushed[x], memory_order_relaxed) == h)
        return;
    struct tlog t = sec_tlog(x, h);
    if (t.valid && tlog_in_pool(n, &t))
        flush(n, &t, sec_hdr_off(n, x), h, false);
    atomic_store_explicit(&n->sec_flushed[x], h, memory_order_relaxed);
}

/* After the own commit: always flush, never trusting the flushed-value
 * cache. A header value can recur exactly (same user, block and map, the
 * 7-bit timestamp wrapped), and skipping the own flush would leave the new
 * operation out of the full log for good. */
void log_commit_span(struct node *n, uint64_t s, uint64_t h)
{
    if (n->log_none)
        return;
    struct tlog t = span_tlog(s, h);
    if (t.valid && tlog_in_pool(n, &t) && flush(n, &t, span_hdr_off(n, s), h, true))
        return; /* posted: not known flushed to other threads */
    atomic_store_explicit(&n->span_flushed[s], h, memory_order_relaxed);
}

/* ---- the entries of a span, known from the thread's own commits -----------
 * The commit's flush needs the block's full log entry as it was before
 * (the CAS's expected value). An entry of a block that is free in a span
 * header value H changes only by flushes of operations on that block, and
 * every such operation is a CAS of the span header: so while the header
 * stays H, the entries of its free blocks stay what they were. A commit
 * that reads them all (one READ of the span's 32 entries, after its CAS in
 * the same chain) therefore knows, for its next commit in that span, the
 * entry of the block it takes, provided that commit's CAS finds the header
 * still holding its own previous value (nobody else operated in the span
 * meanwhile, so the entries read then are the entries now). The entry of
 * the block just allocated becomes the allocation's log: the header cannot
 * move past it without flushing it. A failed CAS forgets the span. Entries
 * of allocated blocks (quarantine marks change them without a header CAS)
 * are never used: such a block is not free in the header.
 * Over memory windows the same holds for the key entries of the span's
 * blocks of the commit's size (one contiguous run of the window-key table,
 * wkeys.h): a block's key entry changes only while it is allocated (its
 * free promotes the backup, the memory node binds a new one and only then
 * frees the block in its layer, a header CAS), so the keys of the free
 * blocks in H are what a READ after the CAS that made H returned, and a
 * commit that finds its snapshot valid posts the CAS alone. Not with type-2
 * windows (keys are bound per queue pair at allocation) nor on shm (keys
 * are per chunk there, shared by every size). A memory node that re-binds
 * its windows (a restart) is a different node to the transport (it refuses
 * to reconnect to it), so snapshots cannot outlive the keys they hold. */
#define SNAP_SLOTS 4

_Atomic uint64_t log_snap_wrong;

struct span_snap {
    const struct node *n; /* NULL: nothing known */
    uint64_t serial;      /* n's (a closed node's memory may be reused) */
    uint64_t s, hs;       /* span, and the header value the entries go with */
    uint64_t e[CHUNKS_PER_SPAN];
    /* the span's key entries of blocks of 2^klog2 chunks (CHUNKS_PER_SPAN
     * >> klog2 of them), valid with hs when keys_ok */
    bool keys_ok;
    unsigned klog2;
    uint64_t k[CHUNKS_PER_SPAN];
};

/* A table per thread (thread_table.h) */
static struct thread_table snap_table = THREAD_TABLE(SNAP_SLOTS, sizeof(struct span_snap));
static _Thread_local struct span_snap *tl_snaps;

static struct span_snap *span_snap_slot(uint64_t s)
{
    if (!tl_snaps && !(tl_snaps = thread_table_new(&snap_table)))
        return NULL;
    return &tl_snaps[s % SNAP_SLOTS];
}

/* Tests: FMEM_SPAN_SNAP=0 turns the snapshots off (every commit reads
 * the entry) */
static bool span_snap_on(void)
{
    static _Atomic int v = -1;
    return env_flag(&v, "FMEM_SPAN_SNAP", true);
}

int log_commit_cas_span(struct node *n, uint64_t s, uint64_t hv, uint64_t nv, uint64_t *old,
                        uint64_t chunk, unsigned log2c)
{
    if (n->log_none || !log_key_read.armed)
        return tp_cas(n->tp, span_hdr_off(n, s), hv, nv, old);
    uint64_t keys[CHUNKS_PER_SPAN], ents[CHUNKS_PER_SPAN];
    unsigned off = (unsigned)(chunk % CHUNKS_PER_SPAN);
    struct span_snap *sn = span_snap_on() ? span_snap_slot(s) : NULL;
    bool known = sn && sn->n == n && sn->serial == n->serial && sn->s == s && sn->hs == hv;
    /* window keys of the span's blocks of this size: one READ of them all
     * (else the block's own key) */
    bool span_keys = sn && n->tp->wkeys_off && !n->tp->keys_bound_qp && log2c <= 4;
    bool keys_known = known && span_keys && sn->keys_ok && sn->klog2 == log2c;
    unsigned kslot = span_keys ? off >> log2c : 0;
    /* the READs come after the CAS: what they read goes with nv (if nobody
     * moved the header in between, which the next commit's CAS tells) */
    struct tp_op ops[3] = {
        {.kind = TP_CAS, .off = span_hdr_off(n, s), .expect = hv, .desired = nv},
    };
    size_t nops = 1;
    if (!keys_known)
        ops[nops++] = span_keys ? (struct tp_op){.kind = TP_READ,
                                                 .off = key_off(n, s * CHUNKS_PER_SPAN, log2c),
                                                 .buf = keys,
                                                 .len = 8 * (CHUNKS_PER_SPAN >> log2c)}
                                : (struct tp_op){.kind = TP_READ,
                                                 .off = key_off(n, chunk, log2c),
                                                 .buf = keys, .len = 8};
    if (!known)
        ops[nops++] = (struct tp_op){.kind = TP_READ, .off = log_off(n, s * CHUNKS_PER_SPAN),
                                     .buf = ents, .len = sizeof ents};
    int rc = tp_batch(n->tp, ops, nops);
    if (rc < 0 || ops[0].old != hv) {
        if (sn && sn->n == n && sn->s == s)
            sn->n = NULL;
        if (rc < 0)
            return rc;
        *old = ops[0].old;
        return 0;
    }
    *old = ops[0].old;
    uint64_t e = known ? sn->e[off] : ents[off];
    uint64_t key = keys_known ? sn->k[kslot] : keys[kslot];
    if (known)
        tp_trace.snap_hits++;
    if (sn) {
        if (!known) {
            memcpy(sn->e, ents, sizeof ents);
            sn->n = n;
            sn->serial = n->serial;
            sn->s = s;
        }
        if (span_keys && !keys_known) {
            memcpy(sn->k, keys, 8 * (CHUNKS_PER_SPAN >> log2c));
            sn->klog2 = log2c;
        }
        sn->keys_ok = span_keys;
        uint64_t c, want;
        if (log_expected_span(s, nv, &c, &want) && c == chunk) {
            sn->hs = nv;
            sn->e[off] = want;
        } else {
            sn->n = NULL;
        }
    }
    /* read after our CAS in the same chain (or known from before it): the
     * block's entry before our flush, and its key (nobody changes the key
     * of an allocated block but its free) */
    log_key_read = (struct key_read){.armed = true, .done = true, .chunk = chunk, .log2c = log2c,
                                     .key = key, .entry_read = true, .entry = e,
                                     .entry_snap = known};
    return 1;
}

void log_commit_section(struct node *n, uint64_t x, uint64_t h)
{
    if (n->log_none)
        return;
    struct tlog t = sec_tlog(x, h);
    if (t.valid && tlog_in_pool(n, &t))
        flush(n, &t, sec_hdr_off(n, x), h, true);
    atomic_store_explicit(&n->sec_flushed[x], h, memory_order_relaxed);
}

/* The entry a header's temporary log belongs in, and what it must hold
 * there once flushed. false: the header holds nothing to flush (no log, a
 * claim record, or a section log whose span has since been attached, which
 * a flush would discard). */
bool log_expected_span(uint64_t s, uint64_t h, uint64_t *chunk, uint64_t *want)
{
    struct tlog t = span_tlog(s, h);
    if (!t.valid)
        return false;
    *chunk = t.chunk;
    *want = log_make(t.alloc, t.layer, t.log2_chunks, t.ts, t.uid);
    return true;
}

bool log_expected_section(uint64_t x, uint64_t h, const uint64_t span_hdrs[SPANS_PER_SECTION],
                          uint64_t *chunk, uint64_t *want)
{
    struct tlog t = sec_tlog(x, h);
    if (!t.valid)
        return false;
    *chunk = t.chunk;
    *want = log_make(t.alloc, t.layer, t.log2_chunks, t.ts, t.uid);
    return h_detached(span_hdrs[t.span % SPANS_PER_SECTION]);
}

void log_flush_span_now(struct node *n, uint64_t s, uint64_t h) { log_commit_span(n, s, h); }
void log_flush_section_now(struct node *n, uint64_t x, uint64_t h) { log_commit_section(n, x, h); }

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
    [CP_FREE_QUARANTINED] = "free-quarantined",
    [CP_FLUSH_READ] = "flush-read",
    [CP_ALLOC_DONE] = "alloc-done",
    [CP_QUARANTINE_PART] = "quarantine-part",
    [CP_OWN_FREE_HELD] = "own-free-held",
};
