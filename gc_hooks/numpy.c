/* numpy.c - numpy's data memory handler (NEP 49) on a binding: array data
 * allocated while the handler is current comes from the heap. Every array
 * keeps a reference to the handler that allocated it and frees through it,
 * so arrays made before keep their own handler. */
#define PY_SSIZE_T_CLEAN
#include "fmem_hooks_python.h"

#ifdef FMEM_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#include <stdlib.h>
#include <string.h>

static int numpy_ready(void)
{
    return PyArray_API || _import_array() == 0 ? 0 : -1;
}

static void *np_malloc(void *ctx, size_t n) { return fmem_hooks_malloc(ctx, n); }
static void *np_calloc(void *ctx, size_t n, size_t size) { return fmem_hooks_calloc(ctx, n, size); }
/* numpy never means "free" by a zero size: keep a minimal block */
static void *np_realloc(void *ctx, void *p, size_t n) { return fmem_hooks_realloc(ctx, p, n ? n : 1); }
static void np_free(void *ctx, void *p, size_t size)
{
    (void)size;
    fmem_hooks_free(ctx, p);
}

/* The capsule owns the handler: arrays hold the capsule, not the binding */
static void drop_handler(PyObject *capsule)
{
    free(PyCapsule_GetPointer(capsule, "mem_handler"));
}

FMEM_API int fmem_hooks_numpy_handler(fmem_hooks *b, PyObject **capsule)
{
    if (!b || !capsule)
        return FMEM_EINVAL;
    if (numpy_ready())
        return FMEM_EINVAL;
    PyDataMem_Handler *h = calloc(1, sizeof *h);
    if (!h) {
        PyErr_NoMemory();
        return FMEM_ENOMEM;
    }
    snprintf(h->name, sizeof h->name, "fmem");
    h->version = 1;
    h->allocator = (PyDataMemAllocator){
        .ctx = b, .malloc = np_malloc, .calloc = np_calloc, .realloc = np_realloc,
        .free = np_free,
    };
    PyObject *c = PyCapsule_New(h, "mem_handler", drop_handler);
    if (!c) {
        free(h);
        return FMEM_EINVAL;
    }
    *capsule = c;
    return 0;
}

FMEM_API int fmem_hooks_numpy_install(fmem_hooks *b, PyObject **old)
{
    PyObject *cap;
    int rc = fmem_hooks_numpy_handler(b, &cap);
    if (rc)
        return rc;
    PyObject *prev = PyDataMem_SetHandler(cap);
    Py_DECREF(cap);
    if (!prev)
        return FMEM_EINVAL;
    if (old)
        *old = prev;
    else
        Py_DECREF(prev);
    return 0;
}

FMEM_API int fmem_hooks_numpy_restore(PyObject *old)
{
    if (numpy_ready())
        return FMEM_EINVAL;
    PyObject *cur = PyDataMem_SetHandler(old);
    Py_XDECREF(old);
    if (!cur)
        return FMEM_EINVAL;
    Py_DECREF(cur);
    return 0;
}

#else /* built without numpy's headers */

FMEM_API int fmem_hooks_numpy_handler(fmem_hooks *b, PyObject **capsule)
{
    (void)b, (void)capsule;
    return FMEM_ENOTSUP;
}

FMEM_API int fmem_hooks_numpy_install(fmem_hooks *b, PyObject **old)
{
    (void)b, (void)old;
    return FMEM_ENOTSUP;
}

FMEM_API int fmem_hooks_numpy_restore(PyObject *old)
{
    (void)old;
    return FMEM_ENOTSUP;
}

#endif
