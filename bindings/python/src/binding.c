/* binding.c - the heap of a pool or region and the gc_hooks binding over
 * it, shared by numpy handlers and the arena hook of that owner. One per
 * owner at a time (a region's space can only belong to one heap); made on
 * first use, dropped with the last reference: numpy_arrays objects, the
 * handler capsules of arrays, the arena hook (forever). */
#include "fmempy.h"

static int owner_hold(PyObject *owner, fmem_heap **heap)
{
    int rc;
    if (FpPool_Check(owner)) {
        FpPool *p = (FpPool *)owner;
        fmem_pool *c = fp_pool_hold(p);
        if (!c)
            return -1;
        /* compactable where the pool's chunks can be mapped twice (shm:,
         * file:), so fmem.compact() can merge its slabs */
        rc = fmem_heap_new_compactable(c, NULL, heap);
        if (rc == FMEM_ENOTSUP)
            rc = fmem_heap_new(c, heap);
        if (rc != 0) {
            fp_pool_unhold(p);
            fp_raise(rc, "heap on the pool");
            return -1;
        }
        return 0;
    }
    FpRegion *r = (FpRegion *)owner;
    if (r->life.closed || !r->region) {
        fp_raisef(FpExc_Closed, "the region is closed");
        return -1;
    }
    if (r->exports) {
        fp_raisef(FpExc_InUse, "views of the region are alive: a heap cannot own it");
        return -1;
    }
    if ((rc = fmem_heap_new_region(r->region, heap)) != 0) {
        fp_raise(rc, "heap in the region");
        return -1;
    }
    r->life.dependents++;
    return 0;
}

static void owner_unhold(PyObject *owner)
{
    if (FpPool_Check(owner)) {
        ((FpPool *)owner)->binding = NULL;
        fp_pool_unhold((FpPool *)owner);
    } else {
        FpRegion *r = (FpRegion *)owner;
        r->binding = NULL;
        r->life.dependents--;
        fp_region_maybe_release(r);
    }
}

FpBinding *fp_binding_get(PyObject *owner)
{
    FpBinding **slot;
    if (FpPool_Check(owner))
        slot = &((FpPool *)owner)->binding;
    else if (FpRegion_Check(owner))
        slot = &((FpRegion *)owner)->binding;
    else {
        PyErr_Format(PyExc_TypeError, "expected an fmem.Pool or fmem.Region, not %.100s",
                     Py_TYPE(owner)->tp_name);
        return NULL;
    }
    if (*slot)
        return (FpBinding *)Py_NewRef(*slot);

    FpBinding *b = PyObject_New(FpBinding, &FpBinding_Type);
    if (!b)
        return NULL;
    b->owner = NULL;
    b->heap = NULL;
    b->hooks = NULL;
    if (owner_hold(owner, &b->heap) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    b->owner = Py_NewRef(owner);
    int rc = fmem_hooks_new(b->heap, &b->hooks);
    if (rc) {
        fp_raise(rc, "hooks");
        Py_DECREF(b);
        return NULL;
    }
    *slot = b;
    return b;
}

static void binding_dealloc(FpBinding *b)
{
    /* with the GIL held: the owner's slot still names this binding, and a
     * region's space must be free before another heap may take it */
    fmem_hooks_drop(b->hooks);
    fmem_heap_destroy(b->heap);
    if (b->owner) {
        owner_unhold(b->owner);
        Py_DECREF(b->owner);
    }
    PyObject_Free(b);
}

PyObject *fp_binding_stats(FpBinding *b)
{
    fmem_hooks_stats_t hs;
    fmem_heap_stats_t st;
    int rc = fmem_hooks_stats(b->hooks, &hs);
    if (!rc)
        rc = fmem_heap_stats(b->heap, &st);
    return rc ? fp_raise(rc, "heap stats") : fp_heap_stats_dict(&hs, &st);
}

PyTypeObject FpBinding_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem._Heap",
    .tp_basicsize = sizeof(FpBinding),
    .tp_dealloc = (destructor)binding_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The heap of a pool or region with the allocator hooks bound to it "
              "(internal).",
};
