/* errors.c - fmem's exception classes: one per libfmem error code, all under
 * fmem.Error, each also deriving from the built-in exception a Python
 * program would expect (MemoryError, ValueError, OSError, ...). */
#include "fmempy.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

PyObject *FpExc_Error, *FpExc_Closed, *FpExc_InUse, *FpExc_Size, *FpExc_DoubleFree,
    *FpExc_NotSupported, *FpExc_Busy;

struct exc_spec {
    const char *name; /* fmem.<name> */
    int code;         /* libfmem code it stands for, 0: none */
    PyObject **base;  /* the built-in class it also derives from */
    PyObject **slot;  /* where the class is kept, or NULL */
    const char *doc;
};

static const struct exc_spec specs[] = {
    {"OutOfMemoryError", FMEM_ENOMEM, &PyExc_MemoryError, NULL,
     "The pool has no free block of that size."},
    {"SizeError", FMEM_ESIZE, &PyExc_ValueError, &FpExc_Size,
     "A size is zero, negative, or larger than the pool (or region) can hold."},
    {"InvalidArgumentError", FMEM_EINVAL, &PyExc_ValueError, NULL,
     "An argument is not valid for this call."},
    {"DoubleFreeError", FMEM_EDOUBLEFREE, &PyExc_ValueError, &FpExc_DoubleFree,
     "The block is already free."},
    {"BadHandleError", FMEM_EBADHANDLE, &PyExc_ValueError, NULL,
     "The handle does not name an allocation."},
    {"URIError", FMEM_EURI, &PyExc_ValueError, NULL,
     "The pool URI cannot be parsed."},
    {"ClosedError", 0, &PyExc_ValueError, &FpExc_Closed,
     "The buffer was freed, or the pool or region was closed."},
    {"RangeError", FMEM_ERANGE, &PyExc_IndexError, NULL,
     "An offset or length is outside the memory."},
    {"BufferInUseError", 0, &PyExc_BufferError, &FpExc_InUse,
     "Views of the memory (memoryview, numpy arrays, ...) are still alive, or a heap "
     "owns it."},
    {"CorruptPoolError", FMEM_ECORRUPT, &PyExc_OSError, NULL,
     "The pool file is corrupt or not an fmem pool."},
    {"TransportError", FMEM_EIO, &PyExc_OSError, NULL,
     "A system call or the transport failed."},
    {"NotSupportedError", FMEM_ENOTSUP, &PyExc_OSError, &FpExc_NotSupported,
     "The transport (or this build) cannot do this."},
    {"BusyError", FMEM_EBUSY, &PyExc_OSError, &FpExc_Busy,
     "No free user id, or the resource is already in use."},
    {"QuotaError", FMEM_EQUOTA, &PyExc_OSError, NULL,
     "The application's allocation quota (bytes or allocations) is reached."},
    {"AccessError", FMEM_EACCES, &PyExc_PermissionError, NULL,
     "The key does not grant access, or the process lacks a permission (userfaultfd)."},
};
#define NSPECS (sizeof specs / sizeof specs[0])

static PyObject *classes[NSPECS];

int fp_errors_init(PyObject *m)
{
    FpExc_Error = PyErr_NewExceptionWithDoc(
        "fmem.Error",
        "Base class of every fmem error. The attribute code holds the libfmem error "
        "code (a negative int), or 0 for errors of the binding itself.",
        NULL, NULL);
    if (!FpExc_Error || PyModule_AddObjectRef(m, "Error", FpExc_Error) < 0)
        return -1;
    for (size_t i = 0; i < NSPECS; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "fmem.%s", specs[i].name);
        PyObject *bases = PyTuple_Pack(2, FpExc_Error, *specs[i].base);
        if (!bases)
            return -1;
        classes[i] = PyErr_NewExceptionWithDoc(qual, specs[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!classes[i] || PyModule_AddObjectRef(m, specs[i].name, classes[i]) < 0)
            return -1;
        if (specs[i].slot)
            *specs[i].slot = classes[i];
    }
    return 0;
}

static PyObject *class_of(int rc)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (specs[i].code == rc)
            return classes[i];
    return FpExc_Error;
}

static PyObject *raise_msg(PyObject *cls, int code, PyObject *msg)
{
    if (!msg)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(cls, msg);
    Py_DECREF(msg);
    if (!exc)
        return NULL;
    PyObject *c = PyLong_FromLong(code);
    if (!c || PyObject_SetAttrString(exc, "code", c) < 0) {
        Py_XDECREF(c);
        Py_DECREF(exc);
        return NULL;
    }
    Py_DECREF(c);
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *fp_raise(int rc, const char *what)
{
    int err = errno;
    PyObject *msg;
    if (rc == FMEM_EIO && err)
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, fmem_strerror(rc), strerror(err));
    else
        msg = PyUnicode_FromFormat("%s: %s", what, fmem_strerror(rc));
    return raise_msg(class_of(rc), rc, msg);
}

PyObject *fp_raisef(PyObject *cls, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    return raise_msg(cls, 0, msg);
}
