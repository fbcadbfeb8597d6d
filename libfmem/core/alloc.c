/* alloc.c - front end of the protocol on one node: pick the layer by size,
 * hand out and check capability keys, and order a free so that the old key
 * dies before the block can be handed to anyone else. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_relax.h"
#include "crashpoint.h"
#include "env_flag.h"
#include "fmem.h"
#include "protocol.h"

_Thread_local unsigned node_last_retries;

/* log2 chunks: 0..4 chunk layer, 5..9 span layer, 10.. whole sections */
static bool block_ok(const struct node *n, uint64_t chunk, unsigned log2c)
{
    if (log2c > 40)
        return false;
    uint64_t len = UINT64_C(1) << log2c;
    return chunk < n->g.nchunks && len <= n->g.nchunks - chunk && (chunk & (len - 1)) == 0;
}

static unsigned layer_of(unsigned log2c)
{
    return log2c <= 4 ? LAYER_CHUNK : log2c <= 9 ? LAYER_SPAN : LAYER_SECTION;
}

/* A pool is formatted without keys (node.c): a capability entry whose
 * main key is 0 has none yet, and the first allocation of a block there
 * gives it a pair. Nobody else writes the entry of a block just allocated
 * but the regenerator, which leaves entries without a main key alone. */
static int give_key(struct node *n, uint64_t off, uint64_t *cap)
{
    while (cap_main(*cap) == 0) {
        uint64_t next = cap_make(node_new_key(n), n->remote_regen ? 0 : node_new_key(n)), old;
        int r = tp_cas(n->tp, off, *cap, next, &old);
        if (r < 0)
            return r;
        *cap = r == 1 ? next : old;
    }
    return 0;
}

static bool wait_quarantined(struct node *n);
static void ring_owed(struct node *n);
static void own_remember(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap);

int node_alloc(struct node *n, unsigned log2c, uint64_t *chunk, uint32_t *rkey)
{
    unsigned fails = 0;
    int rc;
    ring_owed(n);
    log_key_read = (struct key_read){.armed = true};
    if ((UINT64_C(1) << log2c) > n->g.nchunks)
        rc = FMEM_ENOMEM;
    else if (log2c <= 4)
        rc = chunk_alloc(n, log2c, chunk, &fails);
    else if (log2c <= 9)
        rc = span_alloc(n, log2c - 5, chunk, &fails);
    else
        rc = multi_alloc(n, log2c - 9, chunk, &fails);
    if (rc == FMEM_ENOMEM && (UINT64_C(1) << log2c) <= n->g.nchunks && wait_quarantined(n)) { /* our own frees may be pending */
        if (log2c <= 4)
            rc = chunk_alloc(n, log2c, chunk, &fails);
        else if (log2c <= 9)
            rc = span_alloc(n, log2c - 5, chunk, &fails);
        else
            rc = multi_alloc(n, log2c - 9, chunk, &fails);
    }
    node_last_retries = fails;
    struct key_read kr = log_key_read;
    log_key_read.armed = false;
    if (rc)
        return rc;
    CRASH_POINT(CP_ALLOC_DONE);
    uint64_t cap;
    if (kr.done && kr.chunk == *chunk && kr.log2c == log2c) /* read with the commit */
        cap = kr.key;
    else if (tp_read(n->tp, key_off(n, *chunk, log2c), &cap, 8) < 0)
        return FMEM_EIO;
    if (!n->tp->wkeys_off && (rc = give_key(n, key_off(n, *chunk, log2c), &cap)) != 0)
        return rc;
    *rkey = cap_main(cap);
    own_remember(n, *chunk, log2c, cap);
    return 0;
}

/* Judge a handle's key `rkey` against the block's key entry `cap` and its
 * log entry `e`: the key must match and the log must record an allocation
 * of exactly this size and layer. */
static int judge(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey, uint64_t cap,
                 uint64_t e)
{
    /* on shm a main key of 0 is "no key yet", never a key */
    if (cap_main(cap) != rkey || (rkey == 0 && !n->tp->wkeys_off)) {
        /* window keys are per block size: a right key with a wrong size
         * lands on another entry; name that a bad handle, as on shm */
        uint64_t real;
        if (n->tp->wkeys_off && !n->log_none && log_valid(e) && log_alloc(e) &&
            log_log2(e) != log2c && block_ok(n, chunk, log_log2(e)) &&
            tp_read(n->tp, key_off(n, chunk, log_log2(e)), &real, 8) == 0 &&
            cap_main(real) == rkey)
            return FMEM_EBADHANDLE;
        return FMEM_EACCES;
    }
    if (n->log_none)
        return 0;
    if (!log_valid(e) || !log_alloc(e) || log_log2(e) != log2c ||
        log_layer(e) != layer_of(log2c))
        return FMEM_EBADHANDLE;
    return 0;
}

/* An allocation's flush may still be on its way (redolog.c posts it without
 * waiting, on the allocating thread's queue pair): if the span header `h`
 * still holds the log of this very block and the entry `e` lacks it, flush
 * it from the header and read the entry again. Only chunk-layer blocks are
 * flushed that way. */
