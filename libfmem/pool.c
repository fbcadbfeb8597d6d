/* pool.c - the public API front: argument checks shared by every backend,
 * and dispatch to the backend behind the pool (embedded: this process runs
 * the protocol; service: requests go to an allocation service, fmemd). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmem.h"
#include "fmem_admin.h"
#include "fork.h"
#include "pool_internal.h"
#include "session_table.h"
#include "service/client.h"
#include "uri.h"

int fmem_open(const char *uri, fmem_pool **out)
{
    if (!out)
        return FMEM_EINVAL;
    *out = NULL;
    if (!uri || !*uri)
        uri = getenv("FMEM_URI");
    if (!uri || !*uri)
        uri = "mem:";
    fork_objects_lock(); /* no fork sees a pool half open */
    int rc = service_uri(uri) /* unix:/PATH, fmem://...: an allocation service */
                 ? service_open(uri, out)
                 : embedded_open(uri, out);
    if (rc == 0)
        pool_fork_watch(*out);
    fork_objects_unlock();
    return rc;
}

int fmem_open_admin(const char *uri, fmem_pool **out)
{
    if (!out)
        return FMEM_EINVAL;
    *out = NULL;
    if (!uri || !*uri)
        return FMEM_EURI;
    if (service_uri(uri)) /* a service holds no metadata for us */
        return FMEM_ENOTSUP;
    fork_objects_lock();
    int rc = embedded_open_opts(uri, &(struct embedded_opts){.admin = true}, out);
    if (rc == 0)
        pool_fork_watch(*out);
    fork_objects_unlock();
    return rc;
}

void fmem_close(fmem_pool *p)
{
    if (!p)
        return;
    fork_objects_lock();
    pool_fork_unwatch(p);
    p->ops->close(p);
    fork_objects_unlock();
}

/* Every call on an open pool runs inside the fork gate (fork.h). In a
 * fork child of a shared pool, handles of inherited blocks name private
 * copies (pool_fork.c), which GATED_HANDLE asks about first. */
#define GATED(call)                                                                                \
    do {                                                                                           \
        fork_gate_enter();                                                                         \
        int rc_ = (call);                                                                          \
        fork_gate_leave();                                                                         \
        return rc_;                                                                                \
    } while (0)
#define GATED_HANDLE(op, h, off, buf, len, call)                                                   \
    do {                                                                                           \
        fork_gate_enter();                                                                         \
        int rc_ = __builtin_expect(p->copies != NULL, 0) ? pool_fork_call(p, op, h, off, buf, len) \
                                                         : 1;                                      \
        if (rc_ == 1)                                                                              \
            rc_ = __builtin_expect(p->fork_lost, 0) ? FMEM_EIO : (call);                           \
        fork_gate_leave();                                                                         \
        return rc_;                                                                                \
    } while (0)

int fmem_alloc(fmem_pool *p, size_t size, fmem_handle *out)
{
    if (!p || !out)
        return FMEM_EINVAL;
    memset(out, 0, sizeof *out);
    fork_gate_enter();
    int rc = __builtin_expect(p->fork_lost, 0)       ? FMEM_EIO
             : __builtin_expect(p->fork_identity, 0) ? pool_fork_identity(p)
                                                     : 0;
    if (rc == 0)
        rc = p->ops->alloc(p, size, out);
    if (rc == 0 && __builtin_expect(p->copies != NULL, 0) && pool_fork_collides(p, out)) {
        /* its handle would name a copy: take another, then give it back */
        fmem_handle again = {0};
        rc = p->ops->alloc(p, size, &again);
        p->ops->free(p, out);
        *out = again;
    }
    fork_gate_leave();
    return rc;
}

int fmem_free(fmem_pool *p, const fmem_handle *h)
{
    if (!p || !h)
        return FMEM_EINVAL;
    GATED_HANDLE(POOL_FORK_FREE, h, 0, NULL, 0,
                 __builtin_expect(p->fork_identity, 0) && pool_fork_identity(p) ? FMEM_EBUSY
                                                                                : p->ops->free(p, h));
}

