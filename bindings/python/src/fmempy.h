/* fmempy.h - the fmem extension module (fmem._fmem): object layouts and the
 * calls its files share.
 *
 * Every field below is read and written with the GIL held. Calls into
 * libfmem that can block (pool open/close, allocation, free, region work)
 * run without the GIL; a pool or region counts those calls (life.inflight)
 * and the objects that still need it (life.dependents), and is released
 * only when it is closed and both counts are zero (life.c). */
#ifndef FMEMPY_H
#define FMEMPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fmem.h>
#include <fmem_far.h>
#include <fmem_hooks.h>

/* ---- shared lifetime of a pool or a region ------------------------------ */

typedef struct fp_life {
    int closed;            /* no new work is accepted */
    Py_ssize_t inflight;   /* calls running without the GIL */
    Py_ssize_t dependents; /* buffers, regions, heaps that still need it */
} fp_life;

typedef struct FpBinding FpBinding;
typedef struct FpBuffer FpBuffer;

typedef struct FpPool {
    PyObject_HEAD
    fmem_pool *pool;    /* NULL once released */
    fp_life life;
    PyObject *uri;      /* str, or None for the default */
    FpBuffer *buffers;  /* live buffers, freed when the pool is closed */
    FpBinding *binding; /* borrowed: the heap numpy arrays and arenas use */
    PyObject *weakrefs;
} FpPool;

struct FpBuffer {
    PyObject_HEAD
    FpPool *pool;       /* strong reference */
    fmem_handle handle;
    char *data;         /* mapped bytes; NULL when the transport cannot map */
    Py_ssize_t size;    /* bytes asked for (len()) */
    int live;           /* 0 once freed */
    Py_ssize_t exports; /* buffer-protocol views, plus copies in progress */
    FpBuffer *prev, *next;
    PyObject *weakrefs;
};

typedef struct FpRegion {
    PyObject_HEAD
    FpPool *pool;         /* strong reference */
    fmem_region *region;  /* NULL once destroyed */
    fp_life life;
    char *base;
    Py_ssize_t size;
    Py_ssize_t exports;   /* buffer-protocol views */
    FpBinding *binding;   /* borrowed: a heap owns the region's space */
    PyObject *weakrefs;
} FpRegion;

/* A heap on a pool or inside a region with the hooks bound to it; shared by
 * numpy handlers and the arena hook of that owner. numpy handler capsules
 * hold references to it, so it lives as long as the last array. */
struct FpBinding {
    PyObject_HEAD
    PyObject *owner; /* FpPool or FpRegion, strong reference */
    fmem_heap *heap;
    fmem_hooks *hooks;
};

extern PyTypeObject FpPool_Type, FpClient_Type, FpBuffer_Type, FpRegion_Type,
    FpBinding_Type, FpNumpyArrays_Type;

#define FpPool_Check(o) PyObject_TypeCheck(o, &FpPool_Type)
#define FpRegion_Check(o) PyObject_TypeCheck(o, &FpRegion_Type)

/* ---- errors.c ----------------------------------------------------------- */

extern PyObject *FpExc_Error, *FpExc_Closed, *FpExc_InUse, *FpExc_Size,
    *FpExc_DoubleFree, *FpExc_NotSupported, *FpExc_Busy;

int fp_errors_init(PyObject *module);
/* Raise the exception class of libfmem code `rc` ("what: message"); NULL. */
PyObject *fp_raise(int rc, const char *what);
/* Raise `cls` with a formatted message and code 0; NULL. */
PyObject *fp_raisef(PyObject *cls, const char *fmt, ...);

/* ---- args.c ------------------------------------------------------------- */

/* A byte count from a Python int: TypeError for other types, fmem.SizeError
 * below `min` or beyond what a pool can hold. -1 on error. */
Py_ssize_t fp_size_arg(PyObject *o, const char *name, Py_ssize_t min);
/* The memory range of `o`: an int address (one byte), or the bytes of any
 * buffer-protocol object. 0, or -1 with an exception. */
int fp_range_of(PyObject *o, uintptr_t *lo, uintptr_t *hi);

/* ---- life.c ------------------------------------------------------------- */

/* The C pool for a call without the GIL (inflight +1), or NULL with
 * fmem.ClosedError; pair with fp_pool_leave. */
fmem_pool *fp_pool_enter(FpPool *p);
void fp_pool_leave(FpPool *p);
/* The C pool for a new dependent (+1), or NULL with fmem.ClosedError. */
fmem_pool *fp_pool_hold(FpPool *p);
void fp_pool_unhold(FpPool *p);
/* Release the C pool if closed and idle. */
void fp_pool_maybe_release(FpPool *p);
fmem_region *fp_region_enter(FpRegion *r);
void fp_region_leave(FpRegion *r);
void fp_region_maybe_release(FpRegion *r);
/* The shared embedded pool (fmem.open()) for calls given no pool. New
 * reference, or NULL with an exception. */
FpPool *fp_default_pool(void);
FpPool *fp_default_pool_peek(void); /* borrowed; NULL if none is open */

/* ---- pool.c, buffer.c ---------------------------------------------------- */

FpPool *fp_pool_open(PyTypeObject *type, const char *uri);
/* A new buffer owning block `h` (mapped at `data` or NULL) of pool `p`; on
 * failure the block is freed. */
PyObject *fp_buffer_new(FpPool *p, const fmem_handle *h, void *data, Py_ssize_t size);
/* Free a live buffer (the caller checked exports). Returns the fmem code. */
int fp_buffer_release(FpBuffer *b);

/* ---- binding.c ----------------------------------------------------------- */

/* The binding of a Pool or Region, made on first use. New reference. */
FpBinding *fp_binding_get(PyObject *owner);
PyObject *fp_binding_stats(FpBinding *b);

/* ---- stats.c -------------------------------------------------------------- */

PyObject *fp_pool_stats_dict(const fmem_stats_t *s);
PyObject *fp_region_stats_dict(const fmem_region_stats_t *s);
int fp_region_paths_put(PyObject *d, const fmem_region_path_t *p, int n);
PyObject *fp_heap_stats_dict(const fmem_hooks_stats_t *hs, const fmem_heap_stats_t *s);

/* ---- arena.c, numpy_handler.c, compact.c --------------------------------- */

FpBinding *fp_arena_binding(void); /* borrowed; NULL before installation */
extern const char fp_compact_doc[];
PyObject *fp_compact(PyObject *module, PyObject *args, PyObject *kw);
extern const char fp_release_pools_doc[];
PyObject *fp_release_pools(PyObject *module, PyObject *unused);

PyObject *fp_install_arena(PyObject *module, PyObject *args, PyObject *kw);
PyObject *fp_arena_stats(PyObject *module, PyObject *unused);
extern const char fp_install_arena_doc[], fp_arena_stats_doc[];

#endif
