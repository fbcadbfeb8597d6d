/* node.c - attach a client to one memory node: format a new pool, claim a
 * user id, build and refresh the header caches, generate keys. */
#include "node.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fmem.h"

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

static uint64_t seed64(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != sizeof s)
        s = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return s;
}

uint32_t node_new_key(struct node *n)
{
    uint64_t x = atomic_fetch_add_explicit(&n->rng, 0x9E3779B97F4A7C15u, memory_order_relaxed);
    uint32_t k;
    do {
        k = (uint32_t)splitmix(&x);
    } while (k == 0);
    return k;
}

/* Fresh span header: detached (section layer), no claim. */
static uint64_t span_init_hdr(void)
{
    return H_DETACHED | h_with_log(0, 31, SPAN_LOG_CLAIM, 0, 0);
}

/* Format a pool whose files were just made, and so read as zeros. Only
 * what must not be zero is written: the span headers (8 bytes per 128 KiB).
 * The capability table and the redo log (16 bytes per 4 KiB chunk) stay
 * untouched: a zero log entry is "never used", a zero capability entry
 * "no key yet" (the first allocation of a block gives it one, alloc.c). So
 * opening a 1 TiB pool costs what it uses, not 4 GiB of keys and logs. */
static void format_pool(struct transport *tp, const struct geometry *g)
{
    char *b = tp->base;
    uint64_t *spans = (uint64_t *)(b + g->span_off);
    for (uint64_t s = 0; s < g->nspans; s++)
        spans[s] = span_init_hdr();
    struct pool_hdr h;
    layout_write_hdr(&h, g);
    /* the magic becomes visible last: openers wait for a complete pool */
    memcpy(b + 8, (char *)&h + 8, sizeof h - 8);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(b, h.magic, 8);
}

/* The 8-byte word holding user slot u (CAS works on whole words) and the
 * slot's shift in it. */
static uint64_t slot_word(const struct node *n, uint64_t u, unsigned *shift)
{
    *shift = (u & 1) ? 32 : 0;
    return n->g.users_off + 4 * (u & ~UINT64_C(1));
}

/* Change slot u from `from` to `to` with a CAS. 1: done, 0: it held
 * something else, <0: transport error. */
static int slot_cas(struct node *n, uint64_t u, uint32_t from, uint32_t to)
{
    unsigned shift;
    uint64_t word_off = slot_word(n, u, &shift);
    for (;;) {
        uint64_t w;
        if (tp_read(n->tp, word_off, &w, 8) < 0)
            return FMEM_EIO;
        if ((uint32_t)(w >> shift) != from)
            return 0;
        uint64_t nw = (w & ~(UINT64_C(0xFFFFFFFF) << shift)) | ((uint64_t)to << shift);
        int r = tp_cas(n->tp, word_off, w, nw, NULL);
        if (r != 0)
            return r; /* swapped, or an error; else the other half changed */
    }
}

/* Claim a free user slot (pid recorded) with a CAS on the 8-byte word
 * holding it. Slot 0 is never used: user id 0 means "nobody". */
int node_claim_uid_for(struct node *n, uint32_t pid, unsigned *uid)
{
    if (pid == 0)
        return FMEM_EINVAL;
    for (uint64_t u = 1; u < n->g.nusers; u++) {
        int r = slot_cas(n, u, 0, pid);
        if (r < 0)
            return r;
        if (r == 1) {
            *uid = (unsigned)u;
            return 0;
        }
    }
    return FMEM_EBUSY;
}

int node_claim_uid_exact(struct node *n, unsigned uid, uint32_t pid)
{
    if (pid == 0 || uid == 0 || uid >= n->g.nusers)
        return FMEM_EINVAL;
    int r = slot_cas(n, uid, 0, pid);
    return r < 0 ? r : r == 1 ? 0 : FMEM_EBUSY;
}

bool node_holds_slot(const struct node *n)
{
    return n->owns_uid && n->slot_pid == node_own_pid(n);
}

