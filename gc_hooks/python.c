/* python.c - CPython's allocator domains and pymalloc's arena allocator on
 * a binding. A hook installed while the interpreter runs must wrap the
 * allocator it replaces (the C API's rule): pointers the heap does not own
 * go to the saved one. Only the public fmem_hooks API is used here. */
#define PY_SSIZE_T_CLEAN
#include "fmem_hooks_python.h"

#include <stdlib.h>

/* One installation: the binding and the allocator it wraps, freed with
 * the binding. PyMemAllocatorEx and fmem_hooks_allocator have the same
 * members, so the saved allocator serves as the fallback directly. */
struct py_domain_hook {
    struct fmem_hooks_attached link;
    fmem_hooks *b;
    fmem_hooks_allocator old;
};

struct py_arena_hook {
    struct fmem_hooks_attached link;
    fmem_hooks *b;
    PyObjectArenaAllocator old;
};

/* Python wants distinct non-NULL pointers for 0 bytes, and realloc to 0
 * keeps a block: the heap's minimal object, and a 1-byte resize. */
static void *dom_malloc(void *ctx, size_t n)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_malloc_via(k->b, &k->old, n);
}

static void *dom_calloc(void *ctx, size_t n, size_t size)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_calloc_via(k->b, &k->old, n, size);
}

static void *dom_realloc(void *ctx, void *p, size_t n)
{
    struct py_domain_hook *k = ctx;
    return fmem_hooks_realloc_via(k->b, &k->old, p, n ? n : 1);
}

static void dom_free(void *ctx, void *p)
{
    struct py_domain_hook *k = ctx;
    fmem_hooks_free_via(k->b, &k->old, p);
}

FMEM_API int fmem_hooks_python_domain(fmem_hooks *b, PyMemAllocatorDomain domain,
                                      PyMemAllocatorEx *old)
{
    if (!b || (domain != PYMEM_DOMAIN_RAW && domain != PYMEM_DOMAIN_MEM &&
               domain != PYMEM_DOMAIN_OBJ))
        return FMEM_EINVAL;
    struct py_domain_hook *k = calloc(1, sizeof *k);
    if (!k)
        return FMEM_ENOMEM;
    PyMemAllocatorEx cur;
    PyMem_GetAllocator(domain, &cur);
    k->b = b;
    k->old = (fmem_hooks_allocator){
        .ctx = cur.ctx, .malloc = cur.malloc, .calloc = cur.calloc, .realloc = cur.realloc,
        .free = cur.free,
    };
    if (old)
        *old = cur;
    fmem_hooks_attach(b, &k->link);
    PyMemAllocatorEx mine = {
        .ctx = k, .malloc = dom_malloc, .calloc = dom_calloc, .realloc = dom_realloc,
        .free = dom_free,
    };
    PyMem_SetAllocator(domain, &mine);
    return 0;
}

static void *arena_alloc(void *ctx, size_t size)
{
    struct py_arena_hook *k = ctx;
    void *p = fmem_hooks_take(k->b, size, 0);
    return p ? p : k->old.alloc(k->old.ctx, size);
}

static void arena_free(void *ctx, void *p, size_t size)
{
    struct py_arena_hook *k = ctx;
    if (p && !fmem_hooks_give(k->b, p))
        k->old.free(k->old.ctx, p, size);
}

FMEM_API int fmem_hooks_python_arena(fmem_hooks *b, PyObjectArenaAllocator *old)
{
    if (!b)
        return FMEM_EINVAL;
    struct py_arena_hook *k = calloc(1, sizeof *k);
    if (!k)
        return FMEM_ENOMEM;
    k->b = b;
    PyObject_GetArenaAllocator(&k->old);
    if (old)
        *old = k->old;
    fmem_hooks_attach(b, &k->link);
    PyObjectArenaAllocator mine = {.ctx = k, .alloc = arena_alloc, .free = arena_free};
    PyObject_SetArenaAllocator(&mine);
    return 0;
}
