/* region.c - fmem.Region: a far-memory region (userfaultfd paging with a
 * bounded local cache) whose address range is exported through the buffer
 * protocol, or handed to a heap by numpy_arrays()/install_arena_allocator().
 * The two uses exclude each other: a heap owns the region's space. */
#include "fmempy.h"

#include <errno.h>

#define DEFAULT_CACHE ((Py_ssize_t)64 << 20)

/* cache=: None (64 MiB or the size if smaller), bytes (int), or a fraction
 * of the size (float in (0, 1]) */
static int cache_arg(PyObject *o, Py_ssize_t size, size_t *out)
{
    if (!o || o == Py_None) {
        *out = (size_t)(size < DEFAULT_CACHE ? size : DEFAULT_CACHE);
        return 0;
    }
    if (PyFloat_Check(o)) {
        double f = PyFloat_AsDouble(o);
        if (!(f > 0.0 && f <= 1.0)) {
            fp_raisef(FpExc_Size, "cache as a fraction must be in (0, 1], not %R", o);
            return -1;
        }
        *out = (size_t)((double)size * f);
        return 0;
    }
    Py_ssize_t n = fp_size_arg(o, "cache", 1);
    if (n < 0)
        return -1;
    *out = (size_t)n;
    return 0;
}

static PyObject *region_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"size", "cache", "pool", "fetch_unit", "prefetch", NULL};
    PyObject *size_o, *cache_o = NULL, *pool_o = Py_None, *prefetch_o = Py_None;
    Py_ssize_t unit = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O$OnO:Region", kwlist, &size_o, &cache_o,
                                     &pool_o, &unit, &prefetch_o))
        return NULL;
    Py_ssize_t size = fp_size_arg(size_o, "size", 1);
    if (size < 0)
        return NULL;
    fmem_region_config cfg = {.size = (size_t)size, .fetch_unit = (size_t)unit};
    if (cache_arg(cache_o, size, &cfg.cache_bytes) < 0)
        return NULL;
    if (unit < 0 || (unit && (unit < (Py_ssize_t)FMEM_REGION_MIN_UNIT ||
                              unit > (Py_ssize_t)FMEM_REGION_MAX_UNIT || (unit & (unit - 1)))))
        return fp_raisef(FpExc_Size, "fetch_unit must be 0 or a power of two in [4096, %zu]",
                         FMEM_REGION_MAX_UNIT);
    if (prefetch_o != Py_None) {
        long pf = PyLong_AsLong(prefetch_o);
        if (pf == -1 && PyErr_Occurred())
            return NULL;
        if (pf < 0 || pf >= (long)FMEM_REGION_NO_PREFETCH)
            return fp_raisef(PyExc_ValueError, "prefetch must be a unit count >= 0");
        cfg.prefetch = pf ? (unsigned)pf : FMEM_REGION_NO_PREFETCH;
    }
    FpPool *pool;
    if (pool_o == Py_None) {
        if (!(pool = fp_default_pool()))
            return NULL;
    } else if (FpPool_Check(pool_o))
        pool = (FpPool *)Py_NewRef(pool_o);
    else
        return PyErr_Format(PyExc_TypeError, "pool must be an fmem.Pool, not %.100s",
                            Py_TYPE(pool_o)->tp_name);

    FpRegion *r = (FpRegion *)type->tp_alloc(type, 0);
    fmem_pool *c = r ? fp_pool_hold(pool) : NULL;
    if (!c) {
        Py_XDECREF(r);
        Py_DECREF(pool);
        return NULL;
    }
    r->pool = pool;
    fmem_region *reg = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = fmem_region_create(c, &cfg, &reg);
    Py_END_ALLOW_THREADS
    if (rc) {
        fp_raise(rc, "Region");
        r->pool = NULL;
        Py_DECREF(r);
        fp_pool_unhold(pool);
        Py_DECREF(pool);
        return NULL;
    }
    r->region = reg;
    r->base = fmem_region_base(reg);
    r->size = (Py_ssize_t)fmem_region_size(reg);
    return (PyObject *)r;
}

static void region_dealloc(FpRegion *r)
{
    if (r->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)r);
    r->life.closed = 1;
    if (r->region)
        fp_region_maybe_release(r); /* no views or heap: they hold references */
    Py_XDECREF(r->pool);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static int check_open(FpRegion *r)
{
    if (r->life.closed || !r->region) {
        fp_raisef(FpExc_Closed, "the region is closed");
        return -1;
    }
    return 0;
}