int fmem_map(fmem_pool *p, const fmem_handle *h, void **ptr)
{
    if (!ptr)
        return FMEM_EINVAL;
    *ptr = NULL;
    if (!p || !h)
        return FMEM_EINVAL;
    GATED_HANDLE(POOL_FORK_MAP, h, 0, ptr, 0, p->ops->map(p, h, ptr));
}

int fmem_remote(fmem_pool *p, const fmem_handle *h, uint64_t *remote_addr)
{
    if (!remote_addr)
        return FMEM_EINVAL;
    *remote_addr = 0;
    if (!p || !h)
        return FMEM_EINVAL;
    if (!p->ops->remote)
        return FMEM_ENOTSUP;
    GATED_HANDLE(POOL_FORK_REMOTE, h, 0, NULL, 0, p->ops->remote(p, h, remote_addr));
}

int fmem_read(fmem_pool *p, const fmem_handle *h, uint64_t offset, void *dst, size_t len)
{
    if (!p || !h || (!dst && len))
        return FMEM_EINVAL;
    GATED_HANDLE(POOL_FORK_READ, h, offset, dst, len, p->ops->read(p, h, offset, dst, len));
}

int fmem_write(fmem_pool *p, const fmem_handle *h, uint64_t offset, const void *src, size_t len)
{
    if (!p || !h || (!src && len))
        return FMEM_EINVAL;
    GATED_HANDLE(POOL_FORK_WRITE, h, offset, (void *)src, len,
                 p->ops->write(p, h, offset, src, len));
}

int fmem_stats(fmem_pool *p, fmem_stats_t *st)
{
    if (!p || !st)
        return FMEM_EINVAL;
    memset(st, 0, sizeof *st);
    GATED(p->ops->stats(p, st));
}

int fmem_unlink(const char *uri)
{
    struct node_uri *us = calloc(URI_MAX_NODES, sizeof *us);
    if (!us)
        return FMEM_ENOMEM;
    int n = uri_parse(uri, us, URI_MAX_NODES), rc = n < 0 ? n : 0;
    for (int i = 0; i < n; i++) {
        if (us[i].kind == URI_MEM || us[i].kind == URI_ZMEM)
            continue; /* no files */
        char data_path[PATH_MAX + 16];
        snprintf(data_path, sizeof data_path, "%s.data", us[i].path);
        if (unlink(us[i].path) < 0 && rc == 0)
            rc = FMEM_EIO;
        unlink(data_path);
        snprintf(data_path, sizeof data_path, "%s%s", us[i].path, SESSION_SUFFIX);
        unlink(data_path);
    }
    free(us);
    return rc;
}

size_t fmem_size_round(size_t size)
{
    if (size == 0 || size > (SIZE_MAX >> 1) + 1) /* above the largest power of two */
        return 0;
    size_t r = FMEM_CHUNK_SIZE;
    while (r < size)
        r <<= 1;
    return r;
}

const char *fmem_strerror(int err)
{
    switch (err) {
    case FMEM_OK: return "success";
    case FMEM_EINVAL: return "invalid argument";
    case FMEM_ESIZE: return "size is zero or larger than the pool allows";
    case FMEM_ENOMEM: return "the pool has no free block of that size";
    case FMEM_EDOUBLEFREE: return "the block is already free";
    case FMEM_EBADHANDLE: return "the handle does not name an allocation";
    case FMEM_ECORRUPT: return "the pool file is corrupt or not an fmem pool";
    case FMEM_EIO: return "a system call failed";
    case FMEM_EACCES:
        return "access denied: the handle's key does not grant access, or the service does "
               "not admit this user";
    case FMEM_EURI: return "the pool URI cannot be parsed";
    case FMEM_ENOTSUP: return "the transport does not support this operation";
    case FMEM_ERANGE: return "offset or length outside the allocation";
    case FMEM_EBUSY: return "no free user id, or the resource is busy";
    case FMEM_EQUOTA: return "the application's allocation quota is reached";
    case FMEM_ESTALE: return "the service that issued this handle is gone; reopen the pool";
    default: return "unknown fmem error";
    }
}