static int settle(struct node *n, uint64_t chunk, unsigned log2c, uint64_t h, uint64_t *e)
{
    uint64_t c, want;
    if (n->log_none || log2c > 4 ||
        !log_expected_span(chunk / CHUNKS_PER_SPAN, h, &c, &want) || c != chunk ||
        log_op(*e) == want || !log_alloc(want))
        return 0;
    log_flush_span_now(n, chunk / CHUNKS_PER_SPAN, h);
    return tp_read(n->tp, log_off(n, chunk), e, 8);
}

static int check(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey, uint64_t *capv)
{
    uint64_t cap, e = 0;
    ring_owed(n);
    struct tp_op ops[2] = {
        {.kind = TP_READ, .off = key_off(n, chunk, log2c), .buf = &cap, .len = 8},
        {.kind = TP_READ, .off = log_off(n, chunk), .buf = &e, .len = 8},
    };
    int rc = tp_batch(n->tp, ops, n->log_none ? 1 : 2);
    if (rc)
        return rc;
    *capv = cap;
    rc = judge(n, chunk, log2c, rkey, cap, e);
    uint64_t h;
    if (rc == FMEM_EBADHANDLE && log2c <= 4 && !n->log_none &&
        tp_read(n->tp, span_hdr_off(n, chunk / CHUNKS_PER_SPAN), &h, 8) == 0 &&
        settle(n, chunk, log2c, h, &e) == 0)
        rc = judge(n, chunk, log2c, rkey, cap, e);
    return rc;
}

int node_check_access(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey)
{
    uint64_t cap;
    if (!block_ok(n, chunk, log2c))
        return FMEM_EBADHANDLE;
    return check(n, chunk, log2c, rkey, &cap);
}

/* The header word that says whether the block is allocated in its layer,
 * and what it says. */
static uint64_t state_off(const struct node *n, uint64_t chunk, unsigned log2c)
{
    uint64_t s = chunk / CHUNKS_PER_SPAN;
    return log2c <= 4 ? span_hdr_off(n, s) : sec_hdr_off(n, s / SPANS_PER_SECTION);
}

static bool block_allocated(uint64_t h, uint64_t chunk, unsigned log2c)
{
    uint64_t s = chunk / CHUNKS_PER_SPAN;
    if (log2c <= 4)
        return !h_detached(h) && (h_lo(h) & (1u << (chunk % CHUNKS_PER_SPAN)));
    return sec_state(h, s % SPANS_PER_SECTION) == SPAN_FULL;
}

static int layer_free(struct node *n, uint64_t chunk, unsigned log2c, unsigned uid,
                      const uint64_t *seen)
{
    if (log2c <= 4)
        return chunk_free(n, chunk, log2c, uid, seen);
    if (log2c <= 9)
        return span_free(n, chunk, log2c - 5, uid, seen);
    return multi_free(n, chunk, log2c - 9, uid);
}

/* Replace the main key by the backup (the old key dies now) and make a new
 * backup. Embedded, the freeing client refills the backup in the same CAS;
 * with a memory-node regenerator (remote_regen) the backup is left empty for
 * it to refill in the background, and a free that finds it empty (the
 * regenerator is behind) makes a fresh main key itself. */
static uint64_t revoked_cap(struct node *n, uint64_t cap)
{
    if (!n->remote_regen)
        return cap_make(cap_backup(cap), node_new_key(n));
    uint32_t b = cap_backup(cap);
    return cap_make(b ? b : node_new_key(n), 0);
}

/* ---- window keys (verbs) -------------------------------------------------
 * A key is a memory window only the memory node can bind or destroy, so a
 * free cannot invent one: it promotes the backup window and rings the
 * doorbell, and the old key dies when the regenerator destroys its window.
 * The free waits for that (the entry gets a backup again) before the block
 * goes back to the free lists, so no one else can be handed a block whose
 * old key still works. */
#define WK_WAIT_NS 5000000000ull /* the regenerator is gone after this */

/* The doorbell names the entry (a hint: the regenerator handles it first,
 * then scans for entries whose hint was overwritten); the high bits make
 * every ring a new value. */
static uint64_t wk_bell(struct node *n, uint64_t off)
{
    uint64_t entry = (off - n->tp->wkeys_off - WK_HDR) / 8;
    return (atomic_fetch_add(&n->rng, 1) << WK_BELL_SHIFT) | (entry + 1);
}

static int wk_ring(struct node *n, uint64_t off)
{
    uint64_t v = wk_bell(n, off);
    return tp_write(n->tp, n->tp->wkeys_off, &v, 8);
}

/* The quarantine marks of own frees (own_free) are held by the node and
 * go out OWN_MARKS at a time, with a doorbell behind them on the same
 * queue pair naming the last one (the memory node's pass for that ring
 * finds the others: entries without a backup; verbs_server.c regen_main):
 * see own_hold_mark. ring_owed sends the held ones; the process's next
 * allocation, handle check, general free, count or close calls it. */
static void marks_send(struct node *n);

static void ring_owed(struct node *n)
{
    marks_send(n);
}

void node_ring_owed(struct node *n)
{
    ring_owed(n);
}

