/* compact.c - fmem.compact(): merge sparse slabs of the heaps numpy arrays
 * and the arena allocator use (fmem_heap_compact). It runs with the GIL
 * held: no Python code writes into objects while slabs are merged (the
 * condition fmem_heap_compact states for writes). */
#include "fmempy.h"
#include <fmem_hooks_python.h>

const char fp_compact_doc[] =
    "compact($module, /, target=None, budget=0, share_pages=True)\n--\n\n"
    "Merge sparsely used slabs of the far-memory heap of target (a Pool or\n"
    "Region whose heap numpy_arrays() or install_arena_allocator() made) and\n"
    "give the freed pool chunks back; objects keep their addresses. budget:\n"
    "bytes of objects that may be copied (0: no limit). target None: the\n"
    "arena allocator's heap and the default pool's heap, those that exist and\n"
    "can be compacted; then the empty pymalloc pools of the arena allocator's\n"
    "arenas are given back (release_empty_pools(), where supported), and\n"
    "the 4 KiB pages of its used pools that hold no object (all but each\n"
    "pool's header page); with share_pages, pages of used pools whose live\n"
    "bytes do not overlap are then merged into one physical page mapped at\n"
    "both addresses (such pools stay in use for good).\n"
    "Returns the bytes given back. NotSupportedError\n"
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
    static char *kwlist[] = {"target", "budget", "share_pages", NULL};
    PyObject *target = Py_None;
    long long budget = 0;
    int share = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OLp:compact", kwlist, &target, &budget, &share))
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
    if (cands[0]) {
        fmem_hooks_python_unshare_empty_pools(); /* pools whose objects are gone */
        int64_t got = fmem_hooks_python_release_empty_pools();
        if (got > 0)
            total += got; /* skipped where not supported */
        got = fmem_hooks_python_release_free_pages();
        if (got > 0)
            total += got;
        got = share ? fmem_hooks_python_share_pages() : 0;
        if (got > 0)
            total += got;
    }
    return PyLong_FromLongLong(total);
}

const char fp_release_pools_doc[] =
    "release_empty_pools($module, /)\n--\n\n"
    "Give back the memory of pymalloc's empty pools in the arenas that\n"
    "install_arena_allocator() put in far memory: all but the first 4 KiB\n"
    "page (the pool header pymalloc still reads) of every 16 KiB pool that\n"
    "holds no object; touching a pool again gets zero pages. The memory goes\n"
    "back to the pool's file (shm:, file: on tmpfs); the pool's allocation\n"
    "accounting does not change. Returns the bytes given back (0 before\n"
    "install_arena_allocator() and in a fork child). NotSupportedError on a\n"
    "CPython other than 3.11 (the version whose pymalloc layout was\n"
    "checked), when pymalloc is not in use, or when the arenas' memory\n"
    "cannot be released that way.";

PyObject *fp_release_pools(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    int64_t got = fmem_hooks_python_release_empty_pools();
    if (got == FMEM_ENOTSUP)
        return fp_raisef(FpExc_NotSupported,
                         "release_empty_pools: pymalloc's pool layout is checked for CPython "
                         "3.11 only (this is %d.%d), and pymalloc must be the object "
                         "allocator, on arenas in a shm: or tmpfs file: pool",
                         PY_MAJOR_VERSION, PY_MINOR_VERSION);
    if (got < 0)
        return fp_raise((int)got, "release_empty_pools");
    return PyLong_FromLongLong(got);
}
