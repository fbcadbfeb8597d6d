/* module.c - fmem._fmem: module functions, types and constants. */
#include "fmempy.h"

#include <errno.h>

PyDoc_STRVAR(open_doc,
"open($module, /, uri=None)\n--\n\n"
"Open a pool: None means $FMEM_URI, else an in-process 1 GiB pool\n"
"('mem:'); see Pool for the URIs. The GIL is released while opening.");

static PyObject *mod_open(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    return PyObject_Call((PyObject *)&FpPool_Type, args, kw);
}

PyDoc_STRVAR(connect_doc,
"connect($module, /, uri='fmem://')\n--\n\n"
"Connect to an allocation service (fmemd): 'unix:/PATH', 'fmem:///PATH',\n"
"or 'fmem://' for /run/fmem/fmemd.sock. ValueError for other URIs,\n"
"TransportError when the service cannot be reached.");

static PyObject *mod_connect(PyObject *m, PyObject *args, PyObject *kw)
{
    (void)m;
    return PyObject_Call((PyObject *)&FpClient_Type, args, kw);
}

PyDoc_STRVAR(unlink_doc,
"unlink($module, uri, /)\n--\n\n"
"Remove the files of the named pool(s) in uri ('shm:/NAME', 'file:/PATH').\n"
"Processes that have the pool open keep using it until they close it.");

static PyObject *mod_unlink(PyObject *m, PyObject *arg)
{
    (void)m;
    const char *uri = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!uri)
        return PyErr_Occurred() ? NULL
                                : PyErr_Format(PyExc_TypeError, "uri must be a str, not %.100s",
                                               Py_TYPE(arg)->tp_name);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = fmem_unlink(uri);
    Py_END_ALLOW_THREADS
    return rc ? fp_raise(rc, uri) : Py_NewRef(Py_None);
}

PyDoc_STRVAR(default_pool_doc,
"default_pool($module, /)\n--\n\n"
"The pool Region(), numpy_arrays() and others use when given none: one\n"
"fmem.open() pool per process, opened on first use (again after it was\n"
"closed).");

static PyObject *mod_default_pool(PyObject *m, PyObject *unused)
{
    (void)m, (void)unused;
    return (PyObject *)fp_default_pool();
}

PyDoc_STRVAR(size_round_doc,
"size_round($module, nbytes, /)\n--\n\n"
"The block size Pool.alloc(nbytes) hands out (4 KiB x 2^k), or 0 when\n"
"no pool can hold that much.");

static PyObject *mod_size_round(PyObject *m, PyObject *arg)
{
    (void)m;
    Py_ssize_t n = fp_size_arg(arg, "nbytes", 0);
    return n < 0 ? NULL : PyLong_FromSize_t(fmem_size_round((size_t)n));
}

PyDoc_STRVAR(strerror_doc,
"strerror($module, code, /)\n--\n\n"
"The message of a libfmem error code (Error.code).");

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
    (void)m;
    int overflow;
    long code = PyLong_AsLongAndOverflow(arg, &overflow);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(fmem_strerror(overflow ? -1000 : (int)code));
}

static PyMethodDef module_methods[] = {
    {"open", (PyCFunction)(void (*)(void))mod_open, METH_VARARGS | METH_KEYWORDS, open_doc},
    {"connect", (PyCFunction)(void (*)(void))mod_connect, METH_VARARGS | METH_KEYWORDS,
     connect_doc},
    {"unlink", mod_unlink, METH_O, unlink_doc},
    {"default_pool", mod_default_pool, METH_NOARGS, default_pool_doc},
    {"size_round", mod_size_round, METH_O, size_round_doc},
    {"strerror", mod_strerror, METH_O, strerror_doc},
    {"install_arena_allocator", (PyCFunction)(void (*)(void))fp_install_arena,
     METH_VARARGS | METH_KEYWORDS, fp_install_arena_doc},
    {"arena_allocator_stats", fp_arena_stats, METH_NOARGS, fp_arena_stats_doc},
    {"compact", (PyCFunction)(void (*)(void))fp_compact, METH_VARARGS | METH_KEYWORDS,
     fp_compact_doc},
    {"release_empty_pools", fp_release_pools, METH_NOARGS, fp_release_pools_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(module_doc,
"fmem: remote-memory pools, far-memory regions and allocator hooks.\n\n"
"open()/connect() give a Pool/Client; Pool.alloc() gives Buffers that\n"
"export pool memory through the buffer protocol; Region is a paged\n"
"far-memory range; numpy_arrays() puts numpy array data in far memory;\n"
"install_arena_allocator() does the same for Python's small objects.\n"
"Errors derive from fmem.Error.");

static struct PyModuleDef fmem_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "fmem._fmem",
    .m_doc = module_doc,
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *m, const char *name, PyTypeObject *t)
{
    if (PyType_Ready(t) < 0)
        return -1;
    return name ? PyModule_AddObjectRef(m, name, (PyObject *)t) : 0;
}

PyMODINIT_FUNC PyInit__fmem(void)
{
    PyObject *m = PyModule_Create(&fmem_module);
    if (!m)
        return NULL;
    if (fp_errors_init(m) < 0 || add_type(m, "Pool", &FpPool_Type) < 0 ||
        add_type(m, "Client", &FpClient_Type) < 0 || add_type(m, "Buffer", &FpBuffer_Type) < 0 ||
        add_type(m, "Region", &FpRegion_Type) < 0 || add_type(m, NULL, &FpBinding_Type) < 0 ||
        add_type(m, "numpy_arrays", &FpNumpyArrays_Type) < 0 ||
        PyModule_AddIntConstant(m, "CHUNK_SIZE", (long)FMEM_CHUNK_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "SPAN_SIZE", (long)FMEM_SPAN_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "SECTION_SIZE", (long)FMEM_SECTION_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_POOL_SIZE", (long)FMEM_DEFAULT_SIZE) < 0 ||
        PyModule_AddStringConstant(m, "LIBRARY_VERSION",
                                   Py_STRINGIFY(FMEM_VERSION_MAJOR) "." Py_STRINGIFY(
                                       FMEM_VERSION_MINOR)) < 0 ||
        PyModule_AddIntConstant(m, "HAVE_NUMPY",
#ifdef FMEM_HAVE_NUMPY
                                1
#else
                                0
#endif
                                ) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
