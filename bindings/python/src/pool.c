/* pool.c - fmem.Pool (fmem.open) and fmem.Client (fmem.connect): an opened
 * pool and the buffers allocated from it. */
#include "fmempy.h"

#include <errno.h>

#include <string.h>

FpPool *fp_pool_open(PyTypeObject *type, const char *uri)
{
    FpPool *p = (FpPool *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    p->uri = uri ? PyUnicode_FromString(uri) : Py_NewRef(Py_None);
    if (!p->uri) {
        Py_DECREF(p);
        return NULL;
    }
    fmem_pool *c = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0; /* fp_raise reports the errno of a failed system call */
    rc = fmem_open(uri, &c);
    Py_END_ALLOW_THREADS
    if (rc) {
        fp_raise(rc, uri ? uri : "default pool"); /* before free() can touch errno */
        Py_DECREF(p);
        return NULL;
    }
    p->pool = c;
    return p;
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"uri", NULL};
    const char *uri = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:Pool", kwlist, &uri))
        return NULL;
    return (PyObject *)fp_pool_open(type, uri);
}

/* connect() speaks to an allocation service only: unix:/PATH, fmem://... */
static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"uri", NULL};
    const char *uri = "fmem://";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|s:connect", kwlist, &uri))
        return NULL;
    if (strncmp(uri, "unix:", 5) != 0 && strncmp(uri, "fmem:", 5) != 0)
        return fp_raisef(PyExc_ValueError,
                         "connect() wants a service URI (unix:/PATH or fmem://...), "
                         "not %s; fmem.open() opens pools",
                         uri);
    return (PyObject *)fp_pool_open(type, uri);
}

static void pool_dealloc(FpPool *p)
{
    /* buffers, regions and heaps hold references: nothing depends on it */
    if (p->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)p);
    p->life.closed = 1;
    fp_pool_maybe_release(p);
    Py_XDECREF(p->uri);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

PyDoc_STRVAR(alloc_doc,
"alloc($self, nbytes, /)\n--\n\n"
"Allocate a block of at least nbytes bytes (the pool rounds it up to\n"
"4 KiB x 2^k; Buffer.capacity tells how much) and return it as a Buffer\n"
"of length nbytes. The bytes are not cleared. Raises SizeError for sizes\n"
"below 1 or beyond the pool, OutOfMemoryError when the pool is full,\n"
"ClosedError when the pool is closed.");

static PyObject *pool_alloc(FpPool *self, PyObject *arg)
{
    Py_ssize_t n = fp_size_arg(arg, "nbytes", 1);
    if (n < 0)
        return NULL;
    if (fmem_size_round((size_t)n) == 0)
        return fp_raisef(FpExc_Size, "nbytes is too large: %zd bytes", n);
    fmem_pool *c = fp_pool_enter(self);
    if (!c)
        return NULL;
    fmem_handle h;
    void *data = NULL;
    int rc, mrc = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_alloc(c, (size_t)n, &h);
    if (rc == 0) {
        mrc = fmem_map(c, &h, &data);
        if (mrc && mrc != FMEM_ENOTSUP)
            fmem_free(c, &h);
    }
    Py_END_ALLOW_THREADS
    PyObject *res;
    if (rc)
        res = fp_raise(rc, "alloc");
    else if (mrc && mrc != FMEM_ENOTSUP)
        res = fp_raise(mrc, "map");
    else if (self->life.closed) { /* closed while we allocated */
        Py_BEGIN_ALLOW_THREADS
        fmem_free(c, &h);
        Py_END_ALLOW_THREADS
        res = fp_raisef(FpExc_Closed, "the pool was closed during alloc()");
    } else
        res = fp_buffer_new(self, &h, mrc ? NULL : data, n);
    fp_pool_leave(self);
    return res;
}

PyDoc_STRVAR(close_doc,
"close($self, /)\n--\n\n"
"Close the pool: it allocates no more. Buffers without live views are\n"
"freed now (using them raises ClosedError); buffers still exported,\n"
"regions and numpy heaps made from the pool keep it open until they go.\n"
"Closing twice does nothing.");

