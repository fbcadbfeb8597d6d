/* numpy.c - numpy's data memory handler (NEP 49) on a binding: array data
 * allocated while the handler is current comes from the heap. Every array
 * keeps a reference to the handler that allocated it and frees through it,
 * so arrays made before keep their own handler. */
#define PY_SSIZE_T_CLEAN
#include "fmem_hooks_python.h"

#ifdef FMEM_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int numpy_ready(void)
{
    return PyArray_API || _import_array() == 0 ? 0 : -1;
}

/* Every array gets a byte more than it asks for, so that no two arrays
 * touch. numpy's vector loops run only where input and output do not
 * overlap, and its check takes arrays that touch (one ends where the next
 * starts) as overlapping: the loop then falls back to scalar code, which
 * differs in the last bit (numpy's own tests compare exactly: np.log10
 * and numpy.ma.log10 of the same 8 values differed in 202 of 300 tries)
 * and is slower. glibc's chunk headers keep its blocks apart; the heap
 * packs objects of a class, and runs of pages, side by side. */
#define NP_PAD 1

static void *np_malloc(void *ctx, size_t n)
{
    if (n > SIZE_MAX - NP_PAD) {
        errno = ENOMEM;
        return NULL;
    }
    return fmem_hooks_malloc(ctx, n + NP_PAD);
}

static void *np_calloc(void *ctx, size_t n, size_t size)
{
    if (size && n > (SIZE_MAX - NP_PAD) / size) {
        errno = ENOMEM;
        return NULL;
    }
    return fmem_hooks_calloc(ctx, 1, n * size + NP_PAD);
}

/* numpy never means "free" by a zero size: a minimal block stays */
static void *np_realloc(void *ctx, void *p, size_t n)
{
    if (n > SIZE_MAX - NP_PAD) {
        errno = ENOMEM;
        return NULL;
    }
    return fmem_hooks_realloc(ctx, p, n + NP_PAD);
}
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
