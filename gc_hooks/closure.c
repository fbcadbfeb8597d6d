/* closure.c - plain function pointers bound to a binding, for hook APIs
 * that take no context pointer (GMP's mp_set_memory_functions, libxml2's
 * xmlMemSetup, OpenSSL's CRYPTO_set_mem_functions, ...).
 *
 * Each (binding, kind) gets one libffi closure: a small trampoline in
 * executable memory that calls dispatch() below with the binding, whatever
 * the C signature of the kind. */
#include <errno.h>
#include <ffi.h>
#include <stdlib.h>
#include <string.h>

#include "hooks_internal.h"

struct fh_closure {
    ffi_closure *closure;
    void *code; /* the callable address */
    ffi_cif cif;
    ffi_type *args[4];
    fmem_hooks *b;
    fmem_hooks_kind kind;
};

static _Atomic uint64_t alive;

#define SIZE_T_FFI (sizeof(size_t) == 8 ? &ffi_type_uint64 : &ffi_type_uint32)

/* Signature of each kind: return type, then arguments. */
static int signature(fmem_hooks_kind k, ffi_type **ret, ffi_type **args)
{
    ffi_type *ptr = &ffi_type_pointer, *sz = SIZE_T_FFI, *vd = &ffi_type_void,
             *in = &ffi_type_sint;
    switch (k) {
    case FMEM_HOOKS_MALLOC: *ret = ptr; args[0] = sz; return 1;
    case FMEM_HOOKS_CALLOC: *ret = ptr; args[0] = sz; args[1] = sz; return 2;
    case FMEM_HOOKS_REALLOC: *ret = ptr; args[0] = ptr; args[1] = sz; return 2;
    case FMEM_HOOKS_FREE: *ret = vd; args[0] = ptr; return 1;
    case FMEM_HOOKS_STRDUP: *ret = ptr; args[0] = ptr; return 1;
    case FMEM_HOOKS_SIZED_REALLOC: *ret = ptr; args[0] = ptr; args[1] = sz; args[2] = sz; return 3;
    case FMEM_HOOKS_SIZED_FREE: *ret = vd; args[0] = ptr; args[1] = sz; return 2;
    case FMEM_HOOKS_FILELINE_MALLOC: *ret = ptr; args[0] = sz; args[1] = ptr; args[2] = in; return 3;
    case FMEM_HOOKS_FILELINE_REALLOC:
        *ret = ptr; args[0] = ptr; args[1] = sz; args[2] = ptr; args[3] = in; return 4;
    case FMEM_HOOKS_FILELINE_FREE: *ret = vd; args[0] = ptr; args[1] = ptr; args[2] = in; return 3;
    default: return -1;
    }
}

#define ARG(i, type) (*(type *)args[i])

static char *dup_string(fmem_hooks *b, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = fmem_hooks_malloc(b, n);
    return d ? memcpy(d, s, n) : NULL;
}

static void dispatch(ffi_cif *cif, void *ret, void **args, void *user)
{
    (void)cif;
    struct fh_closure *c = user;
    fmem_hooks *b = c->b;
    void *r = NULL;
    switch (c->kind) {
    case FMEM_HOOKS_MALLOC:
    case FMEM_HOOKS_FILELINE_MALLOC: r = fmem_hooks_malloc(b, ARG(0, size_t)); break;
    case FMEM_HOOKS_CALLOC: r = fmem_hooks_calloc(b, ARG(0, size_t), ARG(1, size_t)); break;
    case FMEM_HOOKS_REALLOC:
    case FMEM_HOOKS_FILELINE_REALLOC: r = fmem_hooks_realloc(b, ARG(0, void *), ARG(1, size_t)); break;
    case FMEM_HOOKS_SIZED_REALLOC: r = fmem_hooks_realloc(b, ARG(0, void *), ARG(2, size_t)); break;
    case FMEM_HOOKS_STRDUP: r = dup_string(b, ARG(0, const char *)); break;
    case FMEM_HOOKS_FREE:
    case FMEM_HOOKS_SIZED_FREE:
    case FMEM_HOOKS_FILELINE_FREE: fmem_hooks_free(b, ARG(0, void *)); return;
    default: break;
    }
    *(void **)ret = r;
}

static struct fh_closure *make(fmem_hooks *b, fmem_hooks_kind kind)
{
    struct fh_closure *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->b = b;
    c->kind = kind;
    ffi_type *ret;
    int n = signature(kind, &ret, c->args);
    c->closure = ffi_closure_alloc(sizeof(ffi_closure), &c->code);
    if (!c->closure || ffi_prep_cif(&c->cif, FFI_DEFAULT_ABI, (unsigned)n, ret, c->args) != FFI_OK ||
        ffi_prep_closure_loc(c->closure, &c->cif, dispatch, c, c->code) != FFI_OK) {
        if (c->closure)
            ffi_closure_free(c->closure);
        free(c);
        errno = ENOMEM;
        return NULL;
    }
    atomic_fetch_add(&alive, 1);
    atomic_fetch_add(&b->closures_alive, 1);
    return c;
}

FMEM_API fmem_hooks_fn fmem_hooks_closure(fmem_hooks *b, fmem_hooks_kind kind)
{
    ffi_type *ret, *args[4];
    if (!b || signature(kind, &ret, args) < 0) {
        errno = EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&b->lock);
    struct fh_closure *c = b->closures[kind];
    if (!c)
        c = b->closures[kind] = make(b, kind);
    pthread_mutex_unlock(&b->lock);
    if (!c)
        return NULL;
    fmem_hooks_fn fn;
    memcpy(&fn, &c->code, sizeof fn); /* code address -> function pointer */
    return fn;
}

void fh_closures_free(fmem_hooks *b)
{
    for (int k = 0; k < FMEM_HOOKS_KINDS; k++) {
        struct fh_closure *c = b->closures[k];
        if (!c)
            continue;
        ffi_closure_free(c->closure);
        free(c);
        b->closures[k] = NULL;
        atomic_fetch_sub(&alive, 1);
        atomic_fetch_sub(&b->closures_alive, 1);
    }
}

FMEM_API uint64_t fmem_hooks_closures_alive(void) { return atomic_load(&alive); }

FMEM_API int fmem_hooks_gmp(fmem_hooks *b, fmem_hooks_gmp_fns *out)
{
    if (!b || !out)
        return FMEM_EINVAL;
    fmem_hooks_fn a = fmem_hooks_closure(b, FMEM_HOOKS_MALLOC),
                  r = fmem_hooks_closure(b, FMEM_HOOKS_SIZED_REALLOC),
                  f = fmem_hooks_closure(b, FMEM_HOOKS_SIZED_FREE);
    if (!a || !r || !f)
        return FMEM_ENOMEM;
    out->alloc = (void *(*)(size_t))a;
    out->realloc = (void *(*)(void *, size_t, size_t))r;
    out->free = (void (*)(void *, size_t))f;
    return 0;
}
