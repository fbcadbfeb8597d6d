/* daemon_worker.c - fmemd's workers, one per core. Each serves the rings of
 * the applications assigned to it: it takes the posted slots, at most
 * WORKER_BATCH per ring per pass, runs them, and when there has been
 * nothing to do for a while (at most spin_ns, less on a busy machine) it
 * sleeps on all its rings' bells at once (futex_waitv) plus a private word
 * that announces a change of its list.
 *
 * Every request is decoded from a private copy and checked against the
 * application's own table before any metadata is touched: an application
 * can only free what it was given, within its quota. */
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "service/daemon_internal.h"

static int alloc_once(struct fmemd *d, struct app *a, unsigned k, fmem_handle *out)
{
    uint64_t bytes = FMEM_CHUNK_SIZE << k;
    const struct fmemd_config *c = d->cfg;
    if ((c->app_max_bytes && a->bytes + bytes > c->app_max_bytes) ||
        (c->app_max_allocs && a->blocks + 1 > c->app_max_allocs))
        return FMEM_EQUOTA;
    unsigned start = atomic_fetch_add_explicit(&d->rr, 1, memory_order_relaxed);
    int rc = FMEM_ENOMEM;
    for (unsigned i = 0; i < d->nnodes; i++) {
        struct dnode *dn = &d->nodes[(start + i) % d->nnodes];
        if (!dn->n || bytes > dn->data_bytes)
            continue;
        uint64_t chunk;
        uint32_t rkey;
        rc = node_alloc(dn->n, k, &chunk, &rkey);
        if (rc == FMEM_ENOMEM)
            continue;
        if (rc)
            return rc;
        uint32_t key = rkey; /* what the application is given */
        if (dn->mw2) {
            rc = app_bind2(d, a, dn->n->index, chunk, k, &key);
            if (rc) { /* nobody saw a key of it */
                node_free(dn->n, chunk, k, rkey);
                return rc;
            }
        }
        if (!own_put(&a->own, own_key(dn->n->index, chunk), rkey, k)) {
            struct own_entry tmp = {.app_rkey = key, .bound2 = dn->mw2};
            if (!dn->mw2 || app_revoke2(d, dn->n->index, &tmp) == 0)
                node_free(dn->n, chunk, k, rkey);
            return FMEM_ENOMEM;
        }
        if (dn->mw2) {
            struct own_entry *e = own_get(&a->own, own_key(dn->n->index, chunk));
            e->app_rkey = key;
            e->bound2 = true;
            /* bound and recorded, the application not answered yet */
            mw2_crash_point("bind");
        }
        out->addr = chunk << CHUNK_SHIFT;
        out->length = bytes;
        out->rkey = key;
        out->node = (uint16_t)dn->n->index;
        out->flags = 0;
        a->bytes += bytes;
        a->blocks++;
        a->allocs++;
        if (node_last_retries > a->max_retries)
            a->max_retries = node_last_retries;
        return 0;
    }
    return rc;
}

int app_alloc(struct fmemd *d, struct app *a, unsigned k, bool reclaim, fmem_handle *out)
{
    int rc = alloc_once(d, a, k, out);
    /* blocks sitting in caches count: at the quota, the application's own
     * cached blocks go back; with memory short, everyone's */
    if (reclaim && rc == FMEM_EQUOTA && cache_revoke_all(d, a))
        rc = alloc_once(d, a, k, out);
    else if (reclaim && rc == FMEM_ENOMEM && caches_reclaim(d, a))
        rc = alloc_once(d, a, k, out);
    if (rc == FMEM_EQUOTA)
        a->refused_quota++;
    return rc;
}

