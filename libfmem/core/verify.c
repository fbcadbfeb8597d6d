/* verify.c - check the headers of every node against its full redo log,
 * also while other users allocate and free, and find the blocks of users
 * nobody holds.
 *
 * A section is a closed unit: its header, its 16 span headers and its 512
 * log entries say everything about its chunks (chunk blocks lie in one span,
 * span blocks in one section, and a multi-section block has an entry in
 * each of its sections). Each section is checked on a snapshot: its headers
 * and entries are read, the temporary logs the headers still hold are
 * flushed (as any client would) and everything read again, until the
 * headers read before and after the entries are the same. Every operation
 * changes a header and every header keeps its last operation's log until
 * the next CAS flushes it, so such a snapshot is what the section held at
 * one moment: a section that other users change all the time is retried,
 * and one that never holds still is reported as not checked, never as
 * inconsistent.
 *
 * In a snapshot every allocated chunk must be owned by exactly one
 * allocation entry of its layer, every owned chunk must be allocated, and
 * each span's state must agree with its own header. Allocation entries
 * whose user holds no slot in the user table are leaks: nobody will ever
 * free them, and recovery of that user id takes them back. Such an entry
 * counts only if a second snapshot, taken after the user table was read,
 * shows the same allocation: the block was then allocated while its user
 * held no slot, which no live user's block ever is. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "protocol.h"

#define DETAIL_MAX 20
#define SNAP_TRIES 400 /* snapshots of one section before it counts as busy */

struct vctx {
    fmem_verify_report *r;
    FILE *detail;
    unsigned shown;
    unsigned node;
};

/* One section as it was at one moment. */
struct snap {
    uint64_t sh;                       /* section header */
    uint64_t ph[SPANS_PER_SECTION];    /* span headers */
    uint64_t log[CHUNKS_PER_SECTION];  /* full log entries */
};

/* An allocation entry of the log: where, and what it said. */
struct owned {
    uint64_t chunk, entry;
};

struct per_user {
    uint64_t blocks, bytes;
};

