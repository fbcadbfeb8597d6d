/* pool_internal.h - the pool object behind fmem_pool. */
#ifndef FMEM_POOL_INTERNAL_H
#define FMEM_POOL_INTERNAL_H

#include <stdatomic.h>

#include "fmem.h"
#include "node.h"
#include "uri.h"

/* What a backend implements; pool.c has checked the pointers. */
struct pool_ops {
    int (*alloc)(fmem_pool *p, size_t size, fmem_handle *out);
    int (*free)(fmem_pool *p, const fmem_handle *h);
    int (*map)(fmem_pool *p, const fmem_handle *h, void **ptr);
    int (*remote)(fmem_pool *p, const fmem_handle *h, uint64_t *remote_addr);
    int (*read)(fmem_pool *p, const fmem_handle *h, uint64_t off, void *dst, size_t len);
    int (*write)(fmem_pool *p, const fmem_handle *h, uint64_t off, const void *src, size_t len);
    int (*stats)(fmem_pool *p, fmem_stats_t *st);
    void (*close)(fmem_pool *p);
};

struct fmem_pool {
    const struct pool_ops *ops;
    void *backend; /* backend state other than the embedded one's */
    /* embedded backend */
    struct node *nodes[URI_MAX_NODES];
    unsigned nnodes;
    _Atomic unsigned rr; /* round-robin cursor over nodes */
    _Atomic uint64_t allocs, frees, failed_allocs, max_retries;
    _Atomic uint64_t size_class[FMEM_SIZE_CLASSES];
};

/* admin: open without a user slot (fmem_open_admin): no allocation, no
 * free, never creates a pool. */
int embedded_open(const char *uri, bool admin, fmem_pool **out);
/* Benchmarks only: write no redo-log entries at all on any node (the
 * baseline that measures what logging costs). Handles are then checked by
 * key alone. */
void pool_disable_logging(fmem_pool *p);
int pool_resolve(fmem_pool *p, const fmem_handle *h, struct node **n, uint64_t *chunk,
                 unsigned *log2c);

#endif
