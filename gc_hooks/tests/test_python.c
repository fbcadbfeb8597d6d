/* test_python.c - CPython's allocator domains, pymalloc's arenas and
 * numpy's data handler on a binding, in an embedded interpreter (one per
 * test: Criterion runs each test in its own process). */
#define PY_SSIZE_T_CLEAN
#include <fmem_hooks_python.h>
#ifdef FMEM_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <numpy/ndarraytypes.h>
#endif
#include <errno.h>
#include <stdint.h>

#include "hooks_fixture.h"

static fmem_pool *pool;
static fmem_hooks *b;
static uintptr_t lo, hi;

static void setup(void)
{
    pool = fixture_pool("mem:?size=256M");
    b = fixture_binding(pool);
    fixture_pool_range(pool, &lo, &hi);
}

/* The interpreter may hold heap memory until the process ends: the
 * binding and pool are left to it. */
TestSuite(python, .init = setup);

static void run(const char *code)
{
    cr_assert_eq(PyRun_SimpleString(code), 0, "python failed:\n%s", code);
}

static PyObject *global(const char *name)
{
    PyObject *v = PyDict_GetItemString(PyModule_GetDict(PyImport_AddModule("__main__")), name);
    cr_assert_not_null(v, "no global %s", name);
    return v;
}

static void *address(const char *name) { return PyLong_AsVoidPtr(global(name)); }

/* In the binding's heap: inside the pool's mapping (slabs), or within an
 * arena's length (1 MiB) after the start of one of the heap's objects
 * (large objects have their own mappings, libfmem/far/lobj.h). */
static int in_pool(const void *p)
{
    if ((uintptr_t)p >= lo && (uintptr_t)p < hi)
        return 1;
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)4095;
    for (uintptr_t q = page; q + (1u << 20) > page && q >= 4096; q -= 4096)
        if (fmem_hooks_owns(b, (const void *)q))
            return 1;
    return 0;
}

Test(python, arenas_in_the_pool)
{
    Py_Initialize();
    run("before = object()");
    PyObjectArenaAllocator old;
    cr_assert_eq(fmem_hooks_python_arena(b, &old), 0);
    cr_assert_not_null(old.alloc);
    run("x = [object() for _ in range(300000)]\n"
        "last = id(x[-1]); first_old = id(before)");
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_geq(st.mallocs, 3, "new arenas: %llu", (unsigned long long)st.mallocs);
    cr_assert(in_pool(address("last")), "a new small object lives in a pool arena");
    cr_assert(!in_pool(address("first_old")), "an older one does not");
    run("del x; import gc; gc.collect()");
    cr_assert_geq(fixture_stats(b).frees, 1, "empty arenas go back to the heap");
    cr_assert_eq(Py_FinalizeEx(), 0);
}

Test(python, mem_and_obj_domains_after_start)
{
    Py_Initialize();
    run("old = [str(i) * 3 for i in range(20000)]");
    cr_assert_eq(fmem_hooks_python_domain(b, PYMEM_DOMAIN_MEM, NULL), 0);
    cr_assert_eq(fmem_hooks_python_domain(b, PYMEM_DOMAIN_OBJ, NULL), 0);
    run("new = [{'k': str(i) * 3} for i in range(20000)]\n"
        "a_new = id(new[-1]['k']); a_old = id(old[-1])\n"
        "total = sum(len(d['k']) for d in new)");
    /* a str: no GC header in front, so id() is the block's address */
    cr_assert(fmem_hooks_owns(b, address("a_new")));
    cr_assert(in_pool(address("a_new")));
    cr_assert(!fmem_hooks_owns(b, address("a_old")));
    cr_assert_eq(PyLong_AsLong(global("total")), 3 * 88890);
    run("del old");
    cr_assert_gt(fixture_stats(b).foreign_frees, 20000, "older objects freed the old way");
    fmem_hooks_set_active(b, 0);
    run("off = str(12345) * 7; a_off = id(off)");
    cr_assert(!fmem_hooks_owns(b, address("a_off")));
    fmem_hooks_set_active(b, 1);
    run("del new");
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_gt(st.mallocs, 40000);
    cr_assert_gt(st.frees, 40000);
    cr_assert_eq(Py_FinalizeEx(), 0);
}