uint32_t node_own_pid(const struct node *n)
{
    uint32_t pid = (uint32_t)getpid();
    if (n->tp->wkeys_off) /* over RDMA */
        pid |= NODE_PID_REMOTE;
    return pid;
}

uint32_t node_uid_pid(struct node *n, unsigned u)
{
    uint32_t pid;
    if (u == 0 || u >= n->g.nusers || tp_read(n->tp, n->g.users_off + 4 * (uint64_t)u, &pid, 4) < 0)
        return 0;
    return pid;
}

void node_clear_uid(struct node *n, unsigned u)
{
    if (u == 0 || u >= n->g.nusers)
        return;
    for (;;) {
        uint32_t pid = node_uid_pid(n, u);
        if (pid == 0 || slot_cas(n, u, pid, 0) != 0)
            return;
    }
}

bool node_release_uid(struct node *n, unsigned u, uint32_t pid)
{
    return u && u < n->g.nusers && pid && slot_cas(n, u, pid, 0) == 1;
}

/* Headers re-read per round trip: a pool of up to 8 GiB (64 Ki spans) in
 * one, and a bounded buffer for larger ones. */
#define REFRESH_SPANS (UINT64_C(1) << 16)

void node_refresh_all(struct node *n)
{
    uint64_t nsec = n->g.nsections, nspan = n->g.nspans;
    uint64_t per = nspan < REFRESH_SPANS ? nspan : REFRESH_SPANS;
    /* mmap, not malloc: this runs in fork handlers too (fork.c) */
    size_t bytes = 8 * (nsec + per);
    uint64_t *sec = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sec == MAP_FAILED)
        return;
    uint64_t *span = sec + nsec;
    for (uint64_t first = 0; first < nspan; first += per) {
        uint64_t cnt = nspan - first < per ? nspan - first : per;
        struct tp_op ops[2] = {
            {.kind = TP_READ, .off = span_hdr_off(n, first), .buf = span, .len = 8 * cnt},
            {.kind = TP_READ, .off = n->g.sect_off, .buf = sec, .len = 8 * nsec},
        };
        /* the section headers (8 bytes per 2 MiB) come with the first part */
        if (tp_batch(n->tp, ops, first == 0 ? 2 : 1) != 0)
            break;
        if (first == 0)
            for (uint64_t i = 0; i < nsec; i++)
                atomic_store_explicit(&n->sec_cache[i], sec[i], memory_order_relaxed);
        for (uint64_t i = 0; i < cnt; i++)
            atomic_store_explicit(&n->span_cache[first + i], span[i], memory_order_relaxed);
    }
    munmap(sec, bytes);
}

void node_forget_flushed(struct node *n)
{
    for (uint64_t i = 0; i < n->g.nsections; i++)
        atomic_store_explicit(&n->sec_flushed[i], 0, memory_order_relaxed);
    for (uint64_t i = 0; i < n->g.nspans; i++)
        atomic_store_explicit(&n->span_flushed[i], 0, memory_order_relaxed);
}

/* Bytes allocated by all users: span blocks from the section headers,
 * chunks from the free maps of attached spans. */
uint64_t node_allocated_bytes(struct node *n)
{
    node_send_marks(n); /* blocks freed before the count come back */
    node_refresh_all(n);
    uint64_t chunks = 0;
    for (uint64_t x = 0; x < n->g.nsections; x++) {
        uint64_t sh = atomic_load_explicit(&n->sec_cache[x], memory_order_relaxed);
        for (unsigned j = 0; j < SPANS_PER_SECTION; j++) {
            uint64_t s = x * SPANS_PER_SECTION + j;
            uint64_t ph = atomic_load_explicit(&n->span_cache[s], memory_order_relaxed);
            if (sec_state(sh, j) == SPAN_FULL && h_detached(ph))
                chunks += CHUNKS_PER_SPAN;
            else if (!h_detached(ph))
                chunks += (uint64_t)__builtin_popcount(h_lo(ph));
        }
    }
    return chunks << CHUNK_SHIFT;
}

