/* shm.c - the shared-memory transport: the pool is private
 * anonymous memory (mem:, one process) or a file on /dev/shm or hugetlbfs
 * (several processes), mapped whole; one-sided operations are memcpy and CPU atomics, optionally delayed
 * by an injected round trip so that contention behaves as over a network.
 * The delay is waited for by the caller spinning (rtt_mode=spin: half the
 * round trip, the operations, the other half), or by the NIC emulator
 * (rtt_mode=nic, nic.c: the caller sleeps, the emulator runs the
 * operations half a round trip after posting). With a bandwidth limit
 * (bw=) every batch also waits for its bytes to pass the node's emulated
 * link (shm_batch_bw), whatever the rtt_mode. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fmem.h"
#include "pool_files.h"
#include "transport.h"

struct shm_transport {
    struct transport t;
    int meta_fd, data_fd;
    void *map_base; /* the reservation holding both mappings */
    uint64_t map_len;
    struct nic *nic; /* rtt_mode=nic: the process's emulator */
};

/* One operation on memory this process maps, as a NIC executes it (also
 * the metadata of the ssd: and zmem: stores, store_transport.c). */
void tp_execute_local(char *base, struct tp_op *op)
{
    switch (op->kind) {
    case TP_READ:
        if (!(op->off & 7) && !(op->len & 7) && !((uintptr_t)op->buf & 7)) {
            /* word by word: other clients CAS these words meanwhile (a
             * NIC reads them the same way: each word whole, the block
             * not atomically) */
            const uint64_t *src = (const uint64_t *)(base + op->off);
            uint64_t *dst = op->buf;
            for (size_t w = 0; w < op->len / 8; w++)
                dst[w] = __atomic_load_n(&src[w], __ATOMIC_ACQUIRE);
        } else {
            memcpy(op->buf, base + op->off, op->len);
        }
        break;
    case TP_WRITE:
        if (op->len == 8 && !(op->off & 7))
            __atomic_store_n((uint64_t *)(base + op->off), *(uint64_t *)op->buf, __ATOMIC_RELEASE);
        else
            memcpy(base + op->off, op->buf, op->len);
        break;
    case TP_CAS: {
        uint64_t exp = op->expect;
        __atomic_compare_exchange_n((uint64_t *)(base + op->off), &exp, op->desired, false,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        op->old = exp;
        break;
    }
    }
}

/* The operations of a batch, as the memory node executes them. */
static void shm_execute(char *base, struct tp_op *ops, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tp_execute_local(base, &ops[i]);
}

struct shm_req {
    struct nic_req r; /* first */
    char *base;
    struct tp_op *ops;
    size_t n;
};

static void shm_exec(struct nic_req *r)
{
    struct shm_req *q = (struct shm_req *)r;
    shm_execute(q->base, q->ops, q->n);
}

/* A link of t->bw bytes/s between this process and the node: the batch's
 * bytes occupy it for len/bw after everything queued before them, then the
 * answer takes the rest of the round trip. Each node has its own link, so
 * several nodes are independent paths and their bandwidths add up. */
static void shm_batch_bw(struct transport *t, struct tp_op *ops, size_t n)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += ops[i].kind == TP_CAS ? 8 : ops[i].len;
    uint64_t dur = (uint64_t)((unsigned __int128)bytes * 1000000000u / t->bw);
    uint64_t half = t->rtt_ns / 2, now = tp_now_ns();
    uint64_t start, busy = atomic_load_explicit(&t->link_free_ns, memory_order_relaxed);
    do
        start = busy > now + half ? busy : now + half; /* the request reaches the link */
    while (!atomic_compare_exchange_weak_explicit(&t->link_free_ns, &busy, start + dur,
                                                  memory_order_relaxed, memory_order_relaxed));
    tp_wait_until(start);
    shm_execute(t->base, ops, n);
    tp_wait_until(start + dur + (t->rtt_ns - half));
}

static int shm_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    struct shm_transport *s = (struct shm_transport *)t;
    uint64_t rtt = t->rtt_ns, half = rtt / 2;
    for (size_t i = 0; i < n; i++) {
        const struct tp_op *op = &ops[i];
        uint64_t len = op->kind == TP_CAS ? 8 : op->len;
        if (op->off > t->size || len > t->size - op->off)
            return FMEM_EINVAL;
        if (op->kind == TP_CAS && (op->off & 7))
            return FMEM_EINVAL;
    }
    if (t->bw) {
        shm_batch_bw(t, ops, n);
        return 0;
    }
    if (rtt && s->nic) {
        struct shm_req q = {.r.exec = shm_exec, .base = t->base, .ops = ops, .n = n};
        nic_call(s->nic, &q.r, half, rtt - half);
        return 0;
    }
    tp_delay(half); /* request in flight */
    shm_execute(t->base, ops, n);
    tp_delay(rtt - half); /* response in flight */
    return 0;
}

static void shm_close(struct transport *t)
{
    struct shm_transport *s = (struct shm_transport *)t;
    nic_release(s->nic);
    if (t->base)
        munmap(s->map_base, s->map_len);
    if (s->meta_fd >= 0)
        close(s->meta_fd);
    if (s->data_fd >= 0)
        close(s->data_fd);
    free(s);
}

