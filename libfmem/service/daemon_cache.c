/* daemon_cache.c - fmemd's side of the applications' block caches (the
 * entries in each ring, proto.h). fmemd fills an application's cache with
 * blocks allocated for it (REFILL) and takes blocks back out of it: those
 * the application asks it to drop (TRIM), all of them when its quota is
 * reached, and, when memory runs short for any application, every cached
 * block of every application that can be reached without waiting.
 *
 * The entries live in memory the application can write at any time, so
 * nothing here trusts them: a revoked entry's handle is decoded like a
 * request and freed only if the application's own table (a->own) says the
 * block is the application's, exactly as a free request would be. What the
 * application does to its entries can lose it only its own blocks, which
 * stay counted against its quota until it leaves. */
#include <string.h>

#include "service/daemon_internal.h"

static uint32_t full_state(uint32_t s) { return (((s >> 1) + 1) << 1) | 1; }

int cache_refill(struct fmemd *d, struct app *a, unsigned k, unsigned want, unsigned *filled)
{
    struct ring_cache_ent *ents = a->ring->cache[k];
    unsigned n = 0;
    int rc = 0;
    for (unsigned i = 0; i < RING_CACHE_ENTRIES && n < want; i++) {
        uint32_t s = atomic_load(&ents[i].state);
        if (s & 1)
            continue;
        fmem_handle h;
        /* the first block may make room by revoking cached ones; later
         * ones stop at the first refusal: a partial refill is enough */
        rc = app_alloc(d, a, k, n == 0, &h);
        if (rc)
            break;
        memcpy((void *)&ents[i].h, &h, sizeof h);
        if (!atomic_compare_exchange_strong(&ents[i].state, &s, full_state(s))) {
            /* the application wrote the entry meanwhile: take it back */
            app_free(d, a, &h);
            continue;
        }
        n++;
    }
    *filled = n;
    return n ? 0 : rc ? rc : FMEM_EINVAL;
}

/* Empty entry i of class k if it is full and free its block if a->own says
 * it is the application's. true: a block went back to the pool. */
static bool revoke_entry(struct fmemd *d, struct app *a, unsigned k, unsigned i)
{
    struct ring_cache_ent *e = &a->ring->cache[k][i];
    uint32_t s = atomic_load(&e->state);
    if (!(s & 1))
        return false;
    struct ring_req req = {.op = RING_FREE};
    memcpy(&req.h, (const void *)&e->h, sizeof req.h);
    if (!atomic_compare_exchange_strong(&e->state, &s, s & ~1u))
        return false; /* the application took it first */
    struct svc_req r;
    if (ring_req_decode(&req, d->max_block, d->nnodes, &r) ||
        chunks_log2(r.h.length) != k)
        return false;
    return app_free(d, a, &r.h) == 0;
}

unsigned cache_trim(struct fmemd *d, struct app *a, unsigned k, unsigned keep)
{
    unsigned n = 0;
    for (unsigned i = keep; i < RING_CACHE_ENTRIES; i++)
        n += revoke_entry(d, a, k, i);
    a->revoked += n;
    return n;
}

unsigned cache_revoke_all(struct fmemd *d, struct app *a)
{
    unsigned n = 0;
    if (!a->ring)
        return 0;
    for (unsigned k = 0; k < RING_CACHE_CLASSES; k++)
        n += cache_trim(d, a, k, 0);
    return n;
}

bool cache_holds(const struct app *a, const fmem_handle *h)
{
    unsigned k = chunks_log2(h->length);
    if (k >= RING_CACHE_CLASSES || (FMEM_CHUNK_SIZE << k) != h->length)
        return false;
    const struct ring_cache_ent *ents = a->ring->cache[k];
    for (unsigned i = 0; i < RING_CACHE_ENTRIES; i++) {
        if (!(atomic_load(&ents[i].state) & 1))
            continue;
        fmem_handle c;
        memcpy(&c, (const void *)&ents[i].h, sizeof c);
        if (c.node == h->node && c.addr == h->addr)
            return true;
    }
    return false;
}

unsigned caches_reclaim(struct fmemd *d, struct app *self)
{
    unsigned n = cache_revoke_all(d, self); /* self->mu is held */
    pthread_mutex_lock(&d->cmu);
    for (unsigned i = 0; i < d->ncapps; i++) {
        struct app *a = d->capps[i];
        /* never wait for another application's lock while holding ours */
        if (a == self || pthread_mutex_trylock(&a->mu))
            continue;
        n += cache_revoke_all(d, a);
        pthread_mutex_unlock(&a->mu);
    }
    pthread_mutex_unlock(&d->cmu);
    return n;
}

void cache_register(struct fmemd *d, struct app *a)
{
    pthread_mutex_lock(&d->cmu);
    if (d->ncapps < MAX_APPS_HARD)
        d->capps[d->ncapps++] = a;
    pthread_mutex_unlock(&d->cmu);
}

void cache_unregister(struct fmemd *d, struct app *a)
{
    pthread_mutex_lock(&d->cmu);
    for (unsigned i = 0; i < d->ncapps; i++)
        if (d->capps[i] == a) {
            d->capps[i] = d->capps[--d->ncapps];
            break;
        }
    pthread_mutex_unlock(&d->cmu);
}
