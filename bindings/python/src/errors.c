/* errors.c - fmem's exception classes: one per libfmem error code, all under
 * fmem.Error, each also deriving from the built-in exception a Python
 * program would expect (MemoryError, ValueError, OSError, ...).
 *
 * The OSError ones carry .errno: the system call's errno
 * when a system call failed, else one that says the same (EBUSY, EDQUOT,
 * ...). When Python has an OSError subclass for that errno
 * (FileNotFoundError for ENOENT, ConnectionRefusedError, ...), the
 * exception is an instance of a subclass of both, named like the fmem
 * class, so that both `except fmem.TransportError` and
 * `except FileNotFoundError` catch it. */
#include "fmempy.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

PyObject *FpExc_Error, *FpExc_Closed, *FpExc_InUse, *FpExc_Size, *FpExc_DoubleFree,
    *FpExc_NotSupported, *FpExc_Busy;

struct exc_spec {
    const char *name; /* fmem.<name> */
    int code;         /* libfmem code it stands for, 0: none */
    int err;          /* OSError ones: .errno when no system call said */
    PyObject **base;  /* the built-in class it also derives from */
    PyObject **slot;  /* where the class is kept, or NULL */
    const char *doc;
};

static const struct exc_spec specs[] = {
    {"OutOfMemoryError", FMEM_ENOMEM, 0, &PyExc_MemoryError, NULL,
     "The pool has no free block of that size."},
    {"SizeError", FMEM_ESIZE, 0, &PyExc_ValueError, &FpExc_Size,
     "A size is zero, negative, or larger than the pool (or region) can hold."},
    {"InvalidArgumentError", FMEM_EINVAL, 0, &PyExc_ValueError, NULL,
     "An argument is not valid for this call."},
    {"DoubleFreeError", FMEM_EDOUBLEFREE, 0, &PyExc_ValueError, &FpExc_DoubleFree,
     "The block is already free."},
    {"BadHandleError", FMEM_EBADHANDLE, 0, &PyExc_ValueError, NULL,
     "The handle does not name an allocation."},
    {"URIError", FMEM_EURI, 0, &PyExc_ValueError, NULL,
     "The pool URI cannot be parsed."},
    {"ClosedError", 0, 0, &PyExc_ValueError, &FpExc_Closed,
     "The buffer was freed, or the pool or region was closed."},
    {"RangeError", FMEM_ERANGE, 0, &PyExc_IndexError, NULL,
     "An offset or length is outside the memory."},
    {"BufferInUseError", 0, 0, &PyExc_BufferError, &FpExc_InUse,
     "Views of the memory (memoryview, numpy arrays, ...) are still alive, or a heap "
     "owns it."},
    {"CorruptPoolError", FMEM_ECORRUPT, EUCLEAN, &PyExc_OSError, NULL,
     "The pool file is corrupt or not an fmem pool."},
    {"TransportError", FMEM_EIO, EIO, &PyExc_OSError, NULL,
     "A system call or the transport failed."},
    {"NotSupportedError", FMEM_ENOTSUP, EOPNOTSUPP, &PyExc_OSError, &FpExc_NotSupported,
     "The transport (or this build) cannot do this."},
    {"BusyError", FMEM_EBUSY, EBUSY, &PyExc_OSError, &FpExc_Busy,
     "No free user id, or the resource is already in use."},
    {"QuotaError", FMEM_EQUOTA, EDQUOT, &PyExc_OSError, NULL,
     "The application's allocation quota (bytes or allocations) is reached."},
    {"AccessError", FMEM_EACCES, EACCES, &PyExc_PermissionError, NULL,
     "The key does not grant access, or the process lacks a permission (userfaultfd)."},
    {"StaleHandleError", FMEM_ESTALE, ESTALE, &PyExc_OSError, NULL,
     "The allocation service that issued the buffer is gone (it died, was fenced by its "
     "memory node, or shut down): the block may be another application's now. Reconnect."},
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

static const struct exc_spec *spec_of_class(PyObject *cls)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (classes[i] == cls)
            return &specs[i];
    return NULL;
}

static PyObject *class_of(int rc)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (specs[i].code == rc)
            return classes[i];
    return FpExc_Error;
}