Test(python, raw_domain_before_start)
{
    PyPreConfig pre;
    PyPreConfig_InitPythonConfig(&pre);
    PyStatus s = Py_PreInitialize(&pre);
    cr_assert(!PyStatus_Exception(s));
    cr_assert_eq(fmem_hooks_python_domain(b, PYMEM_DOMAIN_RAW, NULL), 0);
    Py_Initialize();
    run("import json; data = json.dumps(list(range(1000)))");
    cr_assert_gt(fixture_stats(b).mallocs, 0);
    cr_assert_eq(Py_FinalizeEx(), 0);
    cr_assert_gt(fixture_stats(b).frees, 0);
}

Test(python, bad_domain)
{
    cr_assert_eq(fmem_hooks_python_domain(b, (PyMemAllocatorDomain)7, NULL), FMEM_EINVAL);
}

#ifdef FMEM_HAVE_NUMPY
Test(python, numpy_arrays_in_the_pool)
{
    Py_Initialize();
    if (PyRun_SimpleString("import numpy") != 0)
        cr_skip_test("numpy cannot be imported by this interpreter");
    run("before = numpy.ones(100000)");
    PyObject *old = NULL;
    int rc = fmem_hooks_numpy_install(b, &old);
    cr_assert_eq(rc, 0);
    run("from numpy.core.multiarray import get_handler_name\n"
        "a = numpy.zeros(1_000_000); a += 2\n"
        "s = int(a.sum()); addr = a.ctypes.data\n"
        "name = get_handler_name(a); name_before = get_handler_name(before)\n"
        "c = numpy.concatenate([a, before]); addr_c = c.ctypes.data");
    cr_assert(fmem_hooks_owns(b, address("addr")));
    cr_assert(in_pool(address("addr")));
    cr_assert(fmem_hooks_owns(b, address("addr_c")));
    cr_assert_eq(PyLong_AsLong(global("s")), 2000000);
    cr_assert_str_eq(PyUnicode_AsUTF8(global("name")), "fmem");
    cr_assert_str_neq(PyUnicode_AsUTF8(global("name_before")), "fmem");
    cr_assert_eq(fmem_hooks_numpy_restore(old), 0);
    run("d = numpy.zeros(1000); addr_d = d.ctypes.data\n"
        "del a, c");
    cr_assert(!fmem_hooks_owns(b, address("addr_d")));
    fmem_hooks_stats_t st = fixture_stats(b);
    cr_assert_geq(st.frees, 2);
    cr_assert_eq(st.foreign_frees, 0);
    cr_assert_eq(Py_FinalizeEx(), 0);
}

/* The handler's functions themselves: sizes that overflow with the byte
 * of room each array gets fail cleanly; a block is owned and usable for
 * one byte more than asked. */
Test(python, numpy_handler_sizes)
{
    Py_Initialize();
    if (PyRun_SimpleString("import numpy") != 0)
        cr_skip_test("numpy cannot be imported by this interpreter");
    PyObject *cap = NULL;
    cr_assert_eq(fmem_hooks_numpy_handler(b, &cap), 0);
    PyDataMem_Handler *h = PyCapsule_GetPointer(cap, "mem_handler");
    cr_assert_not_null(h);
    PyDataMemAllocator *m = &h->allocator;
    fmem_hooks_stats_t st0 = fixture_stats(b);
    errno = 0;
    cr_assert_null(m->malloc(m->ctx, SIZE_MAX));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(m->calloc(m->ctx, SIZE_MAX / 4, 4));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(m->realloc(m->ctx, NULL, SIZE_MAX));
    cr_assert_eq(errno, ENOMEM);
    cr_assert_eq(fixture_stats(b).mallocs, st0.mallocs, "a failed size reached the heap");
    unsigned char *p = m->calloc(m->ctx, 64, 2);
    cr_assert_not_null(p);
    cr_assert(fmem_hooks_owns(b, p));
    cr_assert_geq(fmem_heap_usable_size(fmem_hooks_heap(b), p), 129);
    for (int i = 0; i < 128; i++)
        cr_assert_eq(p[i], 0);
    p = m->realloc(m->ctx, p, 4096);
    cr_assert_not_null(p);
    cr_assert_geq(fmem_heap_usable_size(fmem_hooks_heap(b), p), 4097);
    m->free(m->ctx, p, 4096);
    cr_assert_eq(fixture_stats(b).frees, st0.frees + 1);
    Py_DECREF(cap);
    cr_assert_eq(Py_FinalizeEx(), 0);
}
#endif
