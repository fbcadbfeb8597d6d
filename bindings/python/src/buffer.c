/* buffer.c - fmem.Buffer: one pool allocation, exported through the buffer
 * protocol (writable, contiguous bytes) and indexable like mmap.
 *
 * A buffer is freed by free()/close(), by its with block, by closing its
 * pool, or when it is garbage. While views of it exist (exports) it cannot
 * be freed; a freed buffer raises fmem.ClosedError instead of touching the
 * memory. Copies of 1 MiB and more run without the GIL and count as an
 * export meanwhile, so no thread can free the block under them. */
#include "fmempy.h"

#include <stdio.h>
#include <string.h>

#define NOGIL_COPY ((size_t)1 << 20)

PyObject *fp_buffer_new(FpPool *p, const fmem_handle *h, void *data, Py_ssize_t size)
{
    FpBuffer *b = PyObject_New(FpBuffer, &FpBuffer_Type);
    if (!b) {
        fmem_free(p->pool, h);
        return NULL;
    }
    b->pool = (FpPool *)Py_NewRef(p);
    b->handle = *h;
    b->data = data;
    b->size = size;
    b->live = 1;
    b->exports = 0;
    b->weakrefs = NULL;
    b->prev = NULL;
    b->next = p->buffers;
    if (p->buffers)
        p->buffers->prev = b;
    p->buffers = b;
    p->life.dependents++;
    return (PyObject *)b;
}

int fp_buffer_release(FpBuffer *b)
{
    FpPool *p = b->pool;
    fmem_handle h = b->handle;
    b->live = 0;
    b->data = NULL;
    if (b->prev)
        b->prev->next = b->next;
    else
        p->buffers = b->next;
    if (b->next)
        b->next->prev = b->prev;
    b->prev = b->next = NULL;
    /* this buffer still counts as a dependent: the C pool stays open */
    fmem_pool *c = p->pool;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_free(c, &h);
    Py_END_ALLOW_THREADS
    fp_pool_unhold(p);
    return rc;
}

static int check_live(FpBuffer *b)
{
    if (!b->live) {
        fp_raisef(FpExc_Closed, "the buffer was freed");
        return -1;
    }
    return 0;
}

/* Copy between the block (at off) and local memory, through the mapping
 * or, when the transport cannot map, with fmem_read/fmem_write. */
static int block_copy(FpBuffer *b, size_t off, void *local, size_t n, int to_block)
{
    if (n == 0)
        return 0;
    int rc = 0;
    if (b->data && n < NOGIL_COPY) {
        if (to_block)
            memmove(b->data + off, local, n);
        else
            memmove(local, b->data + off, n);
        return 0;
    }
    b->exports++; /* pin */
    fmem_pool *c = b->pool->pool;
    char *data = b->data;
    fmem_handle h = b->handle;
    Py_BEGIN_ALLOW_THREADS
    if (data) {
        if (to_block)
            memmove(data + off, local, n);
        else
            memmove(local, data + off, n);
    } else if (to_block)
        rc = fmem_write(c, &h, off, local, n);
    else
        rc = fmem_read(c, &h, off, local, n);
    Py_END_ALLOW_THREADS
    b->exports--;
    if (rc) {
        fp_raise(rc, to_block ? "write" : "read");
        return -1;
    }
    return 0;
}

static void buffer_dealloc(FpBuffer *b)
{
    if (b->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)b);
    if (b->live)
        fp_buffer_release(b);
    Py_DECREF(b->pool);
    PyObject_Free(b);
}

PyDoc_STRVAR(free_doc,
"free($self, /)\n--\n\n"
"Give the block back to the pool. Raises BufferInUseError while views\n"
"(memoryview, numpy arrays, ...) of it are alive, DoubleFreeError when\n"
"it is already free.");

static PyObject *buffer_free(FpBuffer *b, PyObject *unused)
{
    (void)unused;
    if (!b->live)
        return fp_raisef(FpExc_DoubleFree, "the buffer is already free");
    if (b->exports)
        return fp_raisef(FpExc_InUse,
                         "cannot free the buffer while views of it are alive (%zd)", b->exports);
    int rc = fp_buffer_release(b);
    if (rc)
        return fp_raise(rc, "free");
    Py_RETURN_NONE;
}

PyDoc_STRVAR(close_doc,
"close($self, /)\n--\n\n"
"Like free(), but does nothing when the buffer is already free.");

static PyObject *buffer_close(FpBuffer *b, PyObject *unused)
{
    if (!b->live)
        Py_RETURN_NONE;
    return buffer_free(b, unused);
}

static PyObject *buffer_enter(FpBuffer *b, PyObject *unused)
{
    (void)unused;
    if (check_live(b) < 0)
        return NULL;
    return Py_NewRef(b);
}

static PyObject *buffer_exit(FpBuffer *b, PyObject *args)
{
    (void)args;
    return buffer_close(b, NULL);
}

PyDoc_STRVAR(read_doc,
"read($self, /, offset=0, size=-1)\n--\n\n"
"Copy size bytes from offset (size -1: up to the end) into a new bytes\n"
"object. Works on every transport, also where the buffer cannot be\n"
"mapped.");