/* The class to raise for cls with errno err: cls, or a subclass of cls
 * and of the OSError subclass Python uses for err (made once, kept). */
static PyObject *class_for_errno(PyObject *cls, int err)
{
    static PyObject *made; /* {(cls, builtin): class} */
    PyObject *probe = PyObject_CallFunction(PyExc_OSError, "is", err, "");
    if (!probe)
        return NULL;
    PyObject *builtin = (PyObject *)Py_TYPE(probe);
    Py_INCREF(builtin);
    Py_DECREF(probe);
    int covered = PyObject_IsSubclass(cls, builtin);
    if (covered != 0) { /* cls is one already (or an error) */
        Py_DECREF(builtin);
        return covered < 0 ? NULL : Py_NewRef(cls);
    }
    PyObject *key = PyTuple_Pack(2, cls, builtin), *res = NULL;
    if (!key || (!made && !(made = PyDict_New())))
        goto out;
    res = PyDict_GetItemWithError(made, key);
    if (res || PyErr_Occurred()) {
        Py_XINCREF(res);
        goto out;
    }
    PyObject *bases = PyTuple_Pack(2, cls, builtin);
    PyObject *name = PyObject_GetAttrString(cls, "__name__");
    const char *n = name ? PyUnicode_AsUTF8(name) : NULL;
    char qual[96];
    if (n) {
        snprintf(qual, sizeof qual, "fmem.%s", n);
        res = PyErr_NewExceptionWithDoc(qual, ((PyTypeObject *)cls)->tp_doc, bases, NULL);
    }
    Py_XDECREF(name);
    Py_XDECREF(bases);
    if (res && PyDict_SetItem(made, key, res) < 0)
        Py_CLEAR(res);
out:
    Py_XDECREF(key);
    Py_DECREF(builtin);
    return res;
}

static int set_attr_int(PyObject *exc, const char *name, long v)
{
    PyObject *o = PyLong_FromLong(v);
    int rc = o ? PyObject_SetAttrString(exc, name, o) : -1;
    Py_XDECREF(o);
    return rc;
}

/* Raise cls(msg) with .code = code and, for OSError classes, .errno = err
 * (0: the class's usual one). Steals msg. */
static PyObject *raise_msg(PyObject *cls, int code, int err, PyObject *msg)
{
    if (!msg)
        return NULL;
    Py_INCREF(cls);
    if (PyObject_IsSubclass(cls, PyExc_OSError) == 1) {
        const struct exc_spec *sp = spec_of_class(cls);
        if (err <= 0)
            err = sp && sp->err ? sp->err : EIO;
        PyObject *c = class_for_errno(cls, err);
        Py_SETREF(cls, c);
    } else {
        err = 0;
    }
    PyObject *exc = cls ? PyObject_CallOneArg(cls, msg) : NULL;
    Py_DECREF(msg);
    if (!exc) {
        Py_XDECREF(cls);
        return NULL;
    }
    /* .errno only: with .strerror set too, str() would become
     * "[Errno N] strerror" instead of the message */
    int rc = set_attr_int(exc, "code", code);
    if (rc == 0 && err)
        rc = set_attr_int(exc, "errno", err);
    if (rc == 0)
        PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    Py_DECREF(cls);
    return NULL;
}

PyObject *fp_raise(int rc, const char *what)
{
    /* errno is the system call's only where libfmem reports one failed */
    int err = rc == FMEM_EIO || rc == FMEM_EACCES ? errno : 0;
    PyObject *msg;
    if (rc == FMEM_EIO && err)
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, fmem_strerror(rc), strerror(err));
    else if (rc == FMEM_EURI && *fmem_uri_error()) /* name the bad key or value */
        msg = PyUnicode_FromFormat("%s: %s: %s", what, fmem_strerror(rc), fmem_uri_error());
    else
        msg = PyUnicode_FromFormat("%s: %s", what, fmem_strerror(rc));
    return raise_msg(class_of(rc), rc, err, msg);
}

PyObject *fp_raisef(PyObject *cls, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    return raise_msg(cls, 0, 0, msg);
}
