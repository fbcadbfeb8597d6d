/* verify.c - check the headers of every node against its full redo log.
 *
 * From the headers: which chunks are allocated, and by which layer (chunk
 * blocks: set bits in an attached span; span and section blocks: spans in
 * state 11). From the log: which chunks the latest allocation entries own.
 * Every allocated chunk must be owned by exactly one entry of its layer,
 * every owned chunk must be allocated, and each span's state must agree
 * with its own header. */
#include <stdlib.h>
#include <string.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "protocol.h"

#define DETAIL_MAX 20

struct vctx {
    fmem_verify_report *r;
    FILE *detail;
    unsigned shown;
    unsigned node;
};

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

/* owner[c]: 0 free; 1 + layer class of the entry owning chunk c
 * (1: chunk layer, 2: span or section layer) */
static int verify_node(struct node *n, struct vctx *v)
{
    const struct geometry *g = &n->g;
    uint8_t *owner = calloc(g->nchunks, 1);
    uint64_t *log = malloc(8 * g->nchunks);
    if (!owner || !log) {
        free(owner);
        free(log);
        return FMEM_ENOMEM;
    }
    /* flush pending temporary logs, as any client would, then read all */
    node_forget_flushed(n);
    node_refresh_all(n);
    for (uint64_t x = 0; x < g->nsections; x++)
        log_flush_section(n, x, cache_get(n->sec_cache, x));
    for (uint64_t s = 0; s < g->nspans; s++)
        log_flush_span(n, s, cache_get(n->span_cache, s));
    node_refresh_all(n);
    if (tp_read(n->tp, g->log_off, log, 8 * g->nchunks) < 0) {
        free(owner);
        free(log);
        return FMEM_EIO;
    }
    fmem_verify_report *r = v->r;
    for (uint64_t c = 0; c < g->nchunks; c++) {
        uint64_t e = log[c];
        if (!log_valid(e) || !log_alloc(e))
            continue;
        unsigned layer = log_layer(e), k = log_log2(e);
        uint64_t len = layer == LAYER_SECTION ? CHUNKS_PER_SECTION : (UINT64_C(1) << k);
        bool shape_ok = layer != 3 && k <= 40 &&
                        (layer == LAYER_CHUNK ? k <= 4 : layer == LAYER_SPAN ? (k >= 5 && k <= 9) : k >= 9) &&
                        (c & (len - 1)) == 0 && len <= g->nchunks - c;
        if (!shape_ok) {
            note(v, &r->bad_entries, "malformed log entry", c);
            continue;
        }
        for (uint64_t i = c; i < c + len; i++) {
            if (owner[i])
                note(v, &r->owned_twice, "chunk owned by two log entries", i);
            owner[i] = layer == LAYER_CHUNK ? 1 : 2;
            r->chunks_owned++;
        }
    }
    for (uint64_t x = 0; x < g->nsections; x++) {
        uint64_t sh = cache_get(n->sec_cache, x);
        for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
            uint64_t s = x * SPANS_PER_SECTION + j, ph = cache_get(n->span_cache, s);
            uint64_t c0 = s * CHUNKS_PER_SPAN;
            unsigned st = sec_state(sh, j);
            bool claim = h_detached(ph) && h_size(ph) == SPAN_LOG_CLAIM && h_uid(ph) != 0;
            if (claim) {
                r->claims_in_progress++;
                if (v->detail && v->shown < DETAIL_MAX)
                    fprintf(v->detail, "node %u: span %llu is being moved by user %u\n",
                            v->node, (unsigned long long)s, h_uid(ph));
            }
            if (h_detached(ph) && h_lo(ph) != 0)
                note(v, &r->state_mismatch, "detached span with chunks allocated", c0);
            for (unsigned i = 0; i < CHUNKS_PER_SPAN; i++) {
                uint64_t c = c0 + i;
                unsigned want; /* 0 free, 1 chunk layer, 2 section layer */
                if (st == SPAN_FULL)
                    want = 2;
                else if (!h_detached(ph) && (h_lo(ph) >> i & 1))
                    want = 1;
                else
                    want = 0;
                if (want)
                    r->chunks_allocated++;
                if (want && owner[c] != want)
                    note(v, owner[c] ? &r->owned_twice : &r->alloc_without_owner,
                         owner[c] ? "chunk owned through the wrong layer"
                                  : "allocated chunk with no owner",
                         c);
                else if (!want && owner[c])
                    note(v, &r->owner_of_free, "log entry owns a free chunk", c);
            }
            if (st == SPAN_FULL && !h_detached(ph))
                note(v, &r->state_mismatch, "span block over an attached span", c0);
            else if (st == SPAN_FREE && !h_detached(ph))
                note(v, &r->state_mismatch, "free span state over an attached span", c0);
            else if ((st == SPAN_INUSE || st == SPAN_CONTENDED) && h_detached(ph) && !claim)
                note(v, &r->state_mismatch, "in-use span state over a detached span", c0);
        }
    }
    free(owner);
    free(log);
    return 0;
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
