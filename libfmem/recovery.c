/* recovery.c - reclaim the blocks of a dead user without stopping anyone:
 * flush every pending temporary log (so every full log entry holds the
 * latest operation on its block), finish the span moves the user left
 * half-done, then walk the full log and free each block whose latest entry
 * is an allocation by that user. Frees go through the ordinary CAS protocol,
 * so they race with live users exactly like another client would. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "protocol.h"

#define LOG_BATCH 65536 /* entries per READ while walking the full log */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Flush every pending temporary log of the node; with uid != 0 also
 * finish that user's half-done span moves. st may be NULL. */
void node_flush_all(struct node *n, unsigned uid, fmem_recovery_stats *st)
{
    fmem_recovery_stats dummy;
    if (!st)
        st = &dummy;
    node_forget_flushed(n);
    node_refresh_all(n);
    for (uint64_t x = 0; x < n->g.nsections; x++) {
        log_flush_section(n, x, cache_get(n->sec_cache, x));
        st->headers_scanned++;
    }
    for (uint64_t s = 0; s < n->g.nspans; s++) {
        uint64_t h = cache_get(n->span_cache, s);
        st->headers_scanned++;
        if (h_detached(h) && h_size(h) == SPAN_LOG_CLAIM) {
            if (uid && h_uid(h) == uid) {
                chunk_clear_claim(n, s, uid);
                st->claims_cleared++;
            }
            continue;
        }
        if (h_uid(h) != 0)
            log_flush_span(n, s, h);
    }
}

static void free_entry(struct node *n, uint64_t c, uint64_t e, fmem_recovery_stats *st)
{
    unsigned k = log_log2(e), uid = log_uid(e);
    int rc;
    uint64_t bytes;
    if (log_layer(e) == LAYER_SECTION) {
        /* each section of a multi-section block has its own entry */
        rc = node_free_section_as(n, c / CHUNKS_PER_SECTION, k - 9, uid);
        bytes = (uint64_t)CHUNKS_PER_SECTION << CHUNK_SHIFT;
    } else {
        rc = node_free_as(n, c, k, uid);
        bytes = (UINT64_C(1) << k) << CHUNK_SHIFT;
    }
    if (rc == 0) {
        st->blocks_freed++;
        st->bytes_freed += bytes;
    }
}

/* Call fn for every full log entry that records an allocation by uid
 * (the caller flushed the temporary logs). Returns entries scanned or a
 * negative FMEM_E*. */
int64_t node_walk_allocs(struct node *n, unsigned uid,
                         void (*fn)(struct node *n, uint64_t chunk, uint64_t e, void *arg), void *arg)
{
    /* mmap, not malloc: this runs in fork handlers too, where a malloc
     * interposer may not be ready */
    uint64_t *buf = mmap(NULL, 8 * LOG_BATCH, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
    if (buf == MAP_FAILED)
        return FMEM_ENOMEM;
    int64_t rc = (int64_t)n->g.nchunks;
    for (uint64_t base = 0; base < n->g.nchunks; base += LOG_BATCH) {
        uint64_t cnt = n->g.nchunks - base < LOG_BATCH ? n->g.nchunks - base : LOG_BATCH;
        if (tp_read(n->tp, log_off(n, base), buf, 8 * cnt) < 0) {
            rc = FMEM_EIO;
            break;
        }
        for (uint64_t i = 0; i < cnt; i++) {
            uint64_t e = buf[i];
            if (log_valid(e) && log_alloc(e) && log_uid(e) == uid)
                fn(n, base + i, e, arg);
        }
    }
    munmap(buf, 8 * LOG_BATCH);
    return rc;
}

static void free_found(struct node *n, uint64_t chunk, uint64_t e, void *st)
{
    free_entry(n, chunk, e, st);
}

static int recover_node(struct node *n, unsigned uid, fmem_recovery_stats *st)
{
    uint64_t before = st->logs_flushed;
    uint64_t log_cas0 = tp_trace.log_cas;
    node_flush_all(n, uid, st);
    st->logs_flushed = before + (tp_trace.log_cas - log_cas0);
    int64_t scanned = node_walk_allocs(n, uid, free_found, st);
    if (scanned < 0)
        return (int)scanned;
    st->entries_scanned += (uint64_t)scanned;
    node_clear_uid(n, uid);
    return 0;
}

int fmem_recover(fmem_pool *p, unsigned uid, fmem_recovery_stats *out)
{
    if (!p || uid == 0 || uid > MAX_UID)
        return FMEM_EINVAL;
    if (p->nnodes == 0) /* not an embedded pool: the memory node recovers */
        return FMEM_ENOTSUP;
    for (unsigned i = 0; i < p->nnodes; i++)
        if (p->nodes[i]->uid == uid)
            return FMEM_EBUSY; /* that is us: we are not dead */
    fmem_recovery_stats st = {0};
    uint64_t t0 = now_ns();
    int rc = 0;
    for (unsigned i = 0; i < p->nnodes && rc == 0; i++)
        rc = recover_node(p->nodes[i], uid, &st);
    st.elapsed_ns = now_ns() - t0;
    if (out)
        *out = st;
    return rc;
}

unsigned fmem_user_id(fmem_pool *p, unsigned node)
{
    return p && node < p->nnodes ? p->nodes[node]->uid : 0;
}
