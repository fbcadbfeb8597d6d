/* local_malloc.h - the local-memory allocators fmem-fragbench and
 * fmem-mallocbench compare against: glibc malloc and mimalloc, behind the
 * (ctx, size) / (ctx, pointer) calls of their adapter tables (ctx unused).
 *
 * mimalloc is loaded with dlopen(RTLD_LOCAL) and called through mi_malloc,
 * mi_free and mi_collect: linking libmimalloc.so into the program would
 * interpose its malloc on the whole process, glibc column included. */
#ifndef FMEM_BENCH_LOCAL_MALLOC_H
#define FMEM_BENCH_LOCAL_MALLOC_H

#include <stddef.h>

void *glibc_malloc(void *ctx, size_t n);
void glibc_free(void *ctx, void *p);

/* 0 when libmimalloc.so.2 (or .so) is loaded; -1 with why filled in. */
int mimalloc_load(char *why, size_t len);
void *mimalloc_malloc(void *ctx, size_t n);
void mimalloc_free(void *ctx, void *p);
/* mi_collect(force): give free memory back to the system. */
void mimalloc_collect(int force);

#endif
