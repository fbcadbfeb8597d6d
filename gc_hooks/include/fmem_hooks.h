/* fmem_hooks.h - bind an fmem heap to the allocator interfaces that
 * runtimes and libraries expose.
 *
 * A binding (fmem_hooks) joins an object heap (fmem_far.h: a heap on a
 * pool's directly mapped chunks, or a heap inside a far-memory region) to
 *   - a generic malloc/calloc/realloc/free set with a context pointer,
 *   - zlib's zalloc/zfree pair (the opaque pointer is the binding),
 *   - Lua's lua_Alloc,
 *   - plain function pointers without any context (GMP, libxml2, OpenSSL
 *     and the like), made with libffi closures: fmem_hooks_closure(),
 * and, in libfmem_hooks_python (fmem_hooks_python.h), CPython's allocator
 * domains, its arena allocator and numpy's data memory handler.
 *
 * Routing. Every hook decides by address: a pointer the heap owns goes back
 * to the heap, any other pointer to the binding's fallback allocator (the C
 * library's by default), so memory allocated before a hook was installed
 * keeps being freed the way it was allocated. New allocations go to the
 * heap while the binding is active (the default), to the fallback
 * otherwise, and to the fallback when the heap is full ("spills",
 * counted in the statistics).
 *
 * Threads. Every hook is thread-safe (the heap is); so is changing the
 * active flag while other threads allocate.
 *
 * Lifetime. The heap (and its pool or region) must outlive the binding,
 * and the binding must outlive every hook that still points to it and
 * every object allocated through it. fmem_hooks_drop() frees the binding
 * and its closures: only call it once no hook can be called any more.
 *
 * docs/hooks.md has each hook's rules and an example.
 */
#ifndef FMEM_HOOKS_H
#define FMEM_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#include <fmem.h>
#include <fmem_far.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fmem_hooks fmem_hooks;

/* An allocator with a context pointer. realloc(ctx, p, 0) frees p and
 * returns NULL; free(ctx, NULL) does nothing. */
typedef struct fmem_hooks_allocator {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t n, size_t size);
    void *(*realloc)(void *ctx, void *ptr, size_t size);
    void (*free)(void *ctx, void *ptr);
} fmem_hooks_allocator;

typedef struct fmem_hooks_stats_t {
    uint64_t mallocs;       /* objects the heap handed out through hooks */
    uint64_t frees;         /* heap objects freed through hooks */
    uint64_t reallocs;      /* reallocations of heap objects */
    uint64_t foreign_frees; /* frees and reallocs routed to the fallback */
    uint64_t fallback_allocs; /* new allocations made by the fallback
                                (binding inactive) */
    uint64_t spills;        /* allocations the heap could not hold, made by
                               the fallback instead */
    uint64_t closures;      /* closures of this binding alive now */
    uint64_t reserved[8];
} fmem_hooks_stats_t;

/* A binding over `heap` (not owned: destroy it after the binding). */
FMEM_API int fmem_hooks_new(fmem_heap *heap, fmem_hooks **out);
/* A binding over a new heap on `pool` (fmem_heap_new: shared-memory
 * transport); the binding owns the heap and destroys it on drop. */
FMEM_API int fmem_hooks_new_pool(fmem_pool *pool, fmem_hooks **out);
/* Free the binding, its closures and (fmem_hooks_new_pool) its heap. */
FMEM_API void fmem_hooks_drop(fmem_hooks *b);

FMEM_API fmem_heap *fmem_hooks_heap(fmem_hooks *b);
/* The allocator for foreign pointers, inactive periods and spills; NULL
 * restores the C library's. Its functions must all be set. Set it before
 * any hook of the binding is installed (it is not swapped atomically). */
FMEM_API void fmem_hooks_set_fallback(fmem_hooks *b, const fmem_hooks_allocator *fallback);
/* 1 (default): new allocations go to the heap; 0: to the fallback. Frees
 * always go where the memory came from. */
FMEM_API void fmem_hooks_set_active(fmem_hooks *b, int active);
FMEM_API int fmem_hooks_active(fmem_hooks *b);
/* Nonzero when p is an object of the binding's heap (a freed object may
 * still count: the heap answers from its page map, not its free lists). */
FMEM_API int fmem_hooks_owns(fmem_hooks *b, const void *p);
FMEM_API int fmem_hooks_stats(fmem_hooks *b, fmem_hooks_stats_t *out);

/* ---- generic allocator: ctx is the binding ------------------------------ */

