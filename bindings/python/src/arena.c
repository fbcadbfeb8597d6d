/* arena.c - fmem.install_arena_allocator: pymalloc's arenas (the 1 MiB
 * blocks that hold small Python objects) in far memory, through gc_hooks'
 * arena hook. The hook wraps the allocator in place, so arenas made before
 * it keep being freed the old way. Arenas may live until the interpreter
 * ends, so the heap, and its pool or region, are kept forever. */
#include "fmempy.h"

#include <fmem_hooks_python.h>

static FpBinding *arena_binding; /* never released */

const char fp_install_arena_doc[] =
    "install_arena_allocator($module, /, target=None)\n--\n\n"
    "Put CPython's small-object arenas in far memory from now on: new arenas\n"
    "come from a heap on target (a Pool, or a Region to page them through a\n"
    "local cache; None: a new pool from fmem.open()), arenas made before are\n"
    "still freed the old way, and an arena the heap cannot hold comes from\n"
    "the previous allocator. Safe to call at any time, once per process\n"
    "(BusyError after that). Returns the target, which stays open for the\n"
    "rest of the process.";

FpBinding *fp_arena_binding(void)
{
    return arena_binding;
}

PyObject *fp_install_arena(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"target", NULL};
    PyObject *target = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:install_arena_allocator", kwlist, &target))
        return NULL;
    if (arena_binding)
        return fp_raisef(FpExc_Busy, "the arena allocator is already installed");
    if (target == Py_None) {
        if (!(target = (PyObject *)fp_pool_open(&FpPool_Type, NULL)))
            return NULL;
    } else
        Py_INCREF(target);
    FpBinding *b = fp_binding_get(target);
    if (!b) {
        Py_DECREF(target);
        return NULL;
    }
    int rc = fmem_hooks_python_arena(b->hooks, NULL);
    if (rc) {
        Py_DECREF(b);
        Py_DECREF(target);
        return fp_raise(rc, "arena hook");
    }
    arena_binding = b;
    return target;
}

const char fp_arena_stats_doc[] =
    "arena_allocator_stats($module, /)\n--\n\n"
    "Counters of the arena heap (see numpy_arrays.stats(): mallocs are\n"
    "arenas placed in far memory, foreign_frees arenas freed the old way;\n"
    "shared_pages: pages of pymalloc pools now mapping another pool's page,\n"
    "see compact()),\n"
    "or None before install_arena_allocator().";

PyObject *fp_arena_stats(PyObject *module, PyObject *unused)
{
    (void)module, (void)unused;
    if (!arena_binding)
        Py_RETURN_NONE;
    PyObject *d = fp_binding_stats(arena_binding);
    PyObject *n = d ? PyLong_FromSize_t(fmem_hooks_python_shared_pages()) : NULL;
    if (!n || PyDict_SetItemString(d, "shared_pages", n) < 0) {
        Py_XDECREF(n);
        Py_XDECREF(d);
        return NULL;
    }
    Py_DECREF(n);
    return d;
}