static PyObject *pool_close(FpPool *self, PyObject *unused)
{
    (void)unused;
    if (self->life.closed)
        Py_RETURN_NONE;
    self->life.closed = 1;
    for (;;) { /* the list changes while the GIL is released: rescan */
        FpBuffer *b = self->buffers;
        while (b && b->exports)
            b = b->next;
        if (!b)
            break;
        Py_INCREF(b);
        fp_buffer_release(b);
        Py_DECREF(b);
    }
    fp_pool_maybe_release(self);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(stats_doc,
"stats($self, /)\n--\n\n"
"Pool statistics: capacity_bytes, allocated_bytes (all users of the\n"
"pool), metadata_bytes, nodes, user_id, this process's allocs, frees,\n"
"failed_allocs, cas_ops, cas_failures, reads, writes, round_trips,\n"
"log_flushes, max_retries, size_class_allocs (list: allocations of\n"
"4 KiB << k), and live_buffers (Buffers of this object not yet freed).");

static PyObject *pool_stats(FpPool *self, PyObject *unused)
{
    (void)unused;
    fmem_pool *c = fp_pool_enter(self);
    if (!c)
        return NULL;
    fmem_stats_t st;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_stats(c, &st);
    Py_END_ALLOW_THREADS
    fp_pool_leave(self);
    if (rc)
        return fp_raise(rc, "stats");
    PyObject *d = fp_pool_stats_dict(&st);
    Py_ssize_t live = 0;
    for (FpBuffer *b = self->buffers; b; b = b->next)
        live++;
    PyObject *v = d ? PyLong_FromSsize_t(live) : NULL;
    if (!v || PyDict_SetItemString(d, "live_buffers", v) < 0)
        Py_CLEAR(d);
    Py_XDECREF(v);
    return d;
}

PyDoc_STRVAR(node_stats_doc,
"node_stats($self, node, /)\n--\n\n"
"What memory node `node` (0 .. stats()['nodes'] - 1) of an embedded pool\n"
"holds and how its data moved: kind ('mem', 'shm', 'file', 'ssd', 'zmem',\n"
"...), detail, capacity_bytes, held_bytes, stored_bytes,\n"
"compression_ratio, reads, writes, bytes_read, bytes_written, read_ns,\n"
"write_ns, read_mb_s, write_mb_s, read_lat_us, write_lat_us, errors,\n"
"last_error. The I/O figures are this process's, counted by the ssd: and\n"
"zmem: backends. fmem.Error for a node out of range or a service pool.");

static int set_u64(PyObject *d, const char *k, unsigned long long v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int set_f(PyObject *d, const char *k, double v)
{
    PyObject *o = PyFloat_FromDouble(v);
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static int set_s(PyObject *d, const char *k, const char *v, size_t max)
{
    PyObject *o = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strnlen(v, max), "replace");
    int rc = o ? PyDict_SetItemString(d, k, o) : -1;
    Py_XDECREF(o);
    return rc;
}

static PyObject *pool_node_stats(FpPool *self, PyObject *arg)
{
    unsigned long node = PyLong_AsUnsignedLong(arg);
    if (node == (unsigned long)-1 && PyErr_Occurred())
        return NULL;
    if (node > UINT32_MAX)
        return fp_raise(FMEM_EINVAL, "node_stats");
    fmem_pool *c = fp_pool_enter(self);
    if (!c)
        return NULL;
    fmem_node_stats_t st;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_node_stats(c, (unsigned)node, &st);
    Py_END_ALLOW_THREADS
    fp_pool_leave(self);
    if (rc)
        return fp_raise(rc, "node_stats");
    PyObject *d = PyDict_New();
    if (!d || set_s(d, "kind", st.kind, sizeof st.kind) < 0 ||
        set_s(d, "detail", st.detail, sizeof st.detail) < 0 ||
        set_u64(d, "capacity_bytes", st.capacity_bytes) < 0 ||
        set_u64(d, "held_bytes", st.held_bytes) < 0 ||
        set_u64(d, "stored_bytes", st.stored_bytes) < 0 ||
        set_f(d, "compression_ratio", st.compression_ratio) < 0 ||
        set_u64(d, "reads", st.reads) < 0 || set_u64(d, "writes", st.writes) < 0 ||
        set_u64(d, "bytes_read", st.bytes_read) < 0 ||
        set_u64(d, "bytes_written", st.bytes_written) < 0 ||
        set_u64(d, "read_ns", st.read_ns) < 0 || set_u64(d, "write_ns", st.write_ns) < 0 ||
        set_f(d, "read_mb_s", st.read_mb_s) < 0 || set_f(d, "write_mb_s", st.write_mb_s) < 0 ||
        set_f(d, "read_lat_us", st.read_lat_us) < 0 ||
        set_f(d, "write_lat_us", st.write_lat_us) < 0 || set_u64(d, "errors", st.errors) < 0 ||
        set_s(d, "last_error", st.last_error, sizeof st.last_error) < 0)
        Py_CLEAR(d);
    return d;
}

PyDoc_STRVAR(owns_doc,
"owns($self, obj, /)\n--\n\n"
"True when obj's memory is in this pool: obj is an address (int) or an\n"
"object with the buffer protocol (numpy array, memoryview, Buffer, ...),\n"
"and its first byte is in one of this pool's live Buffers or is an\n"
"object of the heap that fmem.numpy_arrays(pool) allocates from.");

static PyObject *pool_owns(FpPool *self, PyObject *obj)
{
    uintptr_t lo, hi;
    if (fp_range_of(obj, &lo, &hi) < 0)
        return NULL;
    for (FpBuffer *b = self->buffers; b; b = b->next)
        if (b->data && lo >= (uintptr_t)b->data && lo < (uintptr_t)b->data + b->handle.length)
            Py_RETURN_TRUE;
    if (self->binding && fmem_hooks_owns(self->binding->hooks, (void *)lo))
        Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyObject *pool_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (((FpPool *)self)->life.closed)
        return fp_raisef(FpExc_Closed, "the pool is closed");
    return Py_NewRef(self);
}

static PyObject *pool_exit(FpPool *self, PyObject *args)
{
    (void)args;
    return pool_close(self, NULL);
}

static PyObject *pool_repr(FpPool *p)
{
    Py_ssize_t live = 0;
    for (FpBuffer *b = p->buffers; b; b = b->next)
        live++;
    const char *state = !p->life.closed ? "open" : p->pool ? "closing" : "closed";
    return PyUnicode_FromFormat("<%s %R %s, %zd live buffers>", Py_TYPE(p)->tp_name, p->uri,
                                state, live);
}

static PyObject *pool_get_closed(FpPool *p, void *c)
{
    (void)c;
    return PyBool_FromLong(p->life.closed);
}

static PyObject *pool_get_uri(FpPool *p, void *c)
{
    (void)c;
    return Py_NewRef(p->uri);
}

static PyMethodDef pool_methods[] = {
    {"alloc", (PyCFunction)pool_alloc, METH_O, alloc_doc},
    {"close", (PyCFunction)pool_close, METH_NOARGS, close_doc},
    {"stats", (PyCFunction)pool_stats, METH_NOARGS, stats_doc},
    {"node_stats", (PyCFunction)pool_node_stats, METH_O, node_stats_doc},
    {"owns", (PyCFunction)pool_owns, METH_O, owns_doc},
    {"__enter__", (PyCFunction)pool_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nReturn the pool itself."},
    {"__exit__", (PyCFunction)pool_exit, METH_VARARGS,
     "__exit__($self, t, v, tb, /)\n--\n\nClose the pool (see close())."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
    {"closed", (getter)pool_get_closed, NULL, "True once close() was called.", NULL},
    {"uri", (getter)pool_get_uri, NULL, "The URI the pool was opened with (None: default).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(pool_doc,
"Pool(uri=None)\n--\n\n"
"An opened fmem pool (fmem.open() is the same call). uri None means\n"
"$FMEM_URI, else an in-process pool of 1 GiB ('mem:'). Other URIs:\n"
"'mem:?size=256M', 'shm:/NAME?size=1G', 'file:/PATH?size=1G', and the\n"
"service URIs of fmem.connect(). A context manager: the with block\n"
"closes it. Thread-safe; blocking calls release the GIL.");

PyTypeObject FpPool_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem.Pool",
    .tp_basicsize = sizeof(FpPool),
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_repr = (reprfunc)pool_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = pool_doc,
    .tp_weaklistoffset = offsetof(FpPool, weakrefs),
    .tp_methods = pool_methods,
    .tp_getset = pool_getset,
    .tp_new = pool_new,
};

PyDoc_STRVAR(client_doc,
"Client(uri='fmem://')\n--\n\n"
"A pool reached through an allocation service (fmemd), as fmem.connect()\n"
"returns: 'unix:/PATH' or 'fmem:///PATH' name its socket, 'fmem://' the\n"
"default /run/fmem/fmemd.sock. Everything else is as for Pool.");

PyTypeObject FpClient_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem.Client",
    .tp_basicsize = sizeof(FpPool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = client_doc,
    .tp_base = &FpPool_Type,
    .tp_new = client_new,
};
