/* store_transport.c - the transport of ssd: and zmem: nodes: metadata in
 * private anonymous memory (one-sided operations are CPU atomics, as on
 * mem:), the data area in a store (store.h). A batch runs its operations
 * in order; an operation may not straddle the two parts, and CAS is for
 * metadata only (the protocol never does either). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "store.h"

/* this process's live-statistics page (libfmem/far/stats_pub.c); weak, so
 * that the transports also link without the far-memory part (tests/fuzz) */
__attribute__((weak)) void stats_pub_node_add(struct transport *t);
__attribute__((weak)) void stats_pub_node_remove(struct transport *t);

struct store_transport {
    struct transport t;
    struct store *store;
    size_t map_len;
    bool published; /* in this process's live-statistics page */
};

void store_init(struct store *s, const struct store_ops *ops, const char *kind, uint64_t size)
{
    s->ops = ops;
    s->kind = kind;
    s->size = size;
    pthread_mutex_init(&s->error_mu, NULL);
}

void store_fini(struct store *s)
{
    pthread_mutex_destroy(&s->error_mu);
}

void store_fail(struct store *s, const char *fmt, ...)
{
    atomic_fetch_add(&s->errors, 1);
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s->error_mu);
    vsnprintf(s->last_error, sizeof s->last_error, fmt, ap);
    pthread_mutex_unlock(&s->error_mu);
    va_end(ap);
}

static int data_op(struct store *s, const struct tp_op *op, uint64_t off)
{
    uint64_t t0 = tp_now_ns();
    int rc;
    if (op->kind == TP_READ) {
        rc = s->ops->read(s, off, op->buf, op->len);
        if (rc == 0) {
            atomic_fetch_add_explicit(&s->reads, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->bytes_read, op->len, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->read_ns, tp_now_ns() - t0, memory_order_relaxed);
        }
    } else {
        rc = s->ops->write(s, off, op->buf, op->len);
        if (rc == 0) {
            atomic_fetch_add_explicit(&s->writes, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->bytes_written, op->len, memory_order_relaxed);
            atomic_fetch_add_explicit(&s->write_ns, tp_now_ns() - t0, memory_order_relaxed);
        }
    }
    return rc;
}

static int st_batch(struct transport *t, struct tp_op *ops, size_t n)
{
    struct store_transport *st = (struct store_transport *)t;
    uint64_t meta = t->meta_size;
    for (size_t i = 0; i < n; i++) {
        const struct tp_op *op = &ops[i];
        uint64_t len = op->kind == TP_CAS ? 8 : op->len;
        if (op->off > t->size || len > t->size - op->off)
            return FMEM_EINVAL;
        if (op->kind == TP_CAS && (op->off & 7))
            return FMEM_EINVAL;
        if (op->off < meta && op->off + len > meta)
            return FMEM_EINVAL; /* straddles metadata and data */
        if (op->kind == TP_CAS && op->off >= meta)
            return FMEM_EINVAL; /* no atomics on the store */
    }
    uint64_t rtt = t->rtt_ns, half = rtt / 2;
    tp_delay(half);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (ops[i].off < meta)
            tp_execute_local(t->base, &ops[i]);
        else if (ops[i].len)
            rc = data_op(st->store, &ops[i], ops[i].off - meta);
    }
    tp_delay(rtt - half);
    return rc;
}

static void st_close(struct transport *t)
{
    struct store_transport *st = (struct store_transport *)t;
    if (st->published && stats_pub_node_remove)
        stats_pub_node_remove(t);
    if (st->store)
        st->store->ops->close(st->store);
    if (t->base)
        munmap(t->base, st->map_len);
    free(st);
}

static void st_stats(struct transport *t, fmem_node_stats_t *o)
{
    struct store *s = ((struct store_transport *)t)->store;
    snprintf(o->kind, sizeof o->kind, "%s", s->kind);
    o->capacity_bytes = s->size;
    o->reads = atomic_load(&s->reads);
    o->writes = atomic_load(&s->writes);
    o->bytes_read = atomic_load(&s->bytes_read);
    o->bytes_written = atomic_load(&s->bytes_written);
    o->read_ns = atomic_load(&s->read_ns);
    o->write_ns = atomic_load(&s->write_ns);
    o->errors = atomic_load(&s->errors);
    /* bytes per microsecond = MB/s */
    o->read_mb_s = o->read_ns ? (double)o->bytes_read * 1e3 / (double)o->read_ns : 0;
    o->write_mb_s = o->write_ns ? (double)o->bytes_written * 1e3 / (double)o->write_ns : 0;
    o->read_lat_us = o->reads ? (double)o->read_ns / 1e3 / (double)o->reads : 0;
    o->write_lat_us = o->writes ? (double)o->write_ns / 1e3 / (double)o->writes : 0;
    pthread_mutex_lock(&s->error_mu);
    snprintf(o->last_error, sizeof o->last_error, "%s", s->last_error);
    pthread_mutex_unlock(&s->error_mu);
    s->ops->stats(s, o);
    o->compression_ratio =
        o->held_bytes && o->stored_bytes ? (double)o->stored_bytes / (double)o->held_bytes : 0;
}

static const struct transport_ops store_ops = {
    .batch = st_batch, .close = st_close, .stats = st_stats};

int store_transport_open(struct store *s, uint64_t meta_size, uint64_t rtt_ns,
                         struct transport **out)
{
    struct store_transport *st = calloc(1, sizeof *st);
    if (!st) {
        s->ops->close(s);
        return FMEM_ENOMEM;
    }
    st->store = s;
    st->map_len = meta_size;
    /* like mem:: anonymous, only what is touched costs */
    void *m = mmap(NULL, meta_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
        st_close(&st->t);
        return FMEM_ENOMEM;
    }
    st->t.ops = &store_ops;
    st->t.base = m;
    st->t.data_apart = true;
    st->t.size = meta_size + s->size;
    st->t.meta_size = meta_size;
    st->t.rtt_ns = rtt_ns;
    st->t.rtt_mode = TP_RTT_SPIN;
    st->t.name = s->kind;
    if (stats_pub_node_add) {
        stats_pub_node_add(&st->t);
        st->published = true;
    }
    *out = &st->t;
    return 0;
}