static const struct transport_ops shm_ops = {.batch = shm_batch, .close = shm_close};


/* -1 also for a transport of another kind (e.g. ssd:, zmem:) */
int shm_transport_meta_fd(const struct transport *t)
{
    return t->ops == &shm_ops ? ((const struct shm_transport *)t)->meta_fd : -1;
}

int shm_transport_data_fd(const struct transport *t)
{
    return t->ops == &shm_ops ? ((const struct shm_transport *)t)->data_fd : -1;
}

static uint64_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Map metadata and data back to back, the data 2 MiB aligned. Without
 * files (mem:) both are private anonymous memory: the pool belongs to this
 * process alone, and a fork() child gets a copy-on-write snapshot of all
 * of it - headers, logs and data - which is what makes every allocation in
 * it behave as plain memory across fork (docs/far-memory.md). */
static int map_pool(struct shm_transport *s, uint64_t meta, uint64_t data)
{
    const uint64_t align = 2u << 20;
    s->map_len = meta + data + align;
    char *r = mmap(NULL, s->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return FMEM_EIO;
    s->map_base = r;
    uintptr_t d = ((uintptr_t)r + meta + align - 1) & ~(uintptr_t)(align - 1);
    char *base = (char *)d - meta;
    if (s->meta_fd < 0) {
        if (mmap(base, meta + data, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED) {
            munmap(r, s->map_len);
            return FMEM_EIO;
        }
        /* 2 MiB pages for the data where the kernel offers them: a fault
         * per 2 MiB instead of per 4 KiB, and fork() copies one entry for
         * each. Blocks are packed into 2 MiB sections, so little is lost. */
        madvise(base + meta, data, MADV_HUGEPAGE);
    } else if (mmap(base, meta, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->meta_fd, 0) ==
                   MAP_FAILED ||
               mmap(base + meta, data, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->data_fd,
                    0) == MAP_FAILED) {
        munmap(r, s->map_len);
        return FMEM_EIO;
    }
    s->t.base = base;
    return 0;
}

bool shm_transport_shared(const struct transport *t)
{
    return t->ops == &shm_ops && ((const struct shm_transport *)t)->meta_fd >= 0;
}

int shm_transport_remap(struct transport *t, void **old_start, size_t *old_len)
{
    struct shm_transport *s = (struct shm_transport *)t;
    void *map_base = s->map_base;
    size_t map_len = s->map_len;
    int rc = map_pool(s, t->meta_size, t->size - t->meta_size);
    if (rc) {
        s->map_base = map_base;
        s->map_len = map_len;
        return rc;
    }
    *old_start = map_base;
    *old_len = map_len;
    return 0;
}

int shm_transport_open(const struct shm_params *p, struct transport **out, int *created)
{
    struct shm_transport *s = calloc(1, sizeof *s);
    if (!s)
        return FMEM_ENOMEM;
    s->meta_fd = s->data_fd = -1;
    int made = 0, rc = 0;
    if (p->from_fds) {
        s->meta_fd = p->meta_fd;
        s->data_fd = p->data_fd;
        if ((rc = pool_files_check(s->meta_fd, p->check_owner, p->owner)) == 0)
            rc = pool_files_check(s->data_fd, p->check_owner, p->owner);
    } else if (!p->path) {
        made = 1; /* private memory, no files */
    } else {
        rc = pool_files_open(p, &s->meta_fd, &s->data_fd, &made);
    }
    uint64_t meta = 0, data = 0;
    if (rc == 0 && made) {
        /* pool_files_open() sized and reserved a named pool's files; a
         * private pool is anonymous memory (only what is used costs) */
        meta = p->meta_size;
        data = p->data_size;
        if (!meta || !data)
            rc = FMEM_EINVAL;
    } else if (rc == 0) {
        /* a creator may not have sized the files yet */
        for (int i = 0; i < 200; i++) {
            meta = file_size(s->meta_fd);
            data = file_size(s->data_fd);
            if (meta && data)
                break;
            usleep(10000);
        }
        if (!meta || !data)
            rc = FMEM_ECORRUPT;
        else if (meta % 4096 || meta < 4096 || data % 4096)
            rc = FMEM_ECORRUPT; /* no pool has such sizes (and it could not be mapped) */
    }
    if (rc == 0)
        rc = map_pool(s, meta, data);
    if (rc == 0 && p->rtt_mode == TP_RTT_NIC)
        rc = nic_acquire(&s->nic);
    if (rc) {
        int e = errno;
        if (made && p->path) /* e.g. no huge pages to back the mapping */
            pool_files_unlink(p->path);
        if (p->from_fds) /* still the caller's */
            s->meta_fd = s->data_fd = -1;
        shm_close(&s->t);
        errno = e;
        return rc;
    }
    s->t.ops = &shm_ops;
    s->t.size = meta + data;
    s->t.meta_size = meta;
    s->t.rtt_ns = p->rtt_ns;
    s->t.rtt_mode = p->rtt_mode;
    s->t.bw = p->bw;
    s->t.name = "shm";
    *out = &s->t;
    if (created)
        *created = made;
    return 0;
}
