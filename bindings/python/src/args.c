/* args.c - argument conversions shared by the types. */
#include "fmempy.h"

Py_ssize_t fp_size_arg(PyObject *o, const char *name, Py_ssize_t min)
{
    if (!PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(o); /* ints, numpy integers, ... */
    if (!i)
        return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 || v > PY_SSIZE_T_MAX) {
        fp_raisef(FpExc_Size, "%s is too large: %R bytes", name, o);
        return -1;
    }
    if (overflow < 0 || v < min) {
        fp_raisef(FpExc_Size, "%s must be at least %zd, not %R", name, min, o);
        return -1;
    }
    return (Py_ssize_t)v;
}

int fp_range_of(PyObject *o, uintptr_t *lo, uintptr_t *hi)
{
    if (PyLong_Check(o)) {
        unsigned long long a = PyLong_AsUnsignedLongLong(o);
        if (a == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *lo = (uintptr_t)a;
        *hi = *lo + 1;
        return 0;
    }
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError,
                     "expected an address (int) or an object with the buffer protocol, "
                     "not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_buffer v;
    /* any layout: only where the bytes are matters */
    if (PyObject_GetBuffer(o, &v, PyBUF_FULL_RO) < 0)
        return -1;
    *lo = (uintptr_t)v.buf;
    *hi = *lo + (uintptr_t)(v.len > 0 ? v.len : 1);
    PyBuffer_Release(&v);
    return 0;
}
