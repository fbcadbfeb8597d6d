/* transport.h - the one-sided operations the allocation protocol is written
 * against: READ, WRITE and 64-bit CAS on (offset, length) of a memory node,
 * posted in batches. A batch costs one network round trip. */
#ifndef FMEM_TRANSPORT_H
#define FMEM_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum tp_kind { TP_READ, TP_WRITE, TP_CAS };

struct tp_op {
    enum tp_kind kind;
    uint64_t off;     /* byte offset in the node's pool file */
    void *buf;        /* READ: destination; WRITE: source */
    size_t len;       /* READ/WRITE length */
    uint64_t expect;  /* CAS */
    uint64_t desired; /* CAS */
    uint64_t old;     /* CAS: value found (== expect on success) */
    uint32_t rkey;    /* verbs: key of the window to use; 0: the transport's
                       * own key for that range (metadata, window keys) */
    bool trail;       /* an 8-byte WRITE or a CAS at the end of a batch that
                       * the batch need not wait for (verbs: unsignaled, done
                       * before the thread's next batch on the transport); a
                       * trailing CAS's result is never known (old = expect) */
};

/* Counters of the operations one thread issued; the protocol and the
 * benchmark read them to report CAS per allocation and retries. */
struct tp_trace {
    uint64_t cas, cas_fail, reads, writes, round_trips;
    uint64_t log_cas; /* of `cas`, the ones that flushed a redo log */
    uint64_t own_frees; /* frees of own allocations in one chain (alloc.c) */
    uint64_t snap_hits; /* commits that knew the entry (redolog.c: span_snap) */
};
extern _Thread_local struct tp_trace tp_trace;

struct transport;
struct fmem_node_stats_t;
struct transport_ops {
    /* Execute ops in order, as one round trip. Returns 0 or FMEM_E*. */
    int (*batch)(struct transport *t, struct tp_op *ops, size_t n);
    void (*close)(struct transport *t);
    /* Optional: the backend's own figures (fmem_node_stats). */
    void (*stats)(struct transport *t, struct fmem_node_stats_t *st);
    /* Optional. Post one CAS or 8-byte WRITE without waiting for it
     * (verbs: unsignaled, held until the queue pair's next chain, which it
     * leads, or sent at once if op->trail); the calling thread's next batch
     * on this transport executes after it and collects its completion.
     * 0: posted (its result is never known); 1: done already (op->old
     * set); <0: error. */
    int (*post)(struct transport *t, struct tp_op *op);
    /* Optional. Posts that may not have executed (their queue pair failed
     * or was reset before a later batch completed), since opened. */
    uint64_t (*post_lost)(struct transport *t);
    /* Optional, with post. A ticket naming every post the calling thread
     * has made so far (on its queue pair), and whether all of them have
     * executed as seen from the calling thread: its own queue pair's next
     * batch runs after them, another's only once a batch of theirs has
     * completed after them. Without these, posts execute when made. */
    uint64_t (*post_ticket)(struct transport *t);
    bool (*post_landed)(struct transport *t, uint64_t ticket);
};

/* Execute one operation on memory this process maps (shm.c). */
void tp_execute_local(char *base, struct tp_op *op);

/* How the injected round trip is waited for (URI key rtt_mode). */
enum tp_rtt_mode {
    TP_RTT_SPIN, /* the calling thread spins on the clock, yielding (tp_delay) */
    TP_RTT_NIC,  /* an emulator thread plays the NIC; the caller sleeps */
};

struct transport {
    const struct transport_ops *ops;
    uint64_t size;     /* bytes addressable */
    uint64_t meta_size; /* of which metadata (the data follows) */
    void *base;        /* direct mapping of the whole pool, or NULL */
    bool data_apart;   /* base maps the metadata only; the data is reached
                        * through batch alone (ssd:, zmem:) */
    uint64_t remote_base; /* verbs: remote address of offset 0, else 0 */
    uint64_t wkeys_off; /* verbs: window-key table (wkeys.h) at these offsets */
    uint64_t wkeys_size; /*  (0: keys are in the capability table) */
    bool keys_bound_qp; /* verbs type-2 windows: a block's key works from
                         * one queue pair only (not the allocator's) */
    uint64_t rtt_ns;   /* injected delay per round trip */
    enum tp_rtt_mode rtt_mode;
    uint64_t bw;       /* emulated link bandwidth, bytes/s; 0: none (shm) */
    _Atomic uint64_t link_free_ns; /* the link is busy until then (bw) */
    const char *name;  /* "shm", ... */
    /* totals over all threads, for fmem_stats */
    _Atomic uint64_t n_cas, n_cas_fail, n_reads, n_writes, n_rtts;
    _Atomic uint64_t n_logs; /* of n_cas, the ones that flushed a redo log */
};