static void show(struct vctx *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void show(struct vctx *v, const char *fmt, ...)
{
    if (!v->detail || v->shown >= DETAIL_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(v->detail, "node %u: ", v->node);
    vfprintf(v->detail, fmt, ap);
    fputc('\n', v->detail);
    va_end(ap);
    if (++v->shown == DETAIL_MAX)
        fprintf(v->detail, "node %u: further details not shown\n", v->node);
}

static void note(struct vctx *v, uint64_t *counter, const char *what, uint64_t where)
{
    (*counter)++;
    v->r->errors++;
    if (v->detail && v->shown < DETAIL_MAX) {
        fprintf(v->detail, "node %u: %s at chunk %llu\n", v->node, what,
                (unsigned long long)where);
        if (++v->shown == DETAIL_MAX)
            fprintf(v->detail, "node %u: further problems not shown\n", v->node);
    }
}

static void backoff(int attempt)
{
    if (attempt < 8) {
        sched_yield();
        return;
    }
    long us = attempt < 40 ? 20 * attempt : 1000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Flush the temporary logs section x's headers hold but its entries do not
 * have yet. Returns whether it flushed anything. */
static bool flush_pending(struct node *n, uint64_t x, const struct snap *sn)
{
    uint64_t base = x * CHUNKS_PER_SECTION, c, want;
    bool flushed = false;
    if (n->log_none) /* benchmarks: nothing is ever flushed */
        return false;
    for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
        uint64_t s = x * SPANS_PER_SECTION + j;
        if (log_expected_span(s, sn->ph[j], &c, &want) && log_op(sn->log[c - base]) != want) {
            log_flush_span_now(n, s, sn->ph[j]);
            flushed = true;
        }
    }
    if (log_expected_section(x, sn->sh, sn->ph, &c, &want) && log_op(sn->log[c - base]) != want) {
        log_flush_section_now(n, x, sn->sh);
        flushed = true;
    }
    return flushed;
}

/* 0: *sn is a snapshot of section x; 1: it never held still; <0: error. */
static int take_snapshot(struct node *n, uint64_t x, struct snap *sn)
{
    uint64_t again[1 + SPANS_PER_SECTION];
    uint64_t s0 = x * SPANS_PER_SECTION;
    for (int attempt = 0; attempt < SNAP_TRIES; attempt++) {
        struct tp_op ops[3] = {
            {.kind = TP_READ, .off = sec_hdr_off(n, x), .buf = &sn->sh, .len = 8},
            {.kind = TP_READ, .off = span_hdr_off(n, s0), .buf = sn->ph, .len = sizeof sn->ph},
            {.kind = TP_READ, .off = log_off(n, x * CHUNKS_PER_SECTION), .buf = sn->log,
             .len = sizeof sn->log},
        };
        int rc = tp_batch(n->tp, ops, 3);
        if (rc)
            return rc;
        if (flush_pending(n, x, sn))
            continue; /* read it all again with the logs in place */
        struct tp_op chk[2] = {
            {.kind = TP_READ, .off = sec_hdr_off(n, x), .buf = &again[0], .len = 8},
            {.kind = TP_READ, .off = span_hdr_off(n, s0), .buf = &again[1], .len = sizeof sn->ph},
        };
        if ((rc = tp_batch(n->tp, chk, 2)))
            return rc;
        if (again[0] == sn->sh && !memcmp(&again[1], sn->ph, sizeof sn->ph))
            return 0;
        backoff(attempt);
    }
    return 1;
}

/* Chunks an allocation entry covers, or 0 if it is malformed at chunk c. */
static uint64_t entry_len(const struct node *n, uint64_t c, uint64_t e)
{
    unsigned layer = log_layer(e), k = log_log2(e);
    uint64_t len = layer == LAYER_SECTION ? CHUNKS_PER_SECTION : (UINT64_C(1) << (k & 31));
    bool ok = layer != 3 && k <= 40 &&
              (layer == LAYER_CHUNK ? k <= 4 : layer == LAYER_SPAN ? (k >= 5 && k <= 9) : k >= 9) &&
              (c & (len - 1)) == 0 && len <= n->g.nchunks - c;
    return ok ? len : 0;
}

/* Is the block of entry e at chunk c allocated in its layer in sn? */
static bool allocated_in(const struct snap *sn, uint64_t c, uint64_t e)
{
    unsigned i = c % CHUNKS_PER_SECTION, j = i / CHUNKS_PER_SPAN;
    if (log_layer(e) == LAYER_CHUNK)
        return !h_detached(sn->ph[j]) && (h_lo(sn->ph[j]) >> (i % CHUNKS_PER_SPAN) & 1);
    return sec_state(sn->sh, j) == SPAN_FULL;
}

/* Compare section x's headers with its entries; append its allocation
 * entries to *own. */
static int check_section(struct node *n, uint64_t x, const struct snap *sn, struct vctx *v,
                         struct owned **own, uint64_t *nown, uint64_t *cap)
{
    fmem_verify_report *r = v->r;
    uint64_t base = x * CHUNKS_PER_SECTION;
    uint8_t owner[CHUNKS_PER_SECTION] = {0}; /* 0 free, 1 chunk layer, 2 span/section */
    for (unsigned i = 0; i < CHUNKS_PER_SECTION; i++) {
        uint64_t e = sn->log[i], c = base + i;
        if (!log_valid(e) || !log_alloc(e))
            continue;
        uint64_t len = entry_len(n, c, e);
        if (!len) {
            note(v, &r->bad_entries, "malformed log entry", c);
            continue;
        }
        for (uint64_t k = i; k < i + len && k < CHUNKS_PER_SECTION; k++) {
            if (owner[k])
                note(v, &r->owned_twice, "chunk owned by two log entries", base + k);
            owner[k] = log_layer(e) == LAYER_CHUNK ? 1 : 2;
            r->chunks_owned++;
        }
        if (*nown == *cap) {
            uint64_t ncap = *cap ? 2 * *cap : 4096;
            struct owned *grown = realloc(*own, ncap * sizeof **own);
            if (!grown)
                return FMEM_ENOMEM;
            *own = grown;
            *cap = ncap;
        }
        (*own)[(*nown)++] = (struct owned){c, e};
    }
    for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
        uint64_t s = x * SPANS_PER_SECTION + j, ph = sn->ph[j];
        uint64_t c0 = s * CHUNKS_PER_SPAN;
        unsigned st = sec_state(sn->sh, j);
        bool claim = h_detached(ph) && h_size(ph) == SPAN_LOG_CLAIM && h_uid(ph) != 0;
        if (claim) {
            r->claims_in_progress++;
            if (v->detail && v->shown < DETAIL_MAX)
                fprintf(v->detail, "node %u: span %llu is being moved by user %u\n", v->node,
                        (unsigned long long)s, h_uid(ph));
        }
        if (h_detached(ph) && h_lo(ph) != 0)
            note(v, &r->state_mismatch, "detached span with chunks allocated", c0);
        for (unsigned i = 0; i < CHUNKS_PER_SPAN; i++) {
            unsigned k = j * CHUNKS_PER_SPAN + i;
            unsigned want; /* 0 free, 1 chunk layer, 2 section layer */
            if (st == SPAN_FULL)
                want = 2;
            else if (!h_detached(ph) && (h_lo(ph) >> i & 1))
                want = 1;
            else
                want = 0;
            if (want)
                r->chunks_allocated++;
            if (want && owner[k] != want)
                note(v, owner[k] ? &r->owned_twice : &r->alloc_without_owner,
                     owner[k] ? "chunk owned through the wrong layer"
                              : "allocated chunk with no owner",
                     c0 + i);
            else if (!want && owner[k])
                note(v, &r->owner_of_free, "log entry owns a free chunk", c0 + i);
        }
        if (st == SPAN_FULL && !h_detached(ph))
            note(v, &r->state_mismatch, "span block over an attached span", c0);
        else if (st == SPAN_FREE && !h_detached(ph))
            note(v, &r->state_mismatch, "free span state over an attached span", c0);
        else if ((st == SPAN_INUSE || st == SPAN_CONTENDED) && h_detached(ph) && !claim)
            note(v, &r->state_mismatch, "in-use span state over a detached span", c0);
    }
    return 0;
}

static uint64_t entry_bytes(uint64_t e)
{
    uint64_t chunks = log_layer(e) == LAYER_SECTION ? CHUNKS_PER_SECTION
                                                     : UINT64_C(1) << (log_log2(e) & 31);
    return chunks << CHUNK_SHIFT;
}

/* Allocations of users that hold no slot (leaks) and of users whose
 * process is gone (awaiting recovery), from the entries of pass one:
 * a leak candidate is confirmed by a second snapshot of its section. */
static int find_orphans(struct node *n, struct vctx *v, const struct owned *own, uint64_t nown)
{
    fmem_verify_report *r = v->r;
    const uint64_t nusers = n->g.nusers;
    uint32_t *pids = calloc(nusers, sizeof *pids);
    struct per_user *leak = calloc(MAX_UID + 1, sizeof *leak);
    struct per_user *dead = calloc(MAX_UID + 1, sizeof *dead);
    struct snap *sn = malloc(sizeof *sn);
    int rc = 0;
    if (!pids || !leak || !dead || !sn) {
        rc = FMEM_ENOMEM;
        goto out;
    }
    if (tp_read(n->tp, n->g.users_off, pids, 4 * nusers) < 0) {
        rc = FMEM_EIO;
        goto out;
    }
    for (uint64_t u = 1; u < nusers; u++)
        if (node_user_gone(n, (unsigned)u, pids[u]))
            r->dead_slots++;
    uint64_t snapped = UINT64_MAX; /* section held in *sn */
    int busy = 0;
    for (uint64_t i = 0; i < nown; i++) {
        unsigned uid = log_uid(own[i].entry);
        uint32_t pid = uid < nusers ? pids[uid] : 0;
        if (pid) {
            if (node_user_gone(n, uid, pid)) {
                dead[uid].blocks++;
                dead[uid].bytes += entry_bytes(own[i].entry);
            }
            continue;
        }
        uint64_t x = own[i].chunk / CHUNKS_PER_SECTION;
        if (x != snapped) {
            busy = take_snapshot(n, x, sn);
            if (busy < 0) {
                rc = busy;
                goto out;
            }
            snapped = x;
        }
        if (busy || sn->log[own[i].chunk % CHUNKS_PER_SECTION] != own[i].entry ||
            !allocated_in(sn, own[i].chunk, own[i].entry))
            continue; /* changed since: not a block that sat there unowned */
        leak[uid].blocks++;
        leak[uid].bytes += entry_bytes(own[i].entry);
    }
    for (unsigned u = 1; u <= MAX_UID; u++) {
        if (leak[u].blocks) {
            r->leaked_blocks += leak[u].blocks;
            r->leaked_bytes += leak[u].bytes;
            r->errors += leak[u].blocks;
            if (u < nusers)
                show(v, "user %u holds no user slot but owns %llu allocations (%llu bytes): "
                        "leaked; recovering user %u takes them back",
                     u, (unsigned long long)leak[u].blocks, (unsigned long long)leak[u].bytes, u);
            else
                show(v, "user %u is beyond the user table (%llu slots) but owns %llu allocations "
                        "(%llu bytes): leaked, from a damaged log entry",
                     u, (unsigned long long)nusers, (unsigned long long)leak[u].blocks,
                     (unsigned long long)leak[u].bytes);
        }
        if (dead[u].blocks) {
            r->dead_owner_blocks += dead[u].blocks;
            r->dead_owner_bytes += dead[u].bytes;
            show(v, "user %u (pid %u, gone) owns %llu allocations (%llu bytes): awaiting recovery",
                 u, pids[u], (unsigned long long)dead[u].blocks, (unsigned long long)dead[u].bytes);
        }
    }
out:
    free(pids);
    free(leak);
    free(dead);
    free(sn);
    return rc;
}

static int verify_node(struct node *n, struct vctx *v)
{
    struct snap *sn = malloc(sizeof *sn);
    struct owned *own = NULL;
    uint64_t nown = 0, cap = 0;
    int rc = sn ? 0 : FMEM_ENOMEM;
    for (uint64_t x = 0; x < n->g.nsections && rc == 0; x++) {
        rc = take_snapshot(n, x, sn);
        if (rc == 1) { /* never held still: say so, do not guess */
            v->r->busy_sections++;
            show(v, "section %llu changed during each of %d snapshots: not checked",
                 (unsigned long long)x, SNAP_TRIES);
            rc = 0;
            continue;
        }
        if (rc == 0)
            rc = check_section(n, x, sn, v, &own, &nown, &cap);
    }
    if (rc == 0)
        rc = find_orphans(n, v, own, nown);
    free(own);
    free(sn);
    return rc;
}

int fmem_verify(fmem_pool *p, fmem_verify_report *report, FILE *detail)
{
    if (!p || !report)
        return FMEM_EINVAL;
    if (p->nnodes == 0) /* not an embedded pool */
        return FMEM_ENOTSUP;
    memset(report, 0, sizeof *report);
    struct vctx v = {.r = report, .detail = detail};
    for (unsigned i = 0; i < p->nnodes; i++) {
        v.node = i;
        int rc = verify_node(p->nodes[i], &v);
        if (rc)
            return rc;
    }
    return 0;
}
