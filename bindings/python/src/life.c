/* life.c - when a pool or a region may really be released.
 *
 * close() only marks the object closed. The C resource goes when nothing
 * needs it any more: no call is running on it without the GIL (inflight),
 * and no buffer, region or heap depends on it (dependents). Whoever drops
 * the last count releases it. All counts change with the GIL held. */
#include "fmempy.h"

static FpPool *default_pool; /* the shared fmem.open() pool */

fmem_pool *fp_pool_enter(FpPool *p)
{
    if (p->life.closed || !p->pool) {
        fp_raisef(FpExc_Closed, "the pool is closed");
        return NULL;
    }
    p->life.inflight++;
    return p->pool;
}

void fp_pool_leave(FpPool *p)
{
    p->life.inflight--;
    fp_pool_maybe_release(p);
}

fmem_pool *fp_pool_hold(FpPool *p)
{
    if (p->life.closed || !p->pool) {
        fp_raisef(FpExc_Closed, "the pool is closed");
        return NULL;
    }
    p->life.dependents++;
    return p->pool;
}

void fp_pool_unhold(FpPool *p)
{
    p->life.dependents--;
    fp_pool_maybe_release(p);
}

void fp_pool_maybe_release(FpPool *p)
{
    if (!p->life.closed || p->life.inflight || p->life.dependents || !p->pool)
        return;
    fmem_pool *c = p->pool;
    p->pool = NULL;
    Py_BEGIN_ALLOW_THREADS
    fmem_close(c);
    Py_END_ALLOW_THREADS
}

fmem_region *fp_region_enter(FpRegion *r)
{
    if (r->life.closed || !r->region) {
        fp_raisef(FpExc_Closed, "the region is closed");
        return NULL;
    }
    r->life.inflight++;
    return r->region;
}

void fp_region_leave(FpRegion *r)
{
    r->life.inflight--;
    fp_region_maybe_release(r);
}

void fp_region_maybe_release(FpRegion *r)
{
    if (!r->life.closed || r->life.inflight || r->life.dependents || !r->region)
        return;
    fmem_region *c = r->region;
    r->region = NULL;
    r->base = NULL;
    Py_BEGIN_ALLOW_THREADS
    fmem_region_destroy(c);
    Py_END_ALLOW_THREADS
    fp_pool_unhold(r->pool);
}

FpPool *fp_default_pool_peek(void)
{
    return default_pool && !default_pool->life.closed ? default_pool : NULL;
}

FpPool *fp_default_pool(void)
{
    if (!default_pool || default_pool->life.closed) {
        FpPool *p = fp_pool_open(&FpPool_Type, NULL);
        if (!p)
            return NULL;
        Py_XSETREF(default_pool, p);
    }
    return (FpPool *)Py_NewRef(default_pool);
}
