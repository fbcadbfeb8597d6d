/* pool_internal.h - the pool object behind fmem_pool. */
#ifndef FMEM_POOL_INTERNAL_H
#define FMEM_POOL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "fmem.h"
#include "fork.h"
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
    /* In the child of fork(), for a pool other processes share (NULL: the
     * pool is private, the kernel's copy-on-write does it all): keep a
     * private copy of every block the process held (pool_fork_keep), hand
     * over old mappings (pool_fork_view), take an identity of its own. */
    int (*fork_child)(fmem_pool *p);
    /* Later, before the child's first allocation or free (fork_mu held):
     * take its own identity. */
    int (*fork_identity)(fmem_pool *p);
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
    /* fork (pool_fork.c) */
    struct fork_watch fork;
    bool shared;                /* other processes use the pool too */
    struct fork_copies *copies; /* a fork child's copies of inherited blocks */
    _Atomic bool fork_identity; /* a fork child takes an identity of its own
                                 * on its first allocation or free */
    bool fork_lost;             /* a fork child that cannot reach the pool at
                                 * all (the parent's RDMA connections) */
    pthread_mutex_t fork_mu;    /* taking that identity */
};

/* pool_fork.c */
void pool_fork_watch(fmem_pool *p); /* watch lock held */
void pool_fork_unwatch(fmem_pool *p);
/* In fork_child: the process held h, mapped at `at` (NULL: not mapped);
 * its bytes are at src (== at when mapped). */
int pool_fork_keep(fmem_pool *p, const fmem_handle *h, char *at, const void *src);
/* An old mapping of the pool, sealed after fork_child except for copies. */
int pool_fork_view(fmem_pool *p, void *start, size_t len);
/* A call on a handle in a pool with copies: 1 if h is not a copy (the
 * backend's), else the call's result. MAP: buf is a void **. */
enum pool_fork_op { POOL_FORK_FREE, POOL_FORK_MAP, POOL_FORK_REMOTE, POOL_FORK_READ, POOL_FORK_WRITE };
int pool_fork_call(fmem_pool *p, enum pool_fork_op op, const fmem_handle *h, uint64_t off,
                   void *buf, size_t len);
void pool_fork_release(fmem_pool *p);
/* A new block that has the (place, key) of a copy: one chance in 2^32 that
 * a block the parent freed comes back with the same key. */
bool pool_fork_collides(fmem_pool *p, const fmem_handle *h);
/* A fork child's first allocation or free: take its own identity (0 or
 * FMEM_E*, e.g. FMEM_EBUSY: no free user id). */
int pool_fork_identity(fmem_pool *p);

int embedded_open(const char *uri, fmem_pool **out);
/* The node an embedded pool tries first for this thread's allocations
 * (far regions place their chunks with it); -1: round robin. A full node
 * still falls over to the next. */
extern _Thread_local int pool_alloc_hint;
/* What an embedded open can be asked beyond fmem_open(). */
struct embedded_opts {
    /* a daemon's pool: refuse pool files another user owns or that group
     * or others may write (pool_files.h) */
    bool own_files;
    /* administration (fmem_open_admin): no user slot, no allocation or
     * free, never creates a pool */
    bool admin;
};
int embedded_open_opts(const char *uri, const struct embedded_opts *o, fmem_pool **out);
/* Benchmarks only: write no redo-log entries at all on any node (the
 * baseline that measures what logging costs). Handles are then checked by
 * key alone. */
void pool_disable_logging(fmem_pool *p);
int pool_resolve(fmem_pool *p, const fmem_handle *h, struct node **n, uint64_t *chunk,
                 unsigned *log2c);

#endif