static int span_args(FpBuffer *b, Py_ssize_t off, Py_ssize_t *n)
{
    if (off < 0 || off > b->size) {
        fp_raisef(PyExc_IndexError, "offset %zd outside the buffer (%zd bytes)", off,
                  b->size);
        return -1;
    }
    if (*n < 0)
        *n = b->size - off;
    if (*n > b->size - off) {
        fp_raisef(PyExc_IndexError, "%zd bytes at offset %zd overrun the buffer (%zd bytes)",
                  *n, off, b->size);
        return -1;
    }
    return 0;
}

static PyObject *buffer_read(FpBuffer *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"offset", "size", NULL};
    Py_ssize_t off = 0, n = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|nn:read", kwlist, &off, &n))
        return NULL;
    if (check_live(b) < 0 || span_args(b, off, &n) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out && block_copy(b, (size_t)off, PyBytes_AS_STRING(out), (size_t)n, 0) < 0)
        Py_CLEAR(out);
    return out;
}

PyDoc_STRVAR(write_doc,
"write($self, /, data, offset=0)\n--\n\n"
"Copy the bytes of data (any contiguous buffer) into the buffer at\n"
"offset; returns the number of bytes written. IndexError if they do not\n"
"fit.");

static PyObject *buffer_write(FpBuffer *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data", "offset", NULL};
    Py_buffer src;
    Py_ssize_t off = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|n:write", kwlist, &src, &off))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = src.len;
    if (check_live(b) == 0 && span_args(b, off, &n) == 0 &&
        block_copy(b, (size_t)off, src.buf, (size_t)n, 1) == 0)
        res = PyLong_FromSsize_t(n);
    PyBuffer_Release(&src);
    return res;
}

/* ---- buffer protocol ------------------------------------------------------ */

static int buffer_getbuffer(FpBuffer *b, Py_buffer *view, int flags)
{
    if (check_live(b) < 0) {
        view->obj = NULL;
        return -1;
    }
    if (!b->data) {
        view->obj = NULL;
        fp_raisef(FpExc_NotSupported,
                  "this pool's transport cannot map memory: use read() and write()");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->size, 0, flags) < 0)
        return -1;
    b->exports++;
    return 0;
}

static void buffer_releasebuffer(FpBuffer *b, Py_buffer *view)
{
    (void)view;
    b->exports--;
}

static PyBufferProcs buffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)buffer_getbuffer,
    .bf_releasebuffer = (releasebufferproc)buffer_releasebuffer,
};

/* ---- len(), indexing and slicing (like mmap: slices are bytes) ----------- */

static Py_ssize_t buffer_length(FpBuffer *b)
{
    return check_live(b) < 0 ? -1 : b->size;
}

static PyObject *buffer_subscript(FpBuffer *b, PyObject *key)
{
    if (check_live(b) < 0)
        return NULL;
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return NULL;
        if (i < 0)
            i += b->size;
        if (i < 0 || i >= b->size)
            return fp_raisef(PyExc_IndexError, "buffer index out of range");
        unsigned char c;
        if (block_copy(b, (size_t)i, &c, 1, 0) < 0)
            return NULL;
        return PyLong_FromLong(c);
    }
    if (!PySlice_Check(key))
        return PyErr_Format(PyExc_TypeError,
                            "buffer indices must be integers or slices, not %.100s",
                            Py_TYPE(key)->tp_name);
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
        return NULL;
    Py_ssize_t n = PySlice_AdjustIndices(b->size, &start, &stop, step);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (!out)
        return NULL;
    char *dst = PyBytes_AS_STRING(out);
    if (step == 1) {
        if (block_copy(b, (size_t)start, dst, (size_t)n, 0) < 0)
            Py_CLEAR(out);
        return out;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (block_copy(b, (size_t)(start + k * step), dst + k, 1, 0) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    return out;
}

static int buffer_ass_subscript(FpBuffer *b, PyObject *key, PyObject *value)
{
    if (check_live(b) < 0)
        return -1;
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "buffer bytes cannot be deleted");
        return -1;
    }
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred())
            return -1;
        if (i < 0)
            i += b->size;
        if (i < 0 || i >= b->size) {
            PyErr_SetString(PyExc_IndexError, "buffer index out of range");
            return -1;
        }
        long v = PyLong_Check(value) ? PyLong_AsLong(value) : -2;
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0 || v > 255) {
            PyErr_SetString(v == -2 ? PyExc_TypeError : PyExc_ValueError,
                            "a buffer item must be an int in range(0, 256)");
            return -1;
        }
        unsigned char c = (unsigned char)v;
        return block_copy(b, (size_t)i, &c, 1, 1);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "buffer indices must be integers or slices, not %.100s",
                     Py_TYPE(key)->tp_name);
        return -1;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0)
        return -1;
    Py_ssize_t n = PySlice_AdjustIndices(b->size, &start, &stop, step);
    Py_buffer src;
    if (PyObject_GetBuffer(value, &src, PyBUF_SIMPLE) < 0)
        return -1;
    int rc = -1;
    if (src.len != n)
        PyErr_Format(PyExc_IndexError,
                     "buffer slice assignment is wrong size: %zd bytes for %zd", src.len, n);
    else if (step == 1)
        rc = block_copy(b, (size_t)start, src.buf, (size_t)n, 1);
    else {
        rc = 0;
        for (Py_ssize_t k = 0; k < n && rc == 0; k++)
            rc = block_copy(b, (size_t)(start + k * step), (char *)src.buf + k, 1, 1);
    }
    PyBuffer_Release(&src);
    return rc;
}

