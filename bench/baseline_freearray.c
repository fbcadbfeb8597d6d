/* baseline_freearray.c - the one-sided baseline of CXL-SHM / FineMem's
 * "Premmap-One-sided": one 8-byte entry per 4 KiB chunk (0 = free, else the
 * owner's tag), kept in a region reached only through the transport.
 *
 * Allocating 2^k chunks scans the array from its start, SCAN_ENTRIES
 * entries (or one whole run, if larger) per READ, takes the first aligned
 * run of free entries with one CAS per chunk (all of a run's CAS posted as
 * one batch), undoes a partial claim and scans on. Freeing writes the
 * entries back to 0 in one WRITE. */
#include <stdlib.h>

#include "bench.h"
#include "transport.h"

#define SCAN_ENTRIES 64 /* entries per READ: one round trip */

struct freearray {
    struct transport *tp;
    uint64_t nchunks;
    const _Atomic bool *abort;
};

static _Atomic uint64_t tag_next;
static _Thread_local uint64_t tl_tag;

static uint64_t my_tag(void)
{
    if (!tl_tag)
        tl_tag = atomic_fetch_add_explicit(&tag_next, 1, memory_order_relaxed) + 1;
    return tl_tag;
}

static int fa_open(const struct alloc_params *p, void **self)
{
    struct freearray *fa = calloc(1, sizeof *fa);
    if (!fa)
        return FMEM_ENOMEM;
    fa->nchunks = p->pool_bytes / CHUNK_BYTES;
    fa->abort = p->abort;
    struct shm_params sp = {.path = NULL, .meta_size = (fa->nchunks * 8 + 4095) & ~UINT64_C(4095),
                            .data_size = 4096,
                            .create = 1, .rtt_ns = p->rtt_ns, .rtt_mode = p->rtt_mode};
    int rc = shm_transport_open(&sp, &fa->tp, NULL); /* a memfd reads as zeros: all free */
    if (rc) {
        free(fa);
        return rc;
    }
    *self = fa;
    return 0;
}

static void fa_close(void *self)
{
    struct freearray *fa = self;
    tp_close(fa->tp);
    free(fa);
}

static unsigned log2_chunks(size_t size)
{
    unsigned k = 0;
    while ((CHUNK_BYTES << k) < size)
        k++;
    return k;
}

static bool run_free(const uint64_t *e, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (e[i])
            return false;
    return true;
}

/* CAS entries [first, first+n) from 0 to tag in one batch; on a partial
 * failure write the ones won back to 0. 1: claimed, 0: lost (seen[] gets the
 * values found), <0: error. */
static int claim(struct freearray *fa, uint64_t first, uint64_t n, uint64_t tag,
                 struct tp_op *ops, uint64_t *seen)
{
    for (uint64_t i = 0; i < n; i++)
        ops[i] = (struct tp_op){.kind = TP_CAS, .off = 8 * (first + i), .expect = 0, .desired = tag};
    int rc = tp_batch(fa->tp, ops, n);
    if (rc)
        return rc;
    uint64_t lost = 0;
    for (uint64_t i = 0; i < n; i++)
        lost += ops[i].old != 0;
    if (!lost)
        return 1;
    /* undo: reuse ops[] as WRITEs of 0 to the entries won */
    static const uint64_t zero;
    uint64_t nundo = 0;
    for (uint64_t i = 0; i < n; i++) {
        seen[i] = ops[i].old;
        if (ops[i].old == 0)
            ops[nundo++] = (struct tp_op){.kind = TP_WRITE, .off = 8 * (first + i),
                                          .buf = (void *)&zero, .len = 8};
    }
    rc = tp_batch(fa->tp, ops, nundo);
    return rc ? rc : 0;
}

static int fa_alloc(void *self, size_t size, fmem_handle *out, struct op_cost *c)
{
    struct freearray *fa = self;
    uint64_t n = UINT64_C(1) << log2_chunks(size);
    struct trace_mark m;
    trace_mark(&m);
    if (n > fa->nchunks) {
        trace_cost(&m, c);
        return FMEM_ENOMEM;
    }
    uint64_t win = n > SCAN_ENTRIES ? n : SCAN_ENTRIES;
    uint64_t buf_local[SCAN_ENTRIES];
    struct tp_op ops_local[SCAN_ENTRIES];
    uint64_t *buf = win <= SCAN_ENTRIES ? buf_local : malloc(win * sizeof *buf);
    struct tp_op *ops = n <= SCAN_ENTRIES ? ops_local : malloc(n * sizeof *ops);
    int rc = FMEM_ENOMEM;
    if (!buf || !ops) {
        rc = FMEM_EIO;
        goto out;
    }
    uint64_t tag = my_tag();
    for (uint64_t base = 0; base < fa->nchunks && rc == FMEM_ENOMEM; base += win) {
        if (fa->abort && atomic_load_explicit(fa->abort, memory_order_relaxed)) {
            rc = BENCH_EABORT;
            break;
        }
        uint64_t cnt = fa->nchunks - base < win ? fa->nchunks - base : win;
        int r = tp_read(fa->tp, 8 * base, buf, 8 * cnt);
        if (r) {
            rc = r;
            break;
        }
        for (uint64_t off = 0; off + n <= cnt; off += n) {
            if (!run_free(buf + off, n))
                continue;
            r = claim(fa, base + off, n, tag, ops, buf + off);
            if (r < 0) {
                rc = r;
                break;
            }
            if (r == 1) {
                *out = (fmem_handle){.addr = (base + off) * CHUNK_BYTES, .length = n * CHUNK_BYTES};
                rc = 0;
                break;
            }
        }
    }
out:
    if (buf != buf_local)
        free(buf);
    if (ops != ops_local)
        free(ops);
    trace_cost(&m, c);
    return rc;
}

static int fa_free(void *self, const fmem_handle *h, struct op_cost *c)
{
    struct freearray *fa = self;
    struct trace_mark m;
    trace_mark(&m);
    *c = (struct op_cost){0};
    uint64_t first = h->addr / CHUNK_BYTES, n = h->length / CHUNK_BYTES;
    if (h->addr % CHUNK_BYTES || n == 0 || first >= fa->nchunks || n > fa->nchunks - first)
        return FMEM_EBADHANDLE;
    uint64_t *zeros = calloc(n, 8);
    if (!zeros)
        return FMEM_EIO;
    int rc = tp_write(fa->tp, 8 * first, zeros, 8 * n);
    free(zeros);
    trace_cost(&m, c);
    return rc;
}

static void fa_set_rtt(void *self, uint64_t rtt_ns)
{
    struct freearray *fa = self;
    fa->tp->rtt_ns = rtt_ns;
}

const struct allocator alloc_freearray = {
    .name = "free-array",
    .what = "one-sided free array, 8 B per chunk, first-fit scan (CXL-SHM style)",
    .open = fa_open,
    .close = fa_close,
    .alloc = fa_alloc,
    .free = fa_free,
    .set_rtt = fa_set_rtt,
};