/* Wait until the entry at `off` no longer equals `v`; *now = its value. */
static int wk_wait_change(struct node *n, uint64_t off, uint64_t v, uint64_t *now)
{
    uint64_t end = tp_now_ns() + WK_WAIT_NS;
    for (;;) {
        if (tp_read(n->tp, off, now, 8) < 0)
            return FMEM_EIO;
        if (*now != v)
            return 0;
        if (tp_now_ns() > end)
            return FMEM_EIO;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* The key entry a free installs in place of *cap: over windows the backup
 * window is promoted to main key (with no backup yet, a recovery's free
 * just took it or the regenerator is behind, the regenerator is woken and
 * waited for, and *cap is the entry it left); elsewhere the revoked entry. */
static int promoted_cap(struct node *n, uint64_t off, uint64_t *cap, uint64_t *next)
{
    if (!n->tp->wkeys_off) {
        *next = revoked_cap(n, *cap);
        return 0;
    }
    while (cap_backup(*cap) == 0) {
        int rc = wk_ring(n, off);
        if (rc == 0)
            rc = wk_wait_change(n, off, *cap, cap);
        if (rc)
            return rc;
    }
    *next = cap_make(cap_backup(*cap), 0);
    return 0;
}

static int wk_revoke(struct node *n, uint64_t off, uint64_t cap, bool any_key)
{
    for (;;) {
        uint64_t next, v = 0;
        int rc = promoted_cap(n, off, &cap, &next);
        if (rc)
            return rc;
        struct tp_op ops[2] = {
            {.kind = TP_CAS, .off = off, .expect = cap, .desired = next},
            {.kind = TP_WRITE, .off = n->tp->wkeys_off, .buf = &v, .len = 8},
        };
        v = wk_bell(n, off);
        rc = tp_batch(n->tp, ops, 2);
        if (rc)
            return rc;
        if (ops[0].old == cap) /* swapped: wait for the old window to go */
            return wk_wait_change(n, off, next, &cap);
        if (!any_key && cap_main(ops[0].old) != cap_main(cap))
            return FMEM_EDOUBLEFREE; /* a concurrent free of the same block won */
        cap = ops[0].old;
    }
}

static int revoke(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap, bool any_key)
{
    uint64_t off = key_off(n, chunk, log2c);
    if (n->tp->wkeys_off)
        return wk_revoke(n, off, cap, any_key);
    for (;;) {
        uint64_t next = revoked_cap(n, cap), old;
        int r = tp_cas(n->tp, off, cap, next, &old);
        if (r != 0)
            return r < 0 ? r : 0;
        /* a changed backup is the regenerator refilling it: try again; a
         * changed main key means a concurrent free of the same block won */
        if (!any_key && cap_main(old) != cap_main(cap))
            return FMEM_EDOUBLEFREE;
        cap = old;
    }
}

/* ---- quarantine ------------------------------------------------------------
 * Over verbs the old key of a freed block dies only when the memory node
 * destroys its window. Instead of waiting for that, a free commits with one
 * round trip: it promotes the backup key (CAS on the key entry), marks the
 * block's log entry quarantined (CAS) and rings the doorbell. The block
 * stays allocated in its layer, so no allocator can take it; the
 * regenerator destroys the old window, binds a new backup and only then
 * frees the block in its layer (node_quarantine_finish). The key CAS comes
 * first in the chain, so a marked entry always has its key revoked, and a
 * marked entry whose key entry has a backup again has a dead old key.
 * A block of whole sections has a log entry per section: each is marked,
 * the first one last (in the same chain), so a block whose first entry is
 * marked has every part marked; the finish frees the parts last first, so
 * a finish cut short leaves the first part marked (and is done again),
 * and a part freed already has lost its mark with the flush of its free. */
bool fmem_quarantine_local;

/* Tests of programs linked to the shared library: FMEM_QUARANTINE_LOCAL=1 */
static bool quarantine_env(void)
{
    static _Atomic int v = -1;
    return env_flag(&v, "FMEM_QUARANTINE_LOCAL", false);
}

static bool quarantines(const struct node *n, unsigned log2c)
{
    (void)log2c;
    return !n->log_none &&
           (n->tp->wkeys_off || fmem_quarantine_local || quarantine_env());
}

static void remember_quarantined(struct node *n, uint64_t chunk, unsigned log2c)
{
    unsigned i = atomic_fetch_add(&n->qnext, 1) % NODE_QRING;
    atomic_store(&n->quarantined[i], ((chunk << 6) | log2c) + 1);
}

/* After an allocation found no room: wait (at most WK_WAIT_NS) until the
 * blocks this client quarantined are free in their layers. True if there
 * were any, so that trying again may succeed. */
static bool wait_quarantined(struct node *n)
{
    bool any = false;
    ring_owed(n);
    uint64_t end = tp_now_ns() + WK_WAIT_NS;
    for (unsigned i = 0; i < NODE_QRING; i++) {
        uint64_t q = atomic_load(&n->quarantined[i]), e;
        if (!q)
            continue;
        uint64_t chunk = (q - 1) >> 6;
        unsigned log2c = (q - 1) & 63;
        for (;;) {
            if (chunk >= n->g.nchunks || tp_read(n->tp, log_off(n, chunk), &e, 8) < 0)
                break;
            if (!log_quarantined(e) || log_log2(e) != log2c)
                break;
            any = true;
            if (tp_now_ns() > end)
                return any;
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
        atomic_compare_exchange_strong(&n->quarantined[i], &q, 0);
        any = true;
    }
    if (any)
        node_refresh_all(n);
    return any;
}

#define OWN_NOT 1 /* own_free: not done, free the general way */

/* After the own key CAS of a free: the log entry was `cur`, not the entry
 * the free expected. Mark what is there when it is this allocation (a
 * concurrent free of the same block that lost the key CAS set the mark
 * first, or the allocation's flush landed only now); when the entry lacks
 * the allocation (its flush has not landed, or was lost with its queue
 * pair), flush it from the span header first. */
static void mark_found(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cur)
{
    bool settled = false;
    for (int i = 0; i < 8 && !(cur & LOG_QUARANTINE); i++) {
        if (!log_valid(cur) || !log_alloc(cur) || log_log2(cur) != log2c) {
            uint64_t h;
            if (settled || log2c > 4 ||
                tp_read(n->tp, span_hdr_off(n, chunk / CHUNKS_PER_SPAN), &h, 8) < 0 ||
                settle(n, chunk, log2c, h, &cur) != 0)
                break;
            settled = true;
            continue;
        }
        uint64_t seen = cur;
        if (tp_cas(n->tp, log_off(n, chunk), seen, seen | LOG_QUARANTINE, &cur) != 0)
            break;
    }
}

/* Mark the log entry of section x (a part of a whole-section block) found
 * to be `cur` instead of the entry its mark CAS expected. */
static void mark_part(struct node *n, uint64_t x, uint64_t cur)
{
    for (int i = 0; i < 8 && !(cur & LOG_QUARANTINE); i++) {
        if (!log_valid(cur) || !log_alloc(cur) || log_layer(cur) != LAYER_SECTION)
            break;
        uint64_t seen = cur;
        if (tp_cas(n->tp, log_off(n, x * CHUNKS_PER_SECTION), seen, seen | LOG_QUARANTINE, &cur) !=
            0)
            break;
    }
}

static int quarantine_sections(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap,
                               uint64_t e);

/* Commit the free of an allocated block whose key entry was `cap` and log
 * entry `e` (checked by the caller): key CAS and mark CAS in one chain. */
static int quarantine(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap, uint64_t e)
{
    if (log2c > 9)
        return quarantine_sections(n, chunk, log2c, cap, e);
    uint64_t off = key_off(n, chunk, log2c), bell = 0;
    bool wk = n->tp->wkeys_off != 0;
    for (;;) {
        uint64_t next;
        int rc = promoted_cap(n, off, &cap, &next);
        if (rc)
            return rc;
        struct tp_op ops[3] = {
            {.kind = TP_CAS, .off = off, .expect = cap, .desired = next},
            {.kind = TP_CAS, .off = log_off(n, chunk), .expect = e, .desired = e | LOG_QUARANTINE},
            /* the doorbell trails: the free's outcome is known from the
             * CASes, and the queue pair delivers it before anything the
             * thread does next (a lost one: the regenerator's idle scan) */
            {.kind = TP_WRITE, .off = n->tp->wkeys_off, .buf = &bell, .len = 8, .trail = true},
        };
        if (wk)
            bell = wk_bell(n, off);
        rc = tp_batch(n->tp, ops, wk ? 3 : 2);
        if (rc)
            return rc;
        if (ops[0].old == cap) {
            /* ours */
            if (ops[1].old != e)
                mark_found(n, chunk, log2c, ops[1].old);
            remember_quarantined(n, chunk, log2c);
            return 0;
        }
        if (cap_main(ops[0].old) != cap_main(cap))
            return FMEM_EDOUBLEFREE; /* a concurrent free of the same block won */
        cap = ops[0].old;
    }
}

/* The quarantine chain of a block of 2^p whole sections: the key CAS, then
 * the marks of the parts' entries (read first, in one round trip), the
 * first part's last, then the doorbell. */
static int quarantine_sections(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap,
                               uint64_t e)
{
    uint64_t base = chunk / CHUNKS_PER_SECTION, nb = UINT64_C(1) << (log2c - 9);
    uint64_t off = key_off(n, chunk, log2c), bell = 0;
    bool wk = n->tp->wkeys_off != 0;
    size_t nops = (size_t)nb + 2;
    struct tp_op *ops = calloc(nops, sizeof *ops);
    uint64_t *ents = calloc((size_t)nb, sizeof *ents);
    int rc = 0;
    if (!ops || !ents) {
        rc = FMEM_ENOMEM;
        goto out;
    }
    /* the other parts' entries (the first one, e, the caller read) */
    for (uint64_t i = 1; i < nb; i++)
        ops[i - 1] = (struct tp_op){.kind = TP_READ,
                                    .off = log_off(n, (base + i) * CHUNKS_PER_SECTION),
                                    .buf = &ents[i], .len = 8};
    if (nb > 1 && (rc = tp_batch(n->tp, ops, (size_t)nb - 1)) != 0)
        goto out;
    ents[0] = e;
    for (uint64_t i = 1; i < nb; i++)
        if (!log_valid(ents[i]) || !log_alloc(ents[i]) || log_layer(ents[i]) != LAYER_SECTION ||
            log_log2(ents[i]) != 9) {
            rc = FMEM_EBADHANDLE; /* not the parts of one block */
            goto out;
        }
    for (;;) {
        uint64_t next;
        if ((rc = promoted_cap(n, off, &cap, &next)) != 0)
            goto out;
        size_t k = 0;
        ops[k++] = (struct tp_op){.kind = TP_CAS, .off = off, .expect = cap, .desired = next};
        for (uint64_t i = nb; i-- > 0;) /* the first part's mark last */
            ops[k++] = (struct tp_op){.kind = TP_CAS,
                                      .off = log_off(n, (base + i) * CHUNKS_PER_SECTION),
                                      .expect = ents[i], .desired = ents[i] | LOG_QUARANTINE};
        if (wk) {
            bell = wk_bell(n, off);
            ops[k++] = (struct tp_op){.kind = TP_WRITE, .off = n->tp->wkeys_off, .buf = &bell,
                                      .len = 8, .trail = true};
        }
        if ((rc = tp_batch(n->tp, ops, k)) != 0)
            goto out;
        if (ops[0].old == cap) { /* ours */
            bool late = false;
            for (uint64_t j = 1; j <= nb; j++) {
                uint64_t i = nb - j; /* ops[j] marked part i */
                if (ops[j].old != ops[j].expect && !(ops[j].old & LOG_QUARANTINE)) {
                    mark_part(n, base + i, ops[j].old);
                    late = true;
                }
            }
            if (late && wk) /* a mark landed after the bell: ring again */
                wk_ring(n, off);
            remember_quarantined(n, chunk, log2c);
            goto out;
        }
        if (cap_main(ops[0].old) != cap_main(cap)) {
            rc = FMEM_EDOUBLEFREE; /* a concurrent free of the same block won */
            goto out;
        }
        cap = ops[0].old;
    }
out:
    free(ops);
    free(ents);
    return rc;
}

/* ---- the free of an own allocation ------------------------------------------
 * A client that frees a chunk-layer block it allocated knows what the
 * checks before a free would read: the key entry (read with the commit,
 * or from the span's snapshot) and the log entry (the allocation's,
 * flushed by a post that goes out ahead of anything else on the allocating
 * thread's queue pair). The records are the node's, for all its threads
 * (own_records): a thread freeing a block another thread allocated uses
 * the record once that thread's posts, the flush among them, are known to
 * have executed (tp_post_landed: on its own queue pair at once, on another
 * once a later chain of that queue pair has completed), else the checks
 * (the flush may still be held there). The free is then one CAS and one
 * round trip, like an allocation's commit: the key CAS, whose expected value is the
 * remembered key entry (main and backup key), decides whether the free is
 * ours. The quarantine mark of the log entry is held only once it won,
 * by the node, not by a queue pair (held in a queue pair for its next
 * chain, a mark would wait for that queue pair's next operation, and a
 * thread that exits or goes quiet would keep the block out of use): the
 * marks go out OWN_MARKS at a time with a doorbell, unsignaled, or with
 * the process's next other call (own_hold_mark).
 *
 * Why a stale record can only make the free take the general path, never
 * change a state it should not: the key entry of an allocated block with a
 * backup changes by frees alone (mnode: regen_pass refills backups only),
 * and every free replaces its main key. If the block was freed since the
 * allocation (a copy of the handle, another thread), whether it is still
 * quarantined or was handed out again, the main key is another one (the
 * old window is destroyed before the block goes back to its layer, and a
 * reallocation keeps the entry it finds), so the CAS fails, nothing else
 * was posted, and the general path judges the handle (a double free or a
 * dead key). Only a won key CAS is followed by the mark, so the mark's
 * expected value, the allocation's log entry, cannot meet a later
 * allocation of the block that happens to log the same word (its 7-bit
 * timestamp wrapped). A mark that finds another word (its result is not
 * known: it is held) can only mean the allocation's flush was lost with its
 * queue pair, which the record excludes (tp_post_lost); a mark lost with
 * its queue pair (reset, or the process died: CP_OWN_FREE_HELD) leaves the
 * block allocated to its user with the key revoked, the state a crash
 * between the key CAS and the mark always left, which the user's recovery
 * frees. Over windows only (the key entry of an allocated block with a
 * backup changes by frees alone) and not where keys work from one queue
 * pair only (type-2 windows). */
#define OWN_SLOTS 4096

/* Slot of a block: blocks of one size are consecutive numbers here, so
 * live allocations of one size do not evict each other. */
static unsigned own_slot(uint64_t chunk, unsigned log2c)
{
    return (unsigned)(((chunk >> log2c) + 37u * log2c) % OWN_SLOTS);
}

struct own_alloc {
    uint64_t chunk, cap, e, lost;
    uint64_t ticket; /* the allocating thread's posts, its flush among them */
    uint32_t rkey;
    unsigned log2c;
    bool live;
};

/* Marks of won frees not posted yet (own_hold_mark), at most OWN_MARKS */
#define OWN_MARKS 8

/* The records of a node, one table for all its threads, so that a block
 * another thread allocated is freed in one CAS too. A slot whose lock is
 * taken is passed over (not remembered, or freed the general way). */
struct own_records {
    struct own_rec {
        atomic_flag busy;
        struct own_alloc a;
    } slot[OWN_SLOTS];
    atomic_flag marks_busy;
    _Atomic unsigned nmarks;
    struct held_mark {
        uint64_t chunk, e, key_off;
        unsigned log2c;
    } marks[OWN_MARKS];
};

static struct own_rec *own_lock(struct node *n, uint64_t chunk, unsigned log2c, bool create)
{
    struct own_records *t = atomic_load_explicit(&n->own, memory_order_acquire);
    if (!t && create) {
        struct own_records *fresh = calloc(1, sizeof *fresh), *none = NULL;
        if (!fresh)
            return NULL;
        if (atomic_compare_exchange_strong(&n->own, &none, fresh))
            t = fresh;
        else {
            free(fresh);
            t = none;
        }
    }
    if (!t)
        return NULL;
    struct own_rec *r = &t->slot[own_slot(chunk, log2c)];
    return atomic_flag_test_and_set_explicit(&r->busy, memory_order_acquire) ? NULL : r;
}

static void own_unlock(struct own_rec *r)
{
    atomic_flag_clear_explicit(&r->busy, memory_order_release);
}

void node_own_records_free(struct node *n)
{
    free(atomic_load(&n->own));
}

static void mark_found(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cur);

/* FMEM_OWN_MARK_EACH=1: post each own free's mark and a doorbell at once */
static bool own_mark_each(void)
{
    static _Atomic int v = -1;
    return env_flag(&v, "FMEM_OWN_MARK_EACH", false);
}

static void marks_lock(struct own_records *t)
{
    while (atomic_flag_test_and_set_explicit(&t->marks_busy, memory_order_acquire))
        cpu_relax();
}

/* Post the held marks and a doorbell naming the last one's key entry, in
 * one ibv_post_send (the doorbell trails, the marks are held in front of
 * it, so the memory node's pass for the ring finds them all). Any thread
 * may: a mark is held only after its key CAS won and the allocation's
 * flush had executed, so the log entry it expects is there and only a
 * mark changes it. */
static void marks_send(struct node *n)
{
    struct own_records *t = atomic_load_explicit(&n->own, memory_order_acquire);
    if (!t || !atomic_load_explicit(&t->nmarks, memory_order_relaxed))
        return;
    struct held_mark m[OWN_MARKS];
    marks_lock(t);
    unsigned k = atomic_load_explicit(&t->nmarks, memory_order_relaxed);
    memcpy(m, t->marks, k * sizeof *m);
    atomic_store_explicit(&t->nmarks, 0, memory_order_relaxed);
    atomic_flag_clear_explicit(&t->marks_busy, memory_order_release);
    for (unsigned i = 0; i < k; i++) {
        struct tp_op mark = {.kind = TP_CAS, .off = log_off(n, m[i].chunk), .expect = m[i].e,
                             .desired = m[i].e | LOG_QUARANTINE};
        /* a mark lost with its queue pair: the user's recovery frees the block */
        if (tp_post(n->tp, &mark) == 1 && mark.old != m[i].e) /* waited for */
            mark_found(n, m[i].chunk, m[i].log2c, mark.old);
    }
    if (k && n->tp->wkeys_off) {
        uint64_t bell = wk_bell(n, m[k - 1].key_off);
        struct tp_op ring = {.kind = TP_WRITE, .off = n->tp->wkeys_off, .buf = &bell, .len = 8,
                             .trail = true};
        (void)tp_post(n->tp, &ring); /* a lost ring: the memory node's periodic scan */
    }
}

/* Hold the mark of a won own free: a run of frees posts its marks
 * OWN_MARKS at a time, and the held ones go out with the next allocation,
 * check, general free, count of allocated bytes or close of any thread
 * of the process (ring_owed, node_send_marks). A process that stops
 * calling keeps them (its blocks stay quarantined) until it calls again or
 * exits and its user is recovered. */
static void own_hold_mark(struct node *n, uint64_t chunk, unsigned log2c, uint64_t e,
                          uint64_t key_off)
{
    struct own_records *t = atomic_load_explicit(&n->own, memory_order_acquire);
    for (;;) {
        marks_lock(t);
        unsigned k = atomic_load_explicit(&t->nmarks, memory_order_relaxed);
        if (k < OWN_MARKS) {
            t->marks[k] = (struct held_mark){.chunk = chunk, .e = e, .key_off = key_off,
                                             .log2c = log2c};
            atomic_store_explicit(&t->nmarks, k + 1, memory_order_relaxed);
            atomic_flag_clear_explicit(&t->marks_busy, memory_order_release);
            if (k + 1 == OWN_MARKS || own_mark_each())
                marks_send(n);
            return;
        }
        atomic_flag_clear_explicit(&t->marks_busy, memory_order_release);
        marks_send(n); /* full: another thread's run */
    }
}

void node_send_marks(struct node *n)
{
    marks_send(n);
}

static void own_remember(struct node *n, uint64_t chunk, unsigned log2c, uint64_t cap)
{
    uint64_t c, want, s = chunk / CHUNKS_PER_SPAN;
    if (!n->tp->wkeys_off || n->tp->keys_bound_qp || log2c > 4)
        return;
    bool ok = quarantines(n, log2c) && cap_backup(cap) != 0 && cap_main(cap) != 0 &&
              log_expected_span(s, cache_get(n->span_cache, s), &c, &want) && c == chunk &&
              log_alloc(want) && log_log2(want) == log2c;
    struct own_rec *r = own_lock(n, chunk, log2c, ok);
    if (!r)
        return;
    if (ok) /* evicts the slot's record: that block is freed the general way */
        r->a = (struct own_alloc){.chunk = chunk, .log2c = log2c, .rkey = cap_main(cap),
                                  .cap = cap, .e = want, .lost = tp_post_lost(n->tp),
                                  .ticket = tp_post_ticket(n->tp), .live = true};
    else if (r->a.chunk == chunk && r->a.log2c == log2c)
        r->a.live = false; /* a stale record of this block */
    own_unlock(r);
}

/* 0: freed; OWN_NOT: not a remembered own allocation (or its key is
 * dead): free it the general way; else an error. */
static int own_free(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey)
{
    struct own_rec *r = own_lock(n, chunk, log2c, false);
    if (!r)
        return OWN_NOT;
    struct own_alloc a = r->a;
    bool mine = a.live && a.chunk == chunk && a.log2c == log2c;
    if (mine)
        r->a.live = false; /* used once, whatever happens */
    own_unlock(r);
    if (!mine || a.rkey != rkey || a.lost != tp_post_lost(n->tp))
        return OWN_NOT; /* another key, or the flush may be lost */
    /* allocated by a thread on another queue pair: its flush is posted
     * there and may not have executed yet (the mark would then miss it) */
    if (!tp_post_landed(n->tp, a.ticket))
        return OWN_NOT;
    uint64_t off = key_off(n, chunk, log2c), next;
    if (cap_backup(a.cap) == 0)
        return OWN_NOT; /* own_remember keeps none such */
    next = cap_make(cap_backup(a.cap), 0);
    struct tp_op kc = {.kind = TP_CAS, .off = off, .expect = a.cap, .desired = next};
    int rc = tp_batch(n->tp, &kc, 1);
    if (rc)
        return rc;
    if (kc.old != a.cap)
        return OWN_NOT; /* freed since (see above): the checks judge it */
    /* ours: the key is revoked; the mark and a doorbell are held */
    own_hold_mark(n, chunk, log2c, a.e, off);
    remember_quarantined(n, chunk, log2c);
    tp_trace.own_frees++;
    CRASH_POINT(CP_OWN_FREE_HELD);
    return 0;
}

/* Finish part x of a whole-section block whose entry is marked with log2
 * `log2c` (the first part: the block's; the others: 9). */
static int part_finish(struct node *n, uint64_t x, unsigned log2c, unsigned code_off)
{
    uint64_t sh, e;
    struct tp_op ops[2] = {
        {.kind = TP_READ, .off = sec_hdr_off(n, x), .buf = &sh, .len = 8},
        {.kind = TP_READ, .off = log_off(n, x * CHUNKS_PER_SECTION), .buf = &e, .len = 8},
    };
    int rc = tp_batch(n->tp, ops, 2);
    if (rc)
        return rc;
    if (!log_quarantined(e) || log_layer(e) != LAYER_SECTION || log_log2(e) != log2c)
        return 0; /* freed already (its flush took the mark), or never marked */
    if (h_lo(sh) != 0xFFFFFFFFu) { /* freed by a finish that died before its flush */
        log_flush_section(n, x, sh);
        return 0;
    }
    return multi_free_part(n, x, code_off, log_uid(e));
}

/* A block of whole sections: its parts last first, the first part (whose
 * mark says the block is quarantined) last. A marked part that is not a
 * first part (log2 9, section layer) is a leftover of a finish cut short
 * after the first part: it alone. */
static int sections_finish(struct node *n, uint64_t chunk, unsigned log2c)
{
    uint64_t base = chunk / CHUNKS_PER_SECTION;
    if (log2c == 9)
        return part_finish(n, base, 9, 0);
    uint64_t nb = UINT64_C(1) << (log2c - 9);
    for (uint64_t i = nb; i-- > 0;) {
        int rc = part_finish(n, base + i, i ? 9 : log2c, i ? 0 : log2c - 9);
        if (rc)
            return rc;
        if (i)
            CRASH_POINT(CP_QUARANTINE_PART);
    }
    return 0;
}

int node_quarantine_finish(struct node *n, uint64_t chunk, unsigned log2c)
{
    if (!block_ok(n, chunk, log2c))
        return FMEM_EBADHANDLE;
    uint64_t h, e;
    struct tp_op ops[2] = {
        {.kind = TP_READ, .off = state_off(n, chunk, log2c), .buf = &h, .len = 8},
        {.kind = TP_READ, .off = log_off(n, chunk), .buf = &e, .len = 8},
    };
    int rc = tp_batch(n->tp, ops, 2);
    if (rc)
        return rc;
    if (log_quarantined(e) && log_layer(e) == LAYER_SECTION && log_log2(e) == log2c &&
        log2c >= 9 && chunk % CHUNKS_PER_SECTION == 0)
        return sections_finish(n, chunk, log2c);
    if (!log_quarantined(e) || log_log2(e) != log2c || log_layer(e) != layer_of(log2c))
        return 0;
    if (!block_allocated(h, chunk, log2c)) {
        /* freed in its layer by an earlier finish that died before its
         * flush: the header's log replaces the mark */
        if (log2c <= 4)
            log_flush_span(n, chunk / CHUNKS_PER_SPAN, h);
        else
            log_flush_section(n, chunk / CHUNKS_PER_SECTION, h);
        return 0;
    }
    return layer_free(n, chunk, log2c, log_uid(e), &h);
}

/* The checks before a free, in one round trip: the layer's header, the key
 * and the log entry. A block not allocated in the handle's layer, or already
 * quarantined, is a wrong handle if its key is still the caller's (the block
 * exists with another size), else a double free. */
static int free_read(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey, uint64_t *h,
                     uint64_t *cap, uint64_t *e)
{
    if (!block_ok(n, chunk, log2c))
        return FMEM_EBADHANDLE;
    *e = 0;
    struct tp_op ops[3] = {
        {.kind = TP_READ, .off = state_off(n, chunk, log2c), .buf = h, .len = 8},
        {.kind = TP_READ, .off = key_off(n, chunk, log2c), .buf = cap, .len = 8},
        {.kind = TP_READ, .off = log_off(n, chunk), .buf = e, .len = 8},
    };
    int rc = tp_batch(n->tp, ops, n->log_none ? 2 : 3);
    if (rc)
        return rc;
    if (!block_allocated(*h, chunk, log2c) || (!n->log_none && log_quarantined(*e)))
        return cap_main(*cap) == rkey ? FMEM_EBADHANDLE : FMEM_EDOUBLEFREE;
    return 0;
}

int node_free_verdict(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey)
{
    uint64_t h, cap, e;
    int rc = free_read(n, chunk, log2c, rkey, &h, &cap, &e);
    return rc ? rc : judge(n, chunk, log2c, rkey, cap, e);
}

int node_free(struct node *n, uint64_t chunk, unsigned log2c, uint32_t rkey)
{
    uint64_t h, cap, e;
    int rc = block_ok(n, chunk, log2c) ? own_free(n, chunk, log2c, rkey) : OWN_NOT;
    if (rc == 0)
        CRASH_POINT(CP_FREE_QUARANTINED);
    if (rc != OWN_NOT)
        return rc;
    ring_owed(n);
    rc = free_read(n, chunk, log2c, rkey, &h, &cap, &e);
    if (rc)
        return rc;
    if ((rc = settle(n, chunk, log2c, h, &e)) != 0)
        return rc;
    rc = judge(n, chunk, log2c, rkey, cap, e);
    if (rc)
        return rc;
    if (quarantines(n, log2c)) {
        rc = quarantine(n, chunk, log2c, cap, e);
        if (rc)
            return rc;
        CRASH_POINT(CP_FREE_QUARANTINED);
        if (n->tp->wkeys_off)
            return 0; /* the memory node finishes it */
        return node_quarantine_finish(n, chunk, log2c); /* shm: the key is dead */
    }
    rc = revoke(n, chunk, log2c, cap, false);
    if (rc)
        return rc;
    CRASH_POINT(CP_FREE_REVOKED);
    return layer_free(n, chunk, log2c, n->uid, &h); /* h: read with the checks */
}

int node_free_as(struct node *n, uint64_t chunk, unsigned log2c, unsigned uid)
{
    if (!block_ok(n, chunk, log2c))
        return FMEM_EBADHANDLE;
    uint64_t cap;
    if (tp_read(n->tp, key_off(n, chunk, log2c), &cap, 8) < 0)
        return FMEM_EIO;
    int rc = revoke(n, chunk, log2c, cap, true);
    if (rc)
        return rc;
    CRASH_POINT(CP_FREE_REVOKED);
    return layer_free(n, chunk, log2c, uid, NULL);
}

int node_free_section_as(struct node *n, uint64_t x, unsigned p, unsigned uid)
{
    uint64_t chunk = x * CHUNKS_PER_SECTION, cap;
    if (x >= n->g.nsections)
        return FMEM_EBADHANDLE;
    /* the block's key: on shm each section's own entry is revoked; a window
     * key belongs to the whole block and is revoked with its first part */
    unsigned log2c = 9 + p;
    uint64_t first = chunk & ~((UINT64_C(1) << log2c) - 1);
    if (!n->tp->wkeys_off || first == chunk) {
        if (!n->tp->wkeys_off)
            log2c = 0;
        if (tp_read(n->tp, key_off(n, chunk, log2c), &cap, 8) < 0)
            return FMEM_EIO;
        int rc = revoke(n, chunk, log2c, cap, true);
        if (rc)
            return rc;
    }
    CRASH_POINT(CP_FREE_REVOKED);
    return multi_free_part(n, x, p, uid);
}
