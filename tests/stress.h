/* stress.h - the churning worker shared by the thread and process stress
 * tests: random mixed-size allocations, each claimed in the shadow map,
 * stamped, and checked and released before it is freed. Workers may be
 * threads or forked children, so they report through the shared failure
 * record, never with Criterion assertions. */
#ifndef FMEM_TESTS_STRESS_H
#define FMEM_TESTS_STRESS_H

#include "fmem.h"
#include "shadow.h"

#define STRESS_MAX_LIVE 32

/* State shared by every worker; lives in MAP_SHARED memory when the
 * workers are processes. */
struct stress_shared {
    struct shadow sh;
    struct failure fail;
    double deadline;   /* now_seconds() after which workers stop... */
    uint64_t min_allocs; /* ...once this many allocations were made */
    double hard_deadline; /* ...and at this time in any case */
    int max_live;      /* blocks a worker holds at most */
    bool small_only;   /* 4-16 KiB blocks only */
    atomic_uint_fast64_t ops, allocs, frees, enomem, io_checks;
};

struct stress_worker {
    struct stress_shared *s;
    fmem_pool *p;   /* this worker's client of the pool */
    uint32_t owner; /* nonzero, unique among workers */
};

struct live_block {
    fmem_handle h;
    uint64_t pattern;
    bool via_write; /* also has a tail written with fmem_write */
};

/* Where the fmem_write tail goes: just before the stamp word at the end. */
static inline uint64_t tail_offset(const fmem_handle *h, size_t len)
{
    return h->length - 8 - len;
}

static inline bool stress_release_and_free(struct stress_worker *w, struct live_block *b)
{
    struct stress_shared *s = w->s;
    void *m;
    int rc = fmem_map(w->p, &b->h, &m);
    if (rc) {
        failure_record(&s->fail, "owner %#x: map of live block node %u addr %#llx len %#llx: %s",
                       w->owner, b->h.node, (unsigned long long)b->h.addr,
                       (unsigned long long)b->h.length, fmem_strerror(rc));
        return false;
    }
    int64_t bad = block_check(m, b->h.length, b->pattern);
    if (bad >= 0) {
        failure_record(&s->fail, "owner %#x: block node %u addr %#llx len %#llx overwritten at +%lld",
                       w->owner, b->h.node, (unsigned long long)b->h.addr,
                       (unsigned long long)b->h.length, (long long)bad);
        return false;
    }
    if (b->via_write) {
        uint64_t tail[4];
        rc = fmem_read(w->p, &b->h, tail_offset(&b->h, sizeof tail), tail, sizeof tail);
        if (rc) {
            failure_record(&s->fail, "owner %#x: fmem_read: %s", w->owner, fmem_strerror(rc));
            return false;
        }
        for (int i = 0; i < 4; i++)
            if (tail[i] != (b->pattern ^ (uint64_t)i)) {
                failure_record(&s->fail, "owner %#x: fmem_write data of addr %#llx lost", w->owner,
                               (unsigned long long)b->h.addr);
                return false;
            }
        atomic_fetch_add(&s->io_checks, 1);
    }
    if (!shadow_release(&s->sh, &b->h, w->owner, &s->fail))
        return false;
    rc = fmem_free(w->p, &b->h);
    if (rc) {
        failure_record(&s->fail, "owner %#x: free node %u addr %#llx len %#llx: %s", w->owner,
                       b->h.node, (unsigned long long)b->h.addr, (unsigned long long)b->h.length,
                       fmem_strerror(rc));
        return false;
    }
    atomic_fetch_add(&s->frees, 1);
    return true;
}

/* Allocate, claim and stamp one block. false on ENOMEM (counted) or on a
 * failure (recorded). */
static inline bool stress_alloc_and_claim(struct stress_worker *w, struct test_rng *r,
                                          struct live_block *b, uint64_t seq)
{
    struct stress_shared *s = w->s;
    size_t size = s->small_only ? FMEM_CHUNK_SIZE << rng_below(r, 3) : random_block_size(r);
    int rc = fmem_alloc(w->p, size, &b->h);
    if (rc == FMEM_ENOMEM) {
        atomic_fetch_add(&s->enomem, 1);
        return false;
    }
    if (rc) {
        failure_record(&s->fail, "owner %#x: alloc %zu: %s", w->owner, size, fmem_strerror(rc));
        return false;
    }
    if (b->h.length != fmem_size_round(size) || b->h.addr % b->h.length) {
        failure_record(&s->fail, "owner %#x: alloc %zu gave addr %#llx len %#llx", w->owner, size,
                       (unsigned long long)b->h.addr, (unsigned long long)b->h.length);
        return false;
    }
    if (!shadow_claim(&s->sh, &b->h, w->owner, &s->fail))
        return false;
    b->pattern = ((uint64_t)w->owner << 40) ^ (seq * 0xD1B54A32D192ED03u);
    void *m;
    rc = fmem_map(w->p, &b->h, &m);
    if (rc) {
        failure_record(&s->fail, "owner %#x: map of new block node %u addr %#llx len %#llx: %s",
                       w->owner, b->h.node, (unsigned long long)b->h.addr,
                       (unsigned long long)b->h.length, fmem_strerror(rc));
        return false;
    }
    block_stamp(m, b->h.length, b->pattern);
    b->via_write = (seq & 7) == 0; /* every eighth block */
    if (b->via_write) {
        uint64_t tail[4];
        for (int i = 0; i < 4; i++)
            tail[i] = b->pattern ^ (uint64_t)i;
        rc = fmem_write(w->p, &b->h, tail_offset(&b->h, sizeof tail), tail, sizeof tail);
        if (rc) {
            failure_record(&s->fail, "owner %#x: fmem_write: %s", w->owner, fmem_strerror(rc));
            return false;
        }
    }
    atomic_fetch_add(&s->allocs, 1);
    return true;
}

/* Churn until the deadline (on a loaded machine: until min_allocs, at
 * most until the hard deadline) or the first failure anywhere; then free
 * every block still held (also after a failure, so that the pool drains). */
static inline void *stress_worker_run(void *arg)
{
    struct stress_worker *w = arg;
    struct stress_shared *s = w->s;
    struct live_block live[STRESS_MAX_LIVE];
    int nlive = 0, max_live = s->max_live < STRESS_MAX_LIVE ? s->max_live : STRESS_MAX_LIVE;
    struct test_rng r;
    rng_seed(&r, 1000 + w->owner);
    uint64_t seq = 0, ops = 0;
    while (atomic_load_explicit(&s->fail.count, memory_order_relaxed) == 0) {
        if ((ops & 15) == 0) {
            double now = now_seconds();
            if (now > s->hard_deadline || (now > s->deadline && s->allocs >= s->min_allocs))
                break;
        }
        ops++;
        bool do_alloc = nlive == 0 || (nlive < max_live && rng_below(&r, 100) < 55);
        int victim = -1;
        if (do_alloc) {
            if (stress_alloc_and_claim(w, &r, &live[nlive], ++seq))
                nlive++;
            else if (atomic_load(&s->fail.count))
                break;
            else if (nlive > 0) /* ENOMEM: make room */
                victim = (int)rng_below(&r, (uint64_t)nlive);
        } else {
            victim = (int)rng_below(&r, (uint64_t)nlive);
        }
        if (victim >= 0) {
            if (!stress_release_and_free(w, &live[victim]))
                break;
            live[victim] = live[--nlive];
        }
    }
    while (nlive > 0)
        stress_release_and_free(w, &live[--nlive]);
    atomic_fetch_add(&s->ops, ops);
    return NULL;
}

#endif
