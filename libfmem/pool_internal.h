/* pool_internal.h - the pool object behind fmem_pool. */
#ifndef FMEM_POOL_INTERNAL_H
#define FMEM_POOL_INTERNAL_H

#include <stdatomic.h>

#include "fmem.h"
#include "node.h"
#include "uri.h"

struct fmem_pool {
    struct node *nodes[URI_MAX_NODES];
    unsigned nnodes;
    _Atomic unsigned rr; /* round-robin cursor over nodes */
    _Atomic uint64_t allocs, frees, failed_allocs, max_retries;
    _Atomic uint64_t size_class[FMEM_SIZE_CLASSES];
};

int pool_resolve(fmem_pool *p, const fmem_handle *h, struct node **n, uint64_t *chunk,
                 unsigned *log2c);

#endif