int app_free(struct fmemd *d, struct app *a, const fmem_handle *h)
{
    struct dnode *dn = &d->nodes[h->node];
    if (!dn->n)
        return FMEM_EBADHANDLE;
    uint64_t chunk = h->addr >> CHUNK_SHIFT;
    unsigned k = chunks_log2(h->length);
    struct own_entry *e = own_get(&a->own, own_key(h->node, chunk));
    /* not ours (another application's, or already freed): no metadata
     * is read or written */
    if (!e || e->log2_chunks != k)
        return FMEM_EBADHANDLE;
    if (e->app_rkey != h->rkey)
        return FMEM_EACCES;
    /* a type-2B key dies first (invalidated): the block is freed only
     * once nobody's key reaches it but the pool's own */
    bool bound = e->bound2;
    int rc = bound ? app_revoke2(d, h->node, e) : 0;
    if (rc)
        return rc; /* still held: the reaper tries again */
    if (bound)
        mw2_crash_point("free"); /* the key is dead, the block not freed yet */
    rc = node_free(dn->n, chunk, k, e->rkey);
    if (rc == 0 || rc == FMEM_EDOUBLEFREE || rc == FMEM_EACCES) {
        /* gone from the pool either way: forget it */
        own_del(&a->own, e);
        a->bytes -= h->length;
        a->blocks--;
    }
    if (rc == 0)
        a->frees++;
    return rc;
}

/* A handle the application says it does not hold: name the mistake as a
 * pool opened in-process would (node_free), changing nothing. */
static int free_verdict(struct fmemd *d, struct app *a, const fmem_handle *h)
{
    if (cache_holds(a, h))
        return FMEM_EDOUBLEFREE; /* freed into its cache already */
    struct dnode *dn = &d->nodes[h->node];
    if (!dn->n)
        return FMEM_EBADHANDLE;
    uint64_t chunk = h->addr >> CHUNK_SHIFT;
    unsigned k = chunks_log2(h->length);
    struct own_entry *e = own_get(&a->own, own_key(h->node, chunk));
    if (e) /* ours, while the application lets go of it or takes it again */
        return e->log2_chunks != k ? FMEM_EBADHANDLE
               : e->app_rkey != h->rkey ? FMEM_EACCES
                                    : FMEM_EDOUBLEFREE;
    int rc = node_free_verdict(dn->n, chunk, k, h->rkey);
    /* a live block of another application is not this one's to name */
    return rc == 0 ? FMEM_EBADHANDLE : rc;
}

void handle_request(struct fmemd *d, struct app *a, const struct ring_req *req, struct ring_rsp *rsp)
{
    struct svc_req r;
    memset(rsp, 0, sizeof *rsp);
    rsp->rc = ring_req_decode(req, d->max_block, d->nnodes, &r);
    rsp->cookie = req->cookie;
    if (rsp->rc == 0) {
        switch (r.op) {
        case RING_PING:
            a->pings++;
            break;
        case RING_ALLOC:
            rsp->rc = app_alloc(d, a, r.log2_chunks, true, &rsp->h);
            break;
        case RING_FREE:
            /* a block in its cache is not the application's to free: it
             * is free as far as the application knows */
            rsp->rc = cache_holds(a, &r.h) ? FMEM_EBADHANDLE : app_free(d, a, &r.h);
            break;
        case RING_FREE_CHECK:
            rsp->rc = free_verdict(d, a, &r.h);
            break;
        case RING_SET_QP:
            /* which of its queue pairs it is does not matter: the memory
             * node binds only to application connections, and a key bound
             * to another application's queue pair helps nobody but it */
            if (!d->nodes[r.h.node].mw2)
                rsp->rc = FMEM_ENOTSUP;
            else
                a->app_qp[r.h.node] = r.count;
            break;
        case RING_REFILL:
            rsp->rc = cache_refill(d, a, r.log2_chunks, r.count, &rsp->count);
            a->refills++;
            break;
        case RING_TRIM:
            rsp->count = cache_trim(d, a, r.log2_chunks, r.count);
            a->trims++;
            break;
        default:
            rsp->rc = FMEM_EINVAL;
        }
    }
    if (rsp->rc)
        a->errors++;
}

