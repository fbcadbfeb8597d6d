/* store.h - a data store behind a memory node (ssd:, zmem:).
 *
 * A node of such a backend keeps its metadata (pool header, section and
 * span headers, keys, redo logs, user slots) in this process's anonymous
 * memory, so the allocation protocol's CAS run on CPU atomics exactly as
 * on a mem: pool; only the data area - what fmem_read/fmem_write and
 * regions move - lives in the store (docs/backends.md). */
#ifndef FMEM_STORE_H
#define FMEM_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "fmem.h"
#include "transport.h"
#include "uri.h"

struct store;
struct store_ops {
    /* [off, off+len) of the data area; 0 or FMEM_E* (the store has
     * recorded why in its last_error). Called by many threads at once. */
    int (*read)(struct store *s, uint64_t off, void *dst, size_t len);
    int (*write)(struct store *s, uint64_t off, const void *src, size_t len);
    /* held_bytes, stored_bytes, detail (the counters are filled in by the
     * caller) */
    void (*stats)(struct store *s, fmem_node_stats_t *st);
    void (*close)(struct store *s);
};

struct store {
    const struct store_ops *ops;
    const char *kind; /* "ssd", "zmem" */
    uint64_t size;    /* data bytes */
    _Atomic uint64_t reads, writes, bytes_read, bytes_written, read_ns, write_ns, errors;
    pthread_mutex_t error_mu;
    char last_error[160]; /* error_mu */
};

/* Set up the common part / take it down (the store's open and close). */
void store_init(struct store *s, const struct store_ops *ops, const char *kind, uint64_t size);
void store_fini(struct store *s);

/* Record why an operation failed (kept for fmem_node_stats). */
void store_fail(struct store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The backends. Each sets the URI error (uri_set_error) when it fails. */
int ssd_store_open(const struct node_uri *u, uint64_t data_size, struct store **out);
int zmem_store_open(const struct node_uri *u, uint64_t data_size, struct store **out);

/* A transport whose metadata (meta_size bytes) is private memory and
 * whose data is `s` (the transport owns it from now on, also on failure). */
int store_transport_open(struct store *s, uint64_t meta_size, uint64_t rtt_ns,
                         struct transport **out);

#endif