int tp_batch(struct transport *t, struct tp_op *ops, size_t n);
int tp_read(struct transport *t, uint64_t off, void *dst, size_t len);
int tp_write(struct transport *t, uint64_t off, const void *src, size_t len);
/* Data access with a block's key (checked by the NIC over verbs). */
int tp_read_key(struct transport *t, uint64_t off, void *dst, size_t len, uint32_t rkey);
int tp_write_key(struct transport *t, uint64_t off, const void *src, size_t len, uint32_t rkey);
/* 1 if swapped, 0 if not (*old = value found), or negative FMEM_E*. */
int tp_cas(struct transport *t, uint64_t off, uint64_t expect, uint64_t desired,
           uint64_t *old);
/* A CAS or an 8-byte WRITE posted without waiting (see transport_ops.post;
 * a batch of one where the transport cannot): 0 posted, 1 done (op->old
 * set), <0 error. Counted as a CAS or WRITE but not as a round trip. */
int tp_post(struct transport *t, struct tp_op *op);
uint64_t tp_post_lost(struct transport *t);
/* transport_ops.post_ticket and post_landed (0, true without them) */
uint64_t tp_post_ticket(struct transport *t);
bool tp_post_landed(struct transport *t, uint64_t ticket);
void tp_close(struct transport *t);

/* Wait `ns` nanoseconds without holding the core (models a network wait). */
void tp_delay(uint64_t ns);
/* Wait until tp_now_ns() >= `when` (an emulated link's deadline, shm.c):
 * long waits sleep to an absolute deadline with a timer slack of 1 ns and
 * spin through the last TP_WAIT_MARGIN_NS; short ones spin. Neither
 * yields (see transport.c). How late the caller got back past `when` is
 * counted (tp_wait_stats). */
void tp_wait_until(uint64_t when);
#define TP_WAIT_MARGIN_NS 20000u
/* Link waits of this process so far and their summed lateness: the time
 * the scheduler, not the emulated link, added to transfers. */
void tp_wait_stats(uint64_t *waits, uint64_t *late_ns);
uint64_t tp_now_ns(void); /* CLOCK_MONOTONIC */

/* ---- NIC emulation (nic.c) ---------------------------------------------
 * One emulator thread per process plays the network: a request is posted,
 * its poster sleeps, the emulator runs the request's `exec` when it reaches
 * the memory node and wakes the poster when the answer is back. */
struct nic;
struct nic_req {
    /* set by the poster (nic_call stamps the times) */
    void (*exec)(struct nic_req *r); /* on the emulator thread, at exec_at */
    uint64_t exec_at;  /* the request reaches the memory node */
    uint64_t done_at;  /* the answer is back; exec may move it later */
    uint64_t back_ns;  /* the answer's flight time (for exec) */
    /* the emulator's */
    struct nic_req *next;
    uint64_t seq;
    bool executed;
    _Atomic uint32_t state;
};
/* Take a reference on the process's emulator (started on first use). */
int nic_acquire(struct nic **out);
void nic_release(struct nic *n);
/* Post `r`, reaching the memory node `to_node_ns` from now and answered
 * `back_ns` after its exec; sleep until the answer is back. */
void nic_call(struct nic *n, struct nic_req *r, uint64_t to_node_ns, uint64_t back_ns);
/* The emulator's figures since the process started it (cumulative). */
struct nic_stats {
    uint64_t requests;   /* completed */
    uint64_t late_ns;    /* sum over completions of (actual - modeled) */
    uint64_t late_max_ns;
    uint64_t wake_calls; /* futex wake syscalls issued */
    uint64_t woken;      /* sleepers woken */
    uint64_t cpu_ns;     /* CPU time of the emulator thread */
};
void nic_get_stats(struct nic_stats *st);

/* ---- shared-memory transport -------------------------------------------
 * A pool is two files mapped back to back: the metadata (pool header,
 * headers, keys, logs) and the data. Applications of a service are given the
 * data file only, never the metadata. */
struct shm_params {
    const char *path;   /* metadata file; data in "<path>.data"; NULL: private
                         * anonymous memory (mem:) */
    uint64_t meta_size; /* when creating: bytes of each part */
    uint64_t data_size;
    int create;         /* create the files when absent */
    uint64_t rtt_ns;
    enum tp_rtt_mode rtt_mode;
    uint64_t bw;        /* emulated link bandwidth (bytes/s), 0: none */
    bool from_fds;      /* map these open files instead (the transport takes */
    int meta_fd;        /*  ownership of them when it opens; on failure the */
                        /*  caller keeps them) */
    int data_fd;
    bool check_owner;   /* a daemon's pool: the files must belong to `owner` */
    uid_t owner;        /*  (or to this process's user) and no one else may
                         *  write them (pool_files.h) */
};
/* Open or create the backing files and map them. *created tells which. */
int shm_transport_open(const struct shm_params *p, struct transport **out, int *created);
/* The files behind a shm transport (for handing to other processes); -1
 * for a private (mem:) pool, which has none. */
int shm_transport_meta_fd(const struct transport *t);
int shm_transport_data_fd(const struct transport *t);
/* A shm transport over files, which other processes may map too. */
bool shm_transport_shared(const struct transport *t);
/* Map the pool's files again at a new address (t->base changes); the old
 * mapping stays where it was and is now the caller's: its range is
 * returned. For a fork child (pool_fork.c). */
int shm_transport_remap(struct transport *t, void **old_start, size_t *old_len);

#endif