/* Serve up to WORKER_BATCH posted requests of one ring. */
static unsigned serve(struct fmemd *d, struct app *a)
{
    uint64_t bits = ring_take(a->ring);
    unsigned n = 0;
    while (bits && n < WORKER_BATCH) {
        unsigned i = (unsigned)__builtin_ctzll(bits);
        bits &= bits - 1;
        struct ring_req req;
        if (!ring_begin(a->ring, i, &req))
            continue;
        struct ring_rsp rsp;
        pthread_mutex_lock(&a->mu);
        struct tp_trace t0 = tp_trace; /* this thread's: the request's share */
        handle_request(d, a, &req, &rsp);
        a->ops.cas += tp_trace.cas - t0.cas;
        a->ops.cas_fail += tp_trace.cas_fail - t0.cas_fail;
        a->ops.reads += tp_trace.reads - t0.reads;
        a->ops.writes += tp_trace.writes - t0.writes;
        a->ops.round_trips += tp_trace.round_trips - t0.round_trips;
        a->ops.log_cas += tp_trace.log_cas - t0.log_cas;
        pthread_mutex_unlock(&a->mu);
        ring_finish(a->ring, i, &rsp);
        n++;
    }
    ring_repost(a->ring, bits);
    return n;
}

static void sleep_on_rings(struct worker *w)
{
    struct ring_hdr *rings[FUTEX_WAITV_MAX];
    uint32_t bells[FUTEX_WAITV_MAX];
    uint32_t kick = atomic_load(&w->kick);
    pthread_mutex_lock(&w->mu);
    unsigned n = w->napps < FUTEX_WAITV_MAX - 1 ? w->napps : FUTEX_WAITV_MAX - 1;
    bool pending = false;
    for (unsigned i = 0; i < w->napps; i++)
        atomic_store(&w->apps[i]->ring->sleeping, 1);
    for (unsigned i = 0; i < n; i++) {
        rings[i] = w->apps[i]->ring;
        bells[i] = atomic_load(&rings[i]->bell);
    }
    for (unsigned i = 0; i < w->napps; i++)
        pending |= atomic_load(&w->apps[i]->ring->posted) != 0;
    pthread_mutex_unlock(&w->mu);
    if (!pending && atomic_load(&w->kick) == kick && !atomic_load(&w->quit)) {
        /* the private kick word comes first, then the bells; the list may
         * change meanwhile, which bumps the kick word */
        struct futex_waitv v[FUTEX_WAITV_MAX];
        memset(v, 0, sizeof v);
        v[0].val = kick;
        v[0].uaddr = (uintptr_t)&w->kick;
        v[0].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
        for (unsigned i = 0; i < n; i++) {
            v[i + 1].val = bells[i];
            v[i + 1].uaddr = (uintptr_t)&rings[i]->bell;
            v[i + 1].flags = FUTEX_32;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100000000; /* 100 ms: never rely on a wake-up alone */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        if (syscall(SYS_futex_waitv, v, n + 1, 0, &ts, CLOCK_MONOTONIC) < 0 && errno == ENOSYS)
            usleep(200);
        atomic_fetch_add_explicit(&w->sleeps, 1, memory_order_relaxed);
    }
    pthread_mutex_lock(&w->mu);
    for (unsigned i = 0; i < w->napps; i++)
        atomic_store_explicit(&w->apps[i]->ring->sleeping, 0, memory_order_relaxed);
    pthread_mutex_unlock(&w->mu);
}

/* Involuntary context switches of this thread so far: it lost its core to
 * another runnable thread. */
static long preemptions(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct fmemd *d = w->d;
    if (d->cfg->worker_rt_prio) {
        /* requests are served as soon as they are posted whatever else
         * runs; a worker with nothing to do sleeps (below), so it holds
         * no core while idle */
        struct sched_param sp = {.sched_priority = (int)d->cfg->worker_rt_prio};
        int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
        if (e && w == &d->workers[0])
            dsay(d, "worker real-time priority %u: %s", d->cfg->worker_rt_prio, strerror(e));
    }
    /* How long an idle worker spins before it sleeps adapts: it doubles
     * (up to spin_ns) when a request came while spinning, halves when the
     * spin ended in sleep, and drops to the least when the thread was
     * preempted meanwhile (a busy machine: spinning would only take the
     * core from the applications it waits for). */
    uint64_t cap = d->cfg->spin_ns, budget = cap, idle_since = ring_now_ns();
    long preempted = preemptions();
    unsigned spins = 0;
    while (!atomic_load_explicit(&w->quit, memory_order_relaxed)) {
        unsigned did = 0;
        pthread_mutex_lock(&w->mu);
        for (unsigned i = 0; i < w->napps; i++)
            did += serve(d, w->apps[i]);
        pthread_mutex_unlock(&w->mu);
        if (did) {
            atomic_fetch_add_explicit(&w->served, did, memory_order_relaxed);
            if (idle_since) /* the spin paid off */
                budget = budget * 2 < WORKER_SPIN_MIN_NS ? WORKER_SPIN_MIN_NS : budget * 2;
            if (budget > cap)
                budget = cap;
            spins = 0;
            idle_since = 0;
            continue;
        }
        if ((++spins & 15) == 0 || !idle_since) {
            uint64_t now = ring_now_ns();
            if (!idle_since) {
                idle_since = now;
            } else if (now - idle_since > budget) {
                long p = preemptions();
                budget = p != preempted ? 0 : budget / 2;
                preempted = p;
                uint64_t slept = ring_now_ns();
                sleep_on_rings(w);
                /* woken within the longest spin: a spin that long would
                 * have served it without a wake-up (so a quiet machine
                 * gets its spin back after a preemption) */
                uint64_t dt = ring_now_ns() - slept;
                if (dt < cap)
                    budget = 2 * dt < WORKER_SPIN_MIN_NS ? WORKER_SPIN_MIN_NS
                             : 2 * dt > cap               ? cap
                                                          : 2 * dt;
                atomic_store_explicit(&w->spin_ns, budget, memory_order_relaxed);
                idle_since = 0;
                continue;
            }
        }
        cpu_relax();
    }
    return NULL;
}

static void kick(struct worker *w)
{
    atomic_fetch_add(&w->kick, 1);
    syscall(SYS_futex, &w->kick, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void worker_attach(struct worker *w, struct app *a)
{
    pthread_mutex_lock(&w->mu);
    w->apps[w->napps++] = a;
    a->w = w;
    pthread_mutex_unlock(&w->mu);
    cache_register(w->d, a);
    kick(w);
}

void worker_detach(struct worker *w, struct app *a)
{
    cache_unregister(w->d, a); /* no other worker revokes its cache now */
    pthread_mutex_lock(&w->mu);
    for (unsigned i = 0; i < w->napps; i++)
        if (w->apps[i] == a) {
            w->apps[i] = w->apps[--w->napps];
            break;
        }
    pthread_mutex_unlock(&w->mu);
    /* from here on no pass of this worker touches `a` */
    kick(w);
}

int workers_start(struct fmemd *d)
{
    unsigned n = d->cfg->workers;
    if (n == 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (unsigned)c : 1;
    }
    if (n > MAX_WORKERS)
        n = MAX_WORKERS;
    pthread_mutex_init(&d->cmu, NULL);
    d->capps = calloc(MAX_APPS_HARD, sizeof *d->capps);
    if (!d->capps)
        return FMEM_ENOMEM;
    for (unsigned i = 0; i < n; i++) {
        struct worker *w = &d->workers[i];
        w->d = d;
        w->apps = calloc(MAX_APPS_HARD, sizeof *w->apps);
        pthread_mutex_init(&w->mu, NULL);
        if (!w->apps || pthread_create(&w->thr, NULL, worker_main, w)) {
            free(w->apps);
            pthread_mutex_destroy(&w->mu);
            return FMEM_ENOMEM;
        }
        d->nworkers++;
    }
    return 0;
}

void workers_stop(struct fmemd *d)
{
    for (unsigned i = 0; i < d->nworkers; i++) {
        atomic_store(&d->workers[i].quit, 1);
        kick(&d->workers[i]);
    }
    for (unsigned i = 0; i < d->nworkers; i++) {
        pthread_join(d->workers[i].thr, NULL);
        free(d->workers[i].apps);
        pthread_mutex_destroy(&d->workers[i].mu);
    }
    d->nworkers = 0;
    free(d->capps);
    d->capps = NULL;
}