static PyMappingMethods buffer_as_mapping = {
    .mp_length = (lenfunc)buffer_length,
    .mp_subscript = (binaryfunc)buffer_subscript,
    .mp_ass_subscript = (objobjargproc)buffer_ass_subscript,
};

static PySequenceMethods buffer_as_sequence = {
    .sq_length = (lenfunc)buffer_length,
};

/* ---- attributes ----------------------------------------------------------- */

static PyObject *buffer_repr(FpBuffer *b)
{
    if (!b->live)
        return PyUnicode_FromString("<fmem.Buffer freed>");
    char desc[160];
    snprintf(desc, sizeof desc,
             "<fmem.Buffer %zd bytes (block of %llu at node %u offset 0x%llx), %zd views>",
             b->size, (unsigned long long)b->handle.length, (unsigned)b->handle.node,
             (unsigned long long)b->handle.addr, b->exports);
    return PyUnicode_FromString(desc);
}

static PyObject *get_size(FpBuffer *b, void *c)
{
    (void)c;
    return check_live(b) < 0 ? NULL : PyLong_FromSsize_t(b->size);
}

static PyObject *get_capacity(FpBuffer *b, void *c)
{
    (void)c;
    return check_live(b) < 0 ? NULL : PyLong_FromUnsignedLongLong(b->handle.length);
}

static PyObject *get_closed(FpBuffer *b, void *c)
{
    (void)c;
    return PyBool_FromLong(!b->live);
}

static PyObject *get_exports(FpBuffer *b, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(b->exports);
}

static PyObject *get_pool(FpBuffer *b, void *c)
{
    (void)c;
    return Py_NewRef(b->pool);
}

static PyObject *get_address(FpBuffer *b, void *c)
{
    (void)c;
    if (check_live(b) < 0)
        return NULL;
    if (!b->data)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(b->data);
}

static PyObject *get_handle(FpBuffer *b, void *c)
{
    (void)c;
    if (check_live(b) < 0)
        return NULL;
    return Py_BuildValue("{s:I,s:K,s:K,s:k}", "node", (unsigned)b->handle.node, "addr",
                         (unsigned long long)b->handle.addr, "length",
                         (unsigned long long)b->handle.length, "rkey",
                         (unsigned long)b->handle.rkey);
}

static PyGetSetDef buffer_getset[] = {
    {"size", (getter)get_size, NULL, "Bytes asked for: len(buffer).", NULL},
    {"capacity", (getter)get_capacity, NULL,
     "Bytes of the block the pool handed out (4 KiB x 2^k).", NULL},
    {"closed", (getter)get_closed, NULL, "True once the buffer is free.", NULL},
    {"exports", (getter)get_exports, NULL, "Views of the buffer alive now.", NULL},
    {"pool", (getter)get_pool, NULL, "The pool the block came from.", NULL},
    {"address", (getter)get_address, NULL,
     "Address of the first byte in this process, or None if the transport cannot map.",
     NULL},
    {"handle", (getter)get_handle, NULL,
     "The block's handle as a dict: node, addr, length, rkey.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef buffer_methods[] = {
    {"free", (PyCFunction)buffer_free, METH_NOARGS, free_doc},
    {"close", (PyCFunction)buffer_close, METH_NOARGS, close_doc},
    {"read", (PyCFunction)(void (*)(void))buffer_read, METH_VARARGS | METH_KEYWORDS, read_doc},
    {"write", (PyCFunction)(void (*)(void))buffer_write, METH_VARARGS | METH_KEYWORDS,
     write_doc},
    {"__enter__", (PyCFunction)buffer_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nReturn the buffer itself."},
    {"__exit__", (PyCFunction)buffer_exit, METH_VARARGS,
     "__exit__($self, t, v, tb, /)\n--\n\nFree the buffer (see close())."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(buffer_doc,
"A block of pool memory, made by Pool.alloc().\n\n"
"Supports the buffer protocol (writable, C-contiguous bytes), so\n"
"memoryview(buf), numpy.frombuffer(buf, ...) and bytes(buf) use the\n"
"pool memory without intermediate copies; len(); buf[i] (int) and\n"
"buf[a:b] (bytes) and assignment to both; read()/write(); free() or\n"
"close(), and the with statement, which frees it at the end.");

PyTypeObject FpBuffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem.Buffer",
    .tp_basicsize = sizeof(FpBuffer),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_repr = (reprfunc)buffer_repr,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_as_mapping = &buffer_as_mapping,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = buffer_doc,
    .tp_weaklistoffset = offsetof(FpBuffer, weakrefs),
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
};
