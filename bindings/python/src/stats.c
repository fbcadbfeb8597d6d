/* stats.c - statistics structures as dicts of ints. */
#include "fmempy.h"

static int put(PyObject *d, const char *key, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int rc = o ? PyDict_SetItemString(d, key, o) : -1;
    Py_XDECREF(o);
    return rc;
}

#define PUT(d, s, f) (put(d, #f, (s)->f) < 0)

PyObject *fp_pool_stats_dict(const fmem_stats_t *s)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (PUT(d, s, capacity_bytes) || PUT(d, s, allocated_bytes) || PUT(d, s, metadata_bytes) ||
        PUT(d, s, nodes) || PUT(d, s, user_id) || PUT(d, s, allocs) || PUT(d, s, frees) ||
        PUT(d, s, failed_allocs) || PUT(d, s, cas_ops) || PUT(d, s, cas_failures) ||
        PUT(d, s, reads) || PUT(d, s, writes) || PUT(d, s, round_trips) ||
        PUT(d, s, log_flushes) || PUT(d, s, max_retries))
        goto fail;
    PyObject *classes = PyList_New(FMEM_SIZE_CLASSES);
    if (!classes)
        goto fail;
    for (int k = 0; k < FMEM_SIZE_CLASSES; k++) {
        PyObject *v = PyLong_FromUnsignedLongLong(s->size_class_allocs[k]);
        if (!v) {
            Py_DECREF(classes);
            goto fail;
        }
        PyList_SET_ITEM(classes, k, v);
    }
    int rc = PyDict_SetItemString(d, "size_class_allocs", classes);
    Py_DECREF(classes);
    if (rc == 0)
        return d;
fail:
    Py_DECREF(d);
    return NULL;
}

PyObject *fp_region_stats_dict(const fmem_region_stats_t *s)
{
    PyObject *d = PyDict_New();
    if (d && (PUT(d, s, faults) || PUT(d, s, missing_faults) || PUT(d, s, wp_faults) ||
              PUT(d, s, hits) || PUT(d, s, fetches) || PUT(d, s, prefetches) ||
              PUT(d, s, zero_fills) || PUT(d, s, evictions) || PUT(d, s, writebacks) ||
              PUT(d, s, bytes_fetched) || PUT(d, s, bytes_written) || PUT(d, s, remote_bytes) ||
              PUT(d, s, remote_peak) || PUT(d, s, cached_bytes) || PUT(d, s, cache_bytes) ||
              PUT(d, s, releases) || PUT(d, s, alloc_failures) || PUT(d, s, paths) ||
              PUT(d, s, stripe_width) || PUT(d, s, io_width) || PUT(d, s, prefetch_units) ||
              PUT(d, s, fault_rate) || PUT(d, s, seq_pct) || PUT(d, s, write_pct) ||
              PUT(d, s, refault_pct) || PUT(d, s, refault_dist) || PUT(d, s, tier_moves) ||
              PUT(d, s, fetch_units) || PUT(d, s, fetch_max) || PUT(d, s, ahead_unused) ||
              PUT(d, s, ahead_window)))
        Py_CLEAR(d);
    return d;
}

/* d["path_stats"]: one dict per memory node the region spreads over */
int fp_region_paths_put(PyObject *d, const fmem_region_path_t *p, int n)
{
    PyObject *list = PyList_New(n);
    if (!list)
        return -1;
    for (int i = 0; i < n; i++) {
        PyObject *e = PyDict_New();
        if (!e || PUT(e, &p[i], node) || PUT(e, &p[i], placing) || PUT(e, &p[i], bytes_fetched) ||
            PUT(e, &p[i], bytes_written) || PUT(e, &p[i], ops) || PUT(e, &p[i], busy_ns) ||
            PUT(e, &p[i], bandwidth) || PUT(e, &p[i], chunks)) {
            Py_XDECREF(e);
            Py_DECREF(list);
            return -1;
        }
        PyList_SET_ITEM(list, i, e);
    }
    int rc = PyDict_SetItemString(d, "path_stats", list);
    Py_DECREF(list);
    return rc;
}

/* the binding's counters, then the heap's under "heap_" names */
PyObject *fp_heap_stats_dict(const fmem_hooks_stats_t *hs, const fmem_heap_stats_t *s)
{
    PyObject *d = PyDict_New();
    if (d && (PUT(d, hs, mallocs) || PUT(d, hs, frees) || PUT(d, hs, reallocs) ||
              PUT(d, hs, foreign_frees) || PUT(d, hs, fallback_allocs) || PUT(d, hs, spills) ||
              put(d, "heap_objects", s->mallocs - s->frees) ||
              put(d, "heap_slabs", s->slabs) || put(d, "heap_large", s->large) ||
              put(d, "heap_remote_bytes", s->remote_bytes) ||
              put(d, "heap_remote_peak", s->remote_peak) ||
              put(d, "heap_double_frees", s->double_frees) ||
              put(d, "heap_bad_frees", s->bad_frees) || put(d, "heap_merges", s->merges) ||
              put(d, "heap_reclaimed_bytes", s->compact_bytes)))
        Py_CLEAR(d);
    return d;
}