FMEM_API fmem_hooks_allocator fmem_hooks_allocator_of(fmem_hooks *b);
FMEM_API void *fmem_hooks_malloc(void *ctx, size_t size);
FMEM_API void *fmem_hooks_calloc(void *ctx, size_t n, size_t size);
FMEM_API void *fmem_hooks_realloc(void *ctx, void *ptr, size_t size);
FMEM_API void fmem_hooks_free(void *ctx, void *ptr);

/* zlib: strm->zalloc = fmem_hooks_zalloc, strm->zfree = fmem_hooks_zfree,
 * strm->opaque = binding (the types match zlib's alloc_func/free_func). */
FMEM_API void *fmem_hooks_zalloc(void *opaque, unsigned items, unsigned size);
FMEM_API void fmem_hooks_zfree(void *opaque, void *ptr);

/* Lua: lua_newstate(fmem_hooks_lua_alloc, binding). nsize == 0 frees and
 * returns NULL; a shrinking request never fails. */
FMEM_API void *fmem_hooks_lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* ---- writing hooks ------------------------------------------------------- */
/* The routing above with an explicit fallback, for hooks that wrap the
 * allocator they replace (the CPython ones do). */
FMEM_API void *fmem_hooks_malloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, size_t size);
FMEM_API void *fmem_hooks_calloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, size_t n,
                                     size_t size);
FMEM_API void *fmem_hooks_realloc_via(fmem_hooks *b, const fmem_hooks_allocator *fb, void *p,
                                      size_t size);
FMEM_API void fmem_hooks_free_via(fmem_hooks *b, const fmem_hooks_allocator *fb, void *p);
/* A new heap object (zeroed if `zero`), or NULL when the binding is
 * inactive or the heap full: the hook then allocates its own way. */
FMEM_API void *fmem_hooks_take(fmem_hooks *b, size_t size, int zero);
/* Free p and return 1 if it is the heap's; 0 (counted as foreign) if the
 * hook must free it its own way. */
FMEM_API int fmem_hooks_give(fmem_hooks *b, void *p);
/* State of one installation, freed (free(3)) with the binding: a struct
 * allocated with malloc(3) whose first member is this. */
struct fmem_hooks_attached {
    struct fmem_hooks_attached *next;
};
FMEM_API void fmem_hooks_attach(fmem_hooks *b, struct fmem_hooks_attached *a);

/* ---- closures for context-free hook APIs (libffi) ----------------------- */

/* The signature a closure has; cast the fmem_hooks_fn to it. */
typedef enum fmem_hooks_kind {
    FMEM_HOOKS_MALLOC = 1,       /* void *(size_t) */
    FMEM_HOOKS_CALLOC,           /* void *(size_t n, size_t size) */
    FMEM_HOOKS_REALLOC,          /* void *(void *, size_t) */
    FMEM_HOOKS_FREE,             /* void (void *) */
    FMEM_HOOKS_STRDUP,           /* char *(const char *): libxml2 */
    FMEM_HOOKS_SIZED_REALLOC,    /* void *(void *, size_t old, size_t new): GMP */
    FMEM_HOOKS_SIZED_FREE,       /* void (void *, size_t): GMP */
    FMEM_HOOKS_FILELINE_MALLOC,  /* void *(size_t, const char *, int): OpenSSL */
    FMEM_HOOKS_FILELINE_REALLOC, /* void *(void *, size_t, const char *, int) */
    FMEM_HOOKS_FILELINE_FREE,    /* void (void *, const char *, int) */
    FMEM_HOOKS_KINDS
} fmem_hooks_kind;

typedef void (*fmem_hooks_fn)(void);

/* A plain function pointer that allocates (frees, ...) through binding b.
 * The same (binding, kind) always gives the same pointer; it stays valid
 * until fmem_hooks_drop(b). NULL (errno set) for an unknown kind, or when
 * libffi cannot make a closure (executable memory refused). */
FMEM_API fmem_hooks_fn fmem_hooks_closure(fmem_hooks *b, fmem_hooks_kind kind);
/* Closures alive in the process (all bindings). */
FMEM_API uint64_t fmem_hooks_closures_alive(void);

/* GMP's three functions, for mp_set_memory_functions(). */
typedef struct fmem_hooks_gmp_fns {
    void *(*alloc)(size_t);
    void *(*realloc)(void *, size_t, size_t);
    void (*free)(void *, size_t);
} fmem_hooks_gmp_fns;
FMEM_API int fmem_hooks_gmp(fmem_hooks *b, fmem_hooks_gmp_fns *out);

#ifdef __cplusplus
}
#endif
#endif /* FMEM_HOOKS_H */
