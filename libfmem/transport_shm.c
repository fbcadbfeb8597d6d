/* transport_shm.c - the shared-memory transport: the pool is a memfd (one
 * process) or a file on /dev/shm or hugetlbfs (several processes), mapped
 * whole; one-sided operations are memcpy and CPU atomics, optionally delayed
 * by an injected round trip so that contention behaves as over a network. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmem.h"
#include "transport.h"

struct shm_transport {
    struct transport t;
    int fd;
};

static int shm_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    uint64_t half = t->rtt_ns / 2;
    for (size_t i = 0; i < n; i++) {
        const struct tp_op *op = &ops[i];
        uint64_t len = op->kind == TP_CAS ? 8 : op->len;
        if (op->off > t->size || len > t->size - op->off)
            return FMEM_EINVAL;
        if (op->kind == TP_CAS && (op->off & 7))
            return FMEM_EINVAL;
    }
    tp_delay(half); /* request in flight */
    char *base = t->base;
    for (size_t i = 0; i < n; i++) {
        struct tp_op *op = &ops[i];
        switch (op->kind) {
        case TP_READ:
            if (op->len == 8 && !(op->off & 7))
                *(uint64_t *)op->buf = __atomic_load_n((uint64_t *)(base + op->off),
                                                       __ATOMIC_ACQUIRE);
            else
                memcpy(op->buf, base + op->off, op->len);
            break;
        case TP_WRITE:
            if (op->len == 8 && !(op->off & 7))
                __atomic_store_n((uint64_t *)(base + op->off), *(uint64_t *)op->buf,
                                 __ATOMIC_RELEASE);
            else
                memcpy(base + op->off, op->buf, op->len);
            break;
        case TP_CAS: {
            uint64_t exp = op->expect;
            __atomic_compare_exchange_n((uint64_t *)(base + op->off), &exp, op->desired,
                                        false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
            op->old = exp;
            break;
        }
        }
    }
    tp_delay(t->rtt_ns - half); /* response in flight */
    return 0;
}

static void shm_close(struct transport *t)
{
    struct shm_transport *s = (struct shm_transport *)t;
    if (t->base)
        munmap(t->base, t->size);
    if (s->fd >= 0)
        close(s->fd);
    free(s);
}

static const struct transport_ops shm_ops = {.batch = shm_batch, .close = shm_close};

int shm_transport_fd(const struct transport *t)
{
    return ((const struct shm_transport *)t)->fd;
}

int shm_transport_open(const struct shm_params *p, struct transport **out, int *created)
{
    int fd, made = 0;
    if (!p->path) {
        fd = memfd_create("fmem-pool", MFD_CLOEXEC);
        made = 1;
    } else {
        fd = open(p->path, O_RDWR | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && p->create && p->size) {
            fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
            made = fd >= 0;
            if (fd < 0 && errno == EEXIST) /* lost a race with another creator */
                fd = open(p->path, O_RDWR | O_CLOEXEC);
        }
    }
    if (fd < 0)
        return FMEM_EIO;
    uint64_t size;
    if (made) {
        if (ftruncate(fd, (off_t)p->size) < 0)
            goto fail;
        size = p->size;
    } else {
        struct stat st;
        if (fstat(fd, &st) < 0)
            goto fail;
        size = (uint64_t)st.st_size;
        if (size == 0) { /* creator has not sized it yet, or not a pool */
            close(fd);
            return FMEM_ECORRUPT;
        }
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED)
        goto fail;
    struct shm_transport *s = calloc(1, sizeof *s);
    if (!s) {
        munmap(base, size);
        close(fd);
        return FMEM_ENOMEM;
    }
    s->fd = fd;
    s->t.ops = &shm_ops;
    s->t.size = size;
    s->t.base = base;
    s->t.rtt_ns = p->rtt_ns;
    s->t.name = "shm";
    *out = &s->t;
    if (created)
        *created = made;
    return 0;
fail:;
    int e = errno;
    if (made && p->path)
        unlink(p->path);
    close(fd);
    errno = e;
    return FMEM_EIO;
}
