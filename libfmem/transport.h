/* transport.h - the one-sided operations the allocation protocol is written
 * against: READ, WRITE and 64-bit CAS on (offset, length) of a memory node,
 * posted in batches. A batch costs one network round trip. */
#ifndef FMEM_TRANSPORT_H
#define FMEM_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum tp_kind { TP_READ, TP_WRITE, TP_CAS };

struct tp_op {
    enum tp_kind kind;
    uint64_t off;     /* byte offset in the node's pool file */
    void *buf;        /* READ: destination; WRITE: source */
    size_t len;       /* READ/WRITE length */
    uint64_t expect;  /* CAS */
    uint64_t desired; /* CAS */
    uint64_t old;     /* CAS: value found (== expect on success) */
};

/* Counters of the operations one thread issued; the protocol and the
 * benchmark read them to report CAS per allocation and retries. */
struct tp_trace {
    uint64_t cas, cas_fail, reads, writes, round_trips;
    uint64_t log_cas; /* of `cas`, the ones that flushed a redo log */
};
extern _Thread_local struct tp_trace tp_trace;

struct transport;
struct transport_ops {
    /* Execute ops in order, as one round trip. Returns 0 or FMEM_E*. */
    int (*batch)(struct transport *t, struct tp_op *ops, size_t n);
    void (*close)(struct transport *t);
};

struct transport {
    const struct transport_ops *ops;
    uint64_t size;     /* bytes addressable */
    uint64_t meta_size; /* of which metadata (the data follows) */
    void *base;        /* direct mapping of the whole pool, or NULL */
    uint64_t rtt_ns;   /* injected delay per round trip */
    const char *name;  /* "shm", ... */
    /* totals over all threads, for fmem_stats */
    _Atomic uint64_t n_cas, n_cas_fail, n_reads, n_writes, n_rtts;
};

int tp_batch(struct transport *t, struct tp_op *ops, size_t n);
int tp_read(struct transport *t, uint64_t off, void *dst, size_t len);
int tp_write(struct transport *t, uint64_t off, const void *src, size_t len);
/* 1 if swapped, 0 if not (*old = value found), or negative FMEM_E*. */
int tp_cas(struct transport *t, uint64_t off, uint64_t expect, uint64_t desired,
           uint64_t *old);
void tp_close(struct transport *t);

/* Wait `ns` nanoseconds without holding the core (models a network wait). */
void tp_delay(uint64_t ns);

/* ---- shared-memory transport -------------------------------------------
 * A pool is two files mapped back to back: the metadata (pool header,
 * headers, keys, logs) and the data. Applications of a service are given the
 * data file only, never the metadata. */
struct shm_params {
    const char *path;   /* metadata file; data in "<path>.data"; NULL: memfds */
    uint64_t meta_size; /* when creating: bytes of each part */
    uint64_t data_size;
    int create;         /* create the files when absent */
    uint64_t rtt_ns;
    bool from_fds;      /* map these open files instead (the transport takes */
    int meta_fd;        /*  ownership of them) */
    int data_fd;
};
/* Open or create the backing files and map them. *created tells which. */
int shm_transport_open(const struct shm_params *p, struct transport **out, int *created);
/* The files behind a shm transport (for handing to other processes). */
int shm_transport_meta_fd(const struct transport *t);
int shm_transport_data_fd(const struct transport *t);

#endif
