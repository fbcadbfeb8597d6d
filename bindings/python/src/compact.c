/* compact.c - fmem.compact(): merge sparse slabs of the heaps numpy arrays
 * and the arena allocator use (fmem_heap_compact). It runs with the GIL
 * held: no Python code writes into objects while slabs are merged (the
 * condition fmem_heap_compact states for writes). */
#include "fmempy.h"

const char fp_compact_doc[] =
    "compact($module, /, target=None, budget=0)\n--\n\n"
    "Merge sparsely used slabs of the far-memory heap of target (a Pool or\n"
    "Region whose heap numpy_arrays() or install_arena_allocator() made) and\n"
    "give the freed pool chunks back; objects keep their addresses. budget:\n"
    "bytes of objects that may be copied (0: no limit). target None: the\n"
    "arena allocator's heap and the default pool's heap, those that exist and\n"
    "can be compacted. Returns the pool bytes given back. NotSupportedError\n"
    "for a target whose heap cannot be compacted (a Region, or a private\n"
    "'mem:' pool: only shm:/file: pools map a chunk twice). Heap statistics\n"
    "count it in heap_merges and heap_reclaimed_bytes.";

static FpBinding *binding_of(PyObject *owner)
{
    if (FpPool_Check(owner))
        return ((FpPool *)owner)->binding;
    return ((FpRegion *)owner)->binding;
}

PyObject *fp_compact(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"target", "budget", NULL};
    PyObject *target = Py_None;
    long long budget = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OL:compact", kwlist, &target, &budget))
        return NULL;
    if (budget < 0) {
        PyErr_SetString(PyExc_ValueError, "budget must be >= 0");
        return NULL;
    }
    if (target != Py_None) {
        if (!FpPool_Check(target) && !FpRegion_Check(target))
            return PyErr_Format(PyExc_TypeError, "expected an fmem.Pool or fmem.Region, not %.100s",
                                Py_TYPE(target)->tp_name);
        FpBinding *b = binding_of(target);
        if (!b) /* no heap on it yet: nothing to compact */
            return PyLong_FromLong(0);
        int64_t got = fmem_heap_compact(b->heap, (size_t)budget);
        if (got < 0)
            return fp_raise((int)got, "compact");
        return PyLong_FromLongLong(got);
    }
    FpBinding *cands[2] = {fp_arena_binding(), NULL};
    FpPool *dp = fp_default_pool_peek();
    if (dp && dp->binding != cands[0])
        cands[1] = dp->binding;
    int64_t total = 0;
    for (int i = 0; i < 2; i++)
        if (cands[i]) {
            int64_t got = fmem_heap_compact(cands[i]->heap, (size_t)budget);
            if (got > 0)
                total += got; /* heaps that cannot be compacted are skipped */
        }
    return PyLong_FromLongLong(total);
}
