/* local_malloc.c - glibc malloc and dlopen'ed mimalloc for the allocator
 * benchmarks (see local_malloc.h). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "local_malloc.h"

void *glibc_malloc(void *ctx, size_t n)
{
    (void)ctx;
    return malloc(n);
}

void glibc_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static void *(*mi_malloc_fn)(size_t);
static void (*mi_free_fn)(void *);
static void (*mi_collect_fn)(int);

int mimalloc_load(char *why, size_t len)
{
    const char *names[] = {"libmimalloc.so.2", "libmimalloc.so"};
    for (unsigned i = 0; i < 2; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        *(void **)&mi_malloc_fn = dlsym(h, "mi_malloc");
        *(void **)&mi_free_fn = dlsym(h, "mi_free");
        *(void **)&mi_collect_fn = dlsym(h, "mi_collect");
        if (mi_malloc_fn && mi_free_fn && mi_collect_fn)
            return 0;
    }
    snprintf(why, len, "libmimalloc.so.2 not found (apt-get install libmimalloc-dev)");
    return -1;
}

void *mimalloc_malloc(void *ctx, size_t n)
{
    (void)ctx;
    return mi_malloc_fn(n);
}

void mimalloc_free(void *ctx, void *p)
{
    (void)ctx;
    mi_free_fn(p);
}

void mimalloc_collect(int force)
{
    mi_collect_fn(force);
}
