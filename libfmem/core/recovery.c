/* recovery.c - reclaim the blocks of a dead user without stopping anyone:
 * flush every pending temporary log (so every full log entry holds the
 * latest operation on its block), finish the span moves the user left
 * half-done, then walk the full log and free each block whose latest entry
 * is an allocation by that user. Frees go through the ordinary CAS protocol,
 * so they race with live users exactly like another client would. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "fmem_admin.h"
#include "pool_internal.h"
#include "protocol.h"
#include "session_table.h"

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
    if (log_quarantined(e)) {
        /* freed already: over verbs the memory node finishes it once the
         * old key is dead (reclaim waits for that); elsewhere the key died
         * with the free, and the user who would have finished it is gone */
        if (n->tp->wkeys_off)
            return;
        rc = node_quarantine_finish(n, c, k);
        if (rc == 0)
            st->quarantined_finished++;
        return;
    }
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

static void count_quarantined(struct node *n, uint64_t chunk, uint64_t e, void *left)
{
    (void)n, (void)chunk;
    if (log_quarantined(e))
        ++*(uint64_t *)left;
}

static void free_found(struct node *n, uint64_t chunk, uint64_t e, void *st)
{
    free_entry(n, chunk, e, st);
}

/* Flush, finish uid's span moves, and free every block whose latest entry
 * is an allocation by uid. The user slot is left as it is. */
static int reclaim(struct node *n, unsigned uid, fmem_recovery_stats *st)
{
    uint64_t before = st->logs_flushed;
    uint64_t log_cas0 = tp_trace.log_cas;
    node_flush_all(n, uid, st);
    st->logs_flushed = before + (tp_trace.log_cas - log_cas0);
    int64_t scanned = node_walk_allocs(n, uid, free_found, st);
    if (scanned < 0)
        return (int)scanned;
    st->entries_scanned += (uint64_t)scanned;
    /* over verbs: the memory node frees uid's quarantined blocks once their
     * keys are dead; wait for that (a few ms), so that what recovery
     * returns is free when it returns */
    for (int i = 0; n->tp->wkeys_off && i < 5000; i++) {
        uint64_t left = 0;
        int64_t r = node_walk_allocs(n, uid, count_quarantined, &left);
        if (r < 0 || left == 0)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Recover uid on one node. A slot holding a process (the caller knows it
 * is dead) is freed at the end; a free slot (blocks leaked by a user id
 * nobody holds) is claimed for the duration, so that no one can take that
 * id and allocate under it while its old blocks are being freed. */
static int recover_node(struct node *n, unsigned uid, fmem_recovery_stats *st)
{
    uint32_t lock = 0;
    if (uid < n->g.nusers && node_uid_pid(n, uid) == 0) {
        lock = node_own_pid(n);
        int rc = node_claim_uid_exact(n, uid, lock);
        if (rc)
            return rc; /* taken just now: a live user */
    }
    /* a service's applications must stop using its handles before any of
     * its blocks can go to someone else */
    if (n->path && session_fence_path(n->path, uid))
        session_grace();
    int rc = reclaim(n, uid, st);
    if (lock)
        node_release_uid(n, uid, lock);
    else
        node_clear_uid(n, uid);
    return rc;
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

/* User ids whose allocations the full log of n records, and which hold no
 * slot: set in `leaked` (MAX_UID + 1 entries). */
static int find_leaked(struct node *n, bool *leaked)
{
    uint64_t *buf = malloc(8 * LOG_BATCH);
    uint32_t *pids = calloc(n->g.nusers, sizeof *pids);
    int rc = buf && pids ? 0 : FMEM_ENOMEM;
    if (rc == 0 && tp_read(n->tp, n->g.users_off, pids, 4 * n->g.nusers) < 0)
        rc = FMEM_EIO;
    for (uint64_t base = 0; rc == 0 && base < n->g.nchunks; base += LOG_BATCH) {
        uint64_t cnt = n->g.nchunks - base < LOG_BATCH ? n->g.nchunks - base : LOG_BATCH;
        if (tp_read(n->tp, log_off(n, base), buf, 8 * cnt) < 0) {
            rc = FMEM_EIO;
            break;
        }
        for (uint64_t i = 0; i < cnt; i++) {
            unsigned u = log_uid(buf[i]);
            if (log_valid(buf[i]) && log_alloc(buf[i]) && u && (u >= n->g.nusers || !pids[u]))
                leaked[u] = true;
        }
    }
    free(buf);
    free(pids);
    return rc;
}

int fmem_recover_leaked(fmem_pool *p, fmem_recovery_stats *out)
{
    if (!p)
        return FMEM_EINVAL;
    if (p->nnodes == 0)
        return FMEM_ENOTSUP;
    bool *leaked = malloc(MAX_UID + 1);
    if (!leaked)
        return FMEM_ENOMEM;
    fmem_recovery_stats st = {0};
    uint64_t t0 = now_ns();
    int rc = 0;
    for (unsigned i = 0; i < p->nnodes && rc == 0; i++) {
        struct node *n = p->nodes[i];
        memset(leaked, 0, MAX_UID + 1);
        node_flush_all(n, 0, NULL); /* so that the log holds every latest operation */
        rc = find_leaked(n, leaked);
        for (unsigned u = 1; u <= MAX_UID && rc == 0; u++) {
            if (!leaked[u] || u == n->uid)
                continue;
            int r = recover_node(n, u, &st);
            if (r && r != FMEM_EBUSY) /* EBUSY: claimed meanwhile, a live user now */
                rc = r;
        }
    }
    free(leaked);
    st.elapsed_ns = now_ns() - t0;
    if (out)
        *out = st;
    return rc;
}

/* fmem_close of a pool other processes map: give back what this client
 * still holds, unless its user id was recovered (and maybe handed to
 * someone else) meanwhile. */
void node_release_blocks(struct node *n)
{
    if (!node_holds_slot(n) || n->no_user || n->private_pool ||
        node_uid_pid(n, n->uid) != n->slot_pid)
        return;
    fmem_recovery_stats st = {0};
    reclaim(n, n->uid, &st);
}

unsigned fmem_user_id(fmem_pool *p, unsigned node)
{
    return p && node < p->nnodes ? p->nodes[node]->uid : 0;
}