int node_open_user(struct transport *tp, bool created, enum node_user how, unsigned uid,
                   struct node **out)
{
    struct geometry g;
    if (created) {
        /* the creator sized the parts from the geometry: recompute it */
        uint64_t nsec = (tp->size - tp->meta_size) >> SECTION_SHIFT;
        layout_geometry(nsec, 4096, &g);
        if (g.data_off != tp->meta_size)
            layout_geometry(nsec, 2u << 20, &g);
        if (nsec == 0 || g.data_off != tp->meta_size || g.total_size != tp->size)
            return FMEM_ESIZE;
        format_pool(tp, &g);
    } else {
        struct pool_hdr h;
        /* a creator may still be formatting: wait up to 2 s for the magic */
        for (int i = 0;; i++) {
            if (tp->size < sizeof h)
                return FMEM_ECORRUPT;
            if (tp_read(tp, 0, &h, sizeof h) < 0)
                return FMEM_EIO;
            static const char zero[8];
            if (memcmp(h.magic, zero, 8) != 0 || i >= 200)
                break;
            usleep(10000);
        }
        int rc = layout_check_hdr(&h, tp->size, &g);
        if (rc)
            return rc;
        if (g.data_off != tp->meta_size)
            return FMEM_ECORRUPT;
    }
    struct node *n = calloc(1, sizeof *n);
    if (!n)
        return FMEM_ENOMEM;
    static _Atomic uint64_t serials;
    n->serial = atomic_fetch_add_explicit(&serials, 1, memory_order_relaxed) + 1;
    n->tp = tp;
    n->g = g;
    atomic_init(&n->rng, seed64());
    n->sec_cache = calloc(g.nsections, 8);
    n->span_cache = calloc(g.nspans, 8);
    n->sec_flushed = calloc(g.nsections, 8);
    n->span_flushed = calloc(g.nspans, 8);
    if (!n->sec_cache || !n->span_cache || !n->sec_flushed || !n->span_flushed) {
        node_close(n);
        return FMEM_ENOMEM;
    }
    int rc = 0;
    switch (how) {
    case NODE_ADOPT:
        if (uid == 0 || uid >= g.nusers)
            rc = FMEM_EINVAL;
        n->uid = uid;
        break;
    case NODE_CLAIM_EXACT: /* user=N: the slot records us like any claim */
        if (uid >= g.nusers) {
            rc = FMEM_EINVAL;
            break;
        }
        rc = node_claim_uid_exact(n, uid, node_own_pid(n));
        n->uid = uid;
        break;
    case NODE_CLAIM_ANY:
        rc = node_claim_uid_for(n, node_own_pid(n), &n->uid);
        break;
    case NODE_NO_USER:
        n->no_user = true;
        break;
    }
    if (rc) {
        node_close(n);
        return rc;
    }
    if (how == NODE_CLAIM_EXACT || how == NODE_CLAIM_ANY) {
        n->owns_uid = true;
        n->slot_pid = node_own_pid(n);
    }
    node_refresh_all(n);
    *out = n;
    return 0;
}

int node_open(struct transport *tp, bool created, unsigned uid, struct node **out)
{
    return node_open_user(tp, created, uid ? NODE_ADOPT : NODE_CLAIM_ANY, uid, out);
}

void node_close(struct node *n)
{
    if (!n)
        return;
    node_ring_owed(n);
    /* only if the slot is still ours: a recovery may have given it away,
     * and a fork child closing its copy leaves the parent's slot alone */
    if (node_holds_slot(n))
        node_release_uid(n, n->uid, n->slot_pid);
    node_own_records_free(n);
    free(n->sec_cache);
    free(n->span_cache);
    free(n->sec_flushed);
    free(n->span_flushed);
    free(n->path);
    free(n);
}
