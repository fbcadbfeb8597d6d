/* numpy_handler.c - fmem.numpy_arrays: a with block inside which numpy
 * keeps the data of new arrays in a heap on a pool or in a region.
 *
 * The handler itself is gc_hooks' (fmem_hooks_numpy_handler). numpy stores
 * the handler capsule in every array it allocates and frees through it, so
 * the capsule must keep the heap alive: we chain a destructor that drops a
 * reference to the binding after gc_hooks' own destructor has run. The
 * handler is set with PyDataMem_SetHandler, which is per context (thread,
 * asyncio task), and restored when the block ends. */
#include "fmempy.h"

#include <fmem_hooks_python.h>

#ifdef FMEM_HAVE_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#endif

typedef struct {
    PyObject_HEAD
    PyObject *target;   /* Pool or Region */
    FpBinding *binding; /* from the first __enter__ on */
    PyObject *saved;    /* the handler to put back, while inside the block */
} FpNumpyArrays;

#ifdef FMEM_HAVE_NUMPY
/* what a handler capsule carries besides gc_hooks' handler */
struct capsule_owner {
    PyCapsule_Destructor inner;
    PyObject *binding;
};

static void capsule_destructor(PyObject *cap)
{
    struct capsule_owner *o = PyCapsule_GetContext(cap);
    if (o && o->inner)
        o->inner(cap);
    if (o) {
        Py_XDECREF(o->binding);
        PyMem_RawFree(o);
    }
}

static int numpy_ready(void)
{
    return PyArray_API || _import_array() == 0 ? 0 : -1;
}

/* a new reference to a handler capsule that keeps `b` alive */
static PyObject *owned_handler(FpBinding *b)
{
    PyObject *cap = NULL;
    int rc = fmem_hooks_numpy_handler(b->hooks, &cap);
    if (rc)
        return PyErr_Occurred() ? NULL : fp_raise(rc, "numpy handler");
    struct capsule_owner *o = PyMem_RawMalloc(sizeof *o);
    if (!o) {
        Py_DECREF(cap);
        return PyErr_NoMemory();
    }
    o->inner = PyCapsule_GetDestructor(cap);
    o->binding = Py_NewRef(b);
    if (PyErr_Occurred() || PyCapsule_SetContext(cap, o) < 0 ||
        PyCapsule_SetDestructor(cap, capsule_destructor) < 0) {
        Py_DECREF(o->binding);
        PyMem_RawFree(o);
        Py_DECREF(cap);
        return NULL;
    }
    return cap;
}
#endif

static PyObject *na_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"target", NULL};
    PyObject *target = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:numpy_arrays", kwlist, &target))
        return NULL;
    if (target == Py_None) {
        if (!(target = (PyObject *)fp_default_pool()))
            return NULL;
    } else if (FpPool_Check(target) || FpRegion_Check(target))
        Py_INCREF(target);
    else
        return PyErr_Format(PyExc_TypeError, "expected an fmem.Pool or fmem.Region, not %.100s",
                            Py_TYPE(target)->tp_name);
    FpNumpyArrays *self = (FpNumpyArrays *)type->tp_alloc(type, 0);
    if (!self) {
        Py_DECREF(target);
        return NULL;
    }
    self->target = target;
    return (PyObject *)self;
}

static void na_dealloc(FpNumpyArrays *self)
{
    Py_XDECREF(self->saved);
    Py_XDECREF(self->binding);
    Py_XDECREF(self->target);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *na_enter(FpNumpyArrays *self, PyObject *unused)
{
    (void)unused;
#ifdef FMEM_HAVE_NUMPY
    if (self->saved)
        return fp_raisef(FpExc_Busy, "this numpy_arrays block is already active");
    if (numpy_ready() < 0)
        return NULL;
    if (!self->binding && !(self->binding = fp_binding_get(self->target)))
        return NULL;
    PyObject *cap = owned_handler(self->binding);
    if (!cap)
        return NULL;
    PyObject *old = PyDataMem_SetHandler(cap);
    Py_DECREF(cap);
    if (!old)
        return NULL;
    self->saved = old;
    return Py_NewRef(self);
#else
    (void)self;
    return fp_raisef(FpExc_NotSupported, "fmem was built without numpy's headers");
#endif
}

static PyObject *na_exit(FpNumpyArrays *self, PyObject *args)
{
    (void)args;
    if (!self->saved)
        Py_RETURN_NONE;
    PyObject *old = self->saved;
    self->saved = NULL;
    int rc = fmem_hooks_numpy_restore(old); /* steals old */
    if (rc)
        return PyErr_Occurred() ? NULL : fp_raise(rc, "numpy handler restore");
    Py_RETURN_FALSE;
}

PyDoc_STRVAR(stats_doc,
"stats($self, /)\n--\n\n"
"Counters of the heap behind the block: mallocs, frees, reallocs (array\n"
"data through the hooks), foreign_frees, fallback_allocs, spills (data\n"
"the heap could not hold, made by the previous allocator), and\n"
"heap_objects, heap_slabs, heap_large, heap_remote_bytes (pool or region\n"
"bytes held now), heap_remote_peak, heap_double_frees, heap_bad_frees.");

static PyObject *na_stats(FpNumpyArrays *self, PyObject *unused)
{
    (void)unused;
    if (!self->binding && !(self->binding = fp_binding_get(self->target)))
        return NULL;
    return fp_binding_stats(self->binding);
}

static PyObject *na_get_target(FpNumpyArrays *self, void *c)
{
    (void)c;
    return Py_NewRef(self->target);
}

static PyObject *na_get_active(FpNumpyArrays *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->saved != NULL);
}

static PyMethodDef na_methods[] = {
    {"__enter__", (PyCFunction)na_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nMake numpy allocate new array data in the heap; returns self."},
    {"__exit__", (PyCFunction)na_exit, METH_VARARGS,
     "__exit__($self, t, v, tb, /)\n--\n\n"
     "Put the previous numpy data handler back (arrays made inside stay valid)."},
    {"stats", (PyCFunction)na_stats, METH_NOARGS, stats_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef na_getset[] = {
    {"target", (getter)na_get_target, NULL, "The Pool or Region the data goes to.", NULL},
    {"active", (getter)na_get_active, NULL, "True inside the with block.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(na_doc,
"numpy_arrays(target=None)\n--\n\n"
"Context manager: inside 'with fmem.numpy_arrays(target):' every numpy\n"
"array that allocates data keeps it in far memory: in a heap on target,\n"
"a Pool (directly mapped; default: fmem.default_pool()) or a Region\n"
"(paged through its local cache). numpy's PyDataMem_SetHandler is used,\n"
"so the setting is per thread (per context). Arrays made inside stay\n"
"valid after the block and are freed into the heap whenever they die;\n"
"the heap, and its pool or region, live until the last of them is gone.\n"
"One object can be reused for several blocks, one at a time. A region\n"
"used this way belongs to the heap: it exports no buffer any more.");

PyTypeObject FpNumpyArrays_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem.numpy_arrays",
    .tp_basicsize = sizeof(FpNumpyArrays),
    .tp_dealloc = (destructor)na_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = na_doc,
    .tp_methods = na_methods,
    .tp_getset = na_getset,
    .tp_new = na_new,
};
