/* worker.c - a worker thread's calls into the allocator, timed and
 * accounted, and its set of live blocks. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static void note_error(struct worker *w, int rc, const char *op, uint64_t size, uint64_t addr)
{
    if (w->r.errors++)
        return;
    w->r.first_error = rc;
    snprintf(w->r.first_error_what, sizeof w->r.first_error_what,
             "%s of %llu bytes at %#llx (%s phase)", op, (unsigned long long)size,
             (unsigned long long)addr, w->measuring ? "measured" : "setup");
}

int w_alloc(struct worker *w, size_t size, fmem_handle *out)
{
    const struct allocator *a = w->sh->a;
    struct op_cost c = {0};
    uint64_t t0 = bench_now_ns();
    int rc = a->alloc(w->sh->self, size, out, &c);
    uint64_t dt = bench_now_ns() - t0;
    struct thread_result *r = &w->r;
    if (c.retries > r->retries_max_all)
        r->retries_max_all = c.retries;
    if (rc == BENCH_EABORT) {
        r->aborted++;
        return rc;
    }
    if (rc && rc != FMEM_ENOMEM)
        note_error(w, rc, "alloc", size, 0);
    if (!w->measuring)
        return rc;
    hist_add(r->lat, dt);
    r->cas += c.cas;
    r->log_cas += c.log_cas;
    r->retries += c.retries;
    r->rtts += c.rtts;
    uint64_t k = c.cas - c.log_cas;
    r->cas_dist[k < CAS_DIST ? k : CAS_DIST - 1]++;
    if (c.retries > r->retries_max)
        r->retries_max = c.retries;
    if (rc == 0)
        r->allocs++;
    else if (rc == FMEM_ENOMEM)
        r->failed++;
    return rc;
}

int w_free(struct worker *w, const fmem_handle *h)
{
    const struct allocator *a = w->sh->a;
    struct op_cost c = {0};
    uint64_t t0 = bench_now_ns();
    int rc = a->free(w->sh->self, h, &c);
    uint64_t dt = bench_now_ns() - t0;
    if (rc)
        note_error(w, rc, "free", h->length, h->addr);
    if (w->measuring) {
        w->r.free_calls++;
        w->r.free_ns += dt;
        w->r.free_cas += c.cas;
        w->r.free_rtts += c.rtts;
        w->r.frees += rc == 0;
    }
    return rc;
}

bool live_push(struct worker *w, const fmem_handle *h)
{
    if (w->nlive == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        struct live *l = realloc(w->live, cap * sizeof *l);
        if (!l)
            return false;
        w->live = l;
        w->cap = cap;
    }
    w->live[w->nlive++].h = *h;
    w->live_bytes += h->length;
    return true;
}

fmem_handle live_take(struct worker *w, size_t i)
{
    fmem_handle h = w->live[i].h;
    w->live[i] = w->live[--w->nlive];
    w->live_bytes -= h.length;
    return h;
}