static int check_no_heap(FpRegion *r)
{
    if (r->binding) {
        fp_raisef(FpExc_InUse, "a heap owns this region's memory (numpy_arrays or the arena "
                               "allocator)");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(close_doc,
"close($self, /)\n--\n\n"
"Destroy the region: its pool allocations are freed and the memory is\n"
"gone. BufferInUseError while views of it are alive. When numpy arrays\n"
"or arenas still live in it (a heap owns it), the region stops taking\n"
"new work and is destroyed when the last of them goes. Closing twice\n"
"does nothing.");

static PyObject *region_close(FpRegion *r, PyObject *unused)
{
    (void)unused;
    if (r->life.closed)
        Py_RETURN_NONE;
    if (r->exports)
        return fp_raisef(FpExc_InUse,
                         "cannot close the region while views of it are alive (%zd)", r->exports);
    r->life.closed = 1;
    fp_region_maybe_release(r);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(flush_doc,
"flush($self, /)\n--\n\n"
"Write every dirty cached unit back to the pool (the GIL is released).");

static PyObject *region_flush(FpRegion *r, PyObject *unused)
{
    (void)unused;
    fmem_region *c = fp_region_enter(r);
    if (!c)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_region_flush(c);
    Py_END_ALLOW_THREADS
    fp_region_leave(r);
    return rc ? fp_raise(rc, "flush") : Py_NewRef(Py_None);
}

PyDoc_STRVAR(release_doc,
"release($self, offset, length, /)\n--\n\n"
"The program no longer needs [offset, offset+length): the bytes read as\n"
"zero afterwards and pool space only they used is freed. Both must be\n"
"multiples of 4096 (InvalidArgumentError) and inside the region\n"
"(RangeError). Not allowed while a heap owns the region.");

static PyObject *region_release(FpRegion *r, PyObject *args)
{
    Py_ssize_t off, len;
    if (!PyArg_ParseTuple(args, "nn:release", &off, &len))
        return NULL;
    if (off < 0 || len < 0)
        return fp_raisef(FpExc_Size, "offset and length must not be negative");
    if (check_open(r) < 0 || check_no_heap(r) < 0)
        return NULL;
    fmem_region *c = fp_region_enter(r);
    if (!c)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_region_release(c, (size_t)off, (size_t)len);
    Py_END_ALLOW_THREADS
    fp_region_leave(r);
    return rc ? fp_raise(rc, "release") : Py_NewRef(Py_None);
}

PyDoc_STRVAR(stats_doc,
"stats($self, /)\n--\n\n"
"Paging statistics: faults, missing_faults, wp_faults, hits, fetches,\n"
"prefetches, zero_fills, evictions, writebacks, bytes_fetched,\n"
"bytes_written, remote_bytes (pool bytes held now: the far part),\n"
"remote_peak, cached_bytes (bytes in the local cache now), cache_bytes\n"
"(the budget), releases, alloc_failures; over several memory nodes:\n"
"paths, stripe_width, io_width, prefetch_units and fetch_units (the\n"
"parameters in force; fetch_max: the largest fetch size), fault_rate, seq_pct, write_pct, refault_pct, refault_dist (what\n"
"the placement policy measured), tier_moves (chunks moved between fast\n"
"and slow nodes), ahead_unused (read-ahead units evicted before the\n"
"program reached them), ahead_window (of them, dropped with another\n"
"unit's eviction window), path_stats (a list of dicts per node:\n"
"node, placing, bytes_fetched, bytes_written, ops, busy_ns, bandwidth,\n"
"chunks).");

static PyObject *region_stats(FpRegion *r, PyObject *unused)
{
    (void)unused;
    fmem_region *c = fp_region_enter(r);
    if (!c)
        return NULL;
    fmem_region_stats_t st;
    fmem_region_path_t paths[16];
    int rc, np = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = fmem_region_stats(c, &st);
    if (rc == 0)
        np = fmem_region_paths(c, paths, 16);
    Py_END_ALLOW_THREADS
    fp_region_leave(r);
    if (rc || np < 0)
        return fp_raise(rc ? rc : np, "stats");
    PyObject *d = fp_region_stats_dict(&st);
    if (d && fp_region_paths_put(d, paths, np < 16 ? np : 16) < 0)
        Py_CLEAR(d);
    return d;
}

PyDoc_STRVAR(contains_doc,
"contains($self, obj, /)\n--\n\n"
"True when obj's memory lies inside the region: obj is an address (int)\n"
"or an object with the buffer protocol (numpy array, memoryview, ...).");

static PyObject *region_contains(FpRegion *r, PyObject *obj)
{
    uintptr_t lo, hi;
    if (fp_range_of(obj, &lo, &hi) < 0)
        return NULL;
    uintptr_t base = (uintptr_t)r->base;
    return PyBool_FromLong(r->base && lo >= base && hi <= base + (uintptr_t)r->size);
}

static PyObject *region_enter(FpRegion *r, PyObject *unused)
{
    (void)unused;
    if (check_open(r) < 0)
        return NULL;
    return Py_NewRef(r);
}

static PyObject *region_exit(FpRegion *r, PyObject *args)
{
    (void)args;
    return region_close(r, NULL);
}

/* ---- buffer protocol, len() ----------------------------------------------- */

static int region_getbuffer(FpRegion *r, Py_buffer *view, int flags)
{
    view->obj = NULL;
    if (check_open(r) < 0 || check_no_heap(r) < 0)
        return -1;
    if (PyBuffer_FillInfo(view, (PyObject *)r, r->base, r->size, 0, flags) < 0)
        return -1;
    r->exports++;
    return 0;
}

static void region_releasebuffer(FpRegion *r, Py_buffer *view)
{
    (void)view;
    r->exports--;
}

static PyBufferProcs region_as_buffer = {
    .bf_getbuffer = (getbufferproc)region_getbuffer,
    .bf_releasebuffer = (releasebufferproc)region_releasebuffer,
};

static Py_ssize_t region_length(FpRegion *r)
{
    return check_open(r) < 0 ? -1 : r->size;
}

static PySequenceMethods region_as_sequence = {
    .sq_length = (lenfunc)region_length,
};

/* ---- attributes ----------------------------------------------------------- */

static PyObject *region_repr(FpRegion *r)
{
    if (!r->region)
        return PyUnicode_FromString("<fmem.Region closed>");
    return PyUnicode_FromFormat("<fmem.Region %zd bytes at %p%s%s>", r->size, r->base,
                                r->binding ? ", heap" : "", r->life.closed ? ", closing" : "");
}

static PyObject *get_size(FpRegion *r, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(r->size);
}

static PyObject *get_address(FpRegion *r, void *c)
{
    (void)c;
    if (check_open(r) < 0)
        return NULL;
    return PyLong_FromVoidPtr(r->base);
}

static PyObject *get_unit(FpRegion *r, void *c)
{
    (void)c;
    if (check_open(r) < 0)
        return NULL;
    return PyLong_FromSize_t(fmem_region_unit(r->region));
}

static PyObject *get_closed(FpRegion *r, void *c)
{
    (void)c;
    return PyBool_FromLong(r->life.closed);
}

static PyObject *get_pool(FpRegion *r, void *c)
{
    (void)c;
    return Py_NewRef(r->pool);
}

static PyGetSetDef region_getset[] = {
    {"size", (getter)get_size, NULL, "Bytes of address space (len(region)).", NULL},
    {"address", (getter)get_address, NULL, "Address of the first byte.", NULL},
    {"unit", (getter)get_unit, NULL, "Bytes brought in per fault (fetch unit).", NULL},
    {"closed", (getter)get_closed, NULL, "True once close() was called.", NULL},
    {"pool", (getter)get_pool, NULL, "The pool that holds the far data.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef region_methods[] = {
    {"close", (PyCFunction)region_close, METH_NOARGS, close_doc},
    {"flush", (PyCFunction)region_flush, METH_NOARGS, flush_doc},
    {"release", (PyCFunction)region_release, METH_VARARGS, release_doc},
    {"stats", (PyCFunction)region_stats, METH_NOARGS, stats_doc},
    {"contains", (PyCFunction)region_contains, METH_O, contains_doc},
    {"__enter__", (PyCFunction)region_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nReturn the region itself."},
    {"__exit__", (PyCFunction)region_exit, METH_VARARGS,
     "__exit__($self, t, v, tb, /)\n--\n\nClose the region (see close())."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(region_doc,
"Region(size, cache=None, *, pool=None, fetch_unit=0, prefetch=None)\n--\n\n"
"A far-memory region: size bytes of address space whose contents live in\n"
"the pool (pool=None: fmem.default_pool()), brought into a local cache\n"
"on access through userfaultfd and written back when evicted. cache is\n"
"the local budget: bytes (int), a fraction of size (float), or None for\n"
"64 MiB (at most size); the library rounds it up to at least 16 fetch\n"
"units. fetch_unit: bytes per fault, a power of two in [4 KiB, 256 KiB]\n"
"(0: 16 KiB). prefetch: units read ahead after sequential faults (None:\n"
"256 KiB worth, 0: off).\n\n"
"The region exports its memory through the buffer protocol (writable),\n"
"or serves as the home of a heap: fmem.numpy_arrays(region) and\n"
"fmem.install_arena_allocator(region). Needs userfaultfd (AccessError\n"
"otherwise). Do not fork() while a region is in use.");

PyTypeObject FpRegion_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "fmem.Region",
    .tp_basicsize = sizeof(FpRegion),
    .tp_dealloc = (destructor)region_dealloc,
    .tp_repr = (reprfunc)region_repr,
    .tp_as_sequence = &region_as_sequence,
    .tp_as_buffer = &region_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = region_doc,
    .tp_weaklistoffset = offsetof(FpRegion, weakrefs),
    .tp_methods = region_methods,
    .tp_getset = region_getset,
    .tp_new = region_new,
};
