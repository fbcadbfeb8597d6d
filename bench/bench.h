/* bench.h - the pieces of fmem-bench: allocator adapters (fmem and the
 * in-tree baselines behind one interface), workloads, the latency
 * histogram, the runner that drives one (allocator, workload, threads)
 * configuration, and the report. */
#ifndef FMEM_BENCH_H
#define FMEM_BENCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clock_rng.h" /* time and random numbers */
#include "fmem.h"
#include "transport.h" /* enum tp_rtt_mode */

/* Returned by an adapter when the run's abort flag cut a call short. */
#define BENCH_EABORT (-100)

#define CHUNK_BYTES ((uint64_t)4096)

/* ---- latency histogram (hist.c) -----------------------------------------
 * Log-linear: exact below 64 ns, then 64 buckets per power of two, so a
 * reported percentile (bucket midpoint) is within 0.8 % of the true value. */
#define HIST_SUB_BITS 6
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_MAX_EXP 46 /* values up to 2^47 ns (~39 h) */
#define HIST_BUCKETS (HIST_SUB * (HIST_MAX_EXP - HIST_SUB_BITS + 2))

struct hist {
    uint64_t count, sum, max;
    uint64_t b[HIST_BUCKETS];
};
void hist_add(struct hist *h, uint64_t ns);
void hist_merge(struct hist *into, const struct hist *from);
/* Value at quantile q (0..1), in ns; 0 when empty. */
double hist_quantile(const struct hist *h, double q);

/* ---- allocators ----------------------------------------------------------- */
/* What one allocator call cost in one-sided operations. */
struct op_cost {
    uint64_t cas;     /* all CAS issued, log flushes included */
    uint64_t log_cas; /* of those, redo-log flushes */
    uint64_t retries; /* CAS that lost a race */
    uint64_t rtts;    /* network round trips (a batch or an RPC is one) */
};

/* Everything an allocator needs to set itself up for one configuration. */
struct alloc_params {
    uint64_t pool_bytes; /* data bytes to manage */
    uint64_t rtt_ns;     /* injected round trip */
    enum tp_rtt_mode rtt_mode; /* how it is waited for */
    uint64_t rpc_service_ns;   /* rpc: modeled server CPU per request */
    unsigned threads;    /* client threads that will call it */
    const _Atomic bool *abort; /* set when a run overstays its grace time */
};

/* Pool-wide figures an allocator can report after a run (optional). */
struct alloc_totals {
    bool have_max_retries;
    uint64_t max_retries; /* most CAS failures of one allocation, pool-wide */
    bool have_server;
    uint64_t server_busy_ns; /* time the server spent serving, cumulative */
    uint64_t server_requests;
};

/* One allocator under test. Blocks are named by fmem_handle for all of them
 * (addr = byte offset, or a pointer for mmap). Calls return 0, FMEM_ENOMEM,
 * BENCH_EABORT or another negative FMEM_E* code. */
struct allocator {
    const char *name;
    const char *what; /* one line for --help */
    int (*open)(const struct alloc_params *p, void **self);
    void (*close)(void *self);
    int (*alloc)(void *self, size_t size, fmem_handle *out, struct op_cost *c);
    int (*free)(void *self, const fmem_handle *h, struct op_cost *c);
    /* Change the injected delay; only called while no thread is inside a
     * call (setup phases run without delay). */
    void (*set_rtt)(void *self, uint64_t rtt_ns);
    /* Pool-wide figures; called after setup and after the run (may be NULL). */
    void (*totals)(void *self, struct alloc_totals *t);
};

extern const struct allocator alloc_fmem, alloc_fmem_nolog, alloc_freearray, alloc_rpc,
    alloc_mmap;
/* NULL-terminated list of every allocator, in --help order. */
extern const struct allocator *const bench_allocators[];
const struct allocator *allocator_by_name(const char *name);

/* CAS counts from this thread's transport trace around a call. */
struct trace_mark {
    uint64_t cas, cas_fail, log_cas, rtts;
};
void trace_mark(struct trace_mark *m);
void trace_cost(const struct trace_mark *before, struct op_cost *c);

/* ---- workloads (workloads.c) --------------------------------------------- */
struct worker;

struct workload {
    const char *name;
    const char *what; /* one line for --help */
    /* Unmeasured preparation (runs with the delay off); may be NULL. */
    void (*setup)(struct worker *w);
    /* One measured step: one allocation or one free, usually. Returns false
     * when it had nothing to do (the runner then sleeps a little). */
    bool (*step)(struct worker *w);
};

extern const struct workload *const bench_workloads[];
const struct workload *workload_by_name(const char *name);

/* ---- one configuration (runner.c) ----------------------------------------- */
struct bench_opts {
    const struct allocator *allocs[8];
    unsigned nallocs;
    const struct workload *workloads[8];
    unsigned nworkloads;
    unsigned threads[64];
    unsigned nthreads;
    uint64_t rtt_ns;
    enum tp_rtt_mode rtt_mode;
    uint64_t rpc_service_ns;
    double seconds;
    uint64_t pool_bytes;
    uint64_t size;    /* churn block size, rounded to 4 KiB x 2^k */
    double occupancy; /* paper: pool fill level */
    uint64_t seed;
    bool json;
};

/* State shared by the threads of one run. */
struct run_shared {
    const struct bench_opts *o;
    const struct allocator *a;
    const struct workload *wl;
    void *self; /* the allocator instance */
    unsigned threads;
    _Atomic bool stop;
    _Atomic bool abort;
    _Atomic unsigned done;      /* threads that left the measured loop */
    pthread_barrier_t barrier;  /* setup done; go */
    _Atomic uint64_t pool_used; /* paper: bytes held by all threads */
    uint64_t pool_target;       /* paper: bytes to hold */
};

/* Allocation calls are also counted by how many CAS they issued: 0, 1, ..,
 * CAS_DIST-1 or more. */
#define CAS_DIST 5

/* Per-thread measurements. */
struct thread_result {
    struct hist *lat; /* allocation calls, measured phase */
    uint64_t allocs, frees, failed, aborted, errors;
    uint64_t free_calls, free_ns;
    uint64_t cas, log_cas, retries, free_cas, rtts, free_rtts;
    uint64_t cas_dist[CAS_DIST]; /* allocation calls by CAS count (log excluded) */
    uint64_t retries_max;     /* measured phase */
    uint64_t retries_max_all; /* setup included (to compare with pool stats) */
    int first_error;
    char first_error_what[80]; /* the call that failed */
    uint64_t t_end;
};

/* A live block of a worker. */
struct live {
    fmem_handle h;
};

struct worker {
    struct run_shared *sh;
    unsigned index;
    bool measuring;
    struct rng rng;
    struct thread_result r;
    /* the worker's live blocks (workloads keep them here) */
    struct live *live;
    size_t nlive, cap, head;
    uint64_t live_bytes;
    /* workload state */
    size_t to_free; /* paper: frees left in this round */
    uint64_t budget; /* mixed/churn: bytes this thread may hold */
    size_t max_live;
};

/* Allocate / free through the allocator, timing and accounting the call.
 * w_alloc returns the allocator's code. */
int w_alloc(struct worker *w, size_t size, fmem_handle *out);
int w_free(struct worker *w, const fmem_handle *h);
/* Live set helpers; live_push returns false when memory is short. */
bool live_push(struct worker *w, const fmem_handle *h);
fmem_handle live_take(struct worker *w, size_t i); /* swap-remove */

/* Aggregated figures of one configuration. */
struct run_result {
    const char *alloc, *workload;
    unsigned threads;
    uint64_t rtt_ns;
    double elapsed_s;
    uint64_t allocs, frees, failed, aborted, errors, free_calls;
    double ops_per_s;
    double lat_avg_us, lat_p50_us, lat_p99_us, lat_max_us, free_avg_us;
    double cas_per_op, log_cas_per_op, retries_per_op, free_cas_per_op;
    double rtt_per_op, free_rtt_per_op;
    uint64_t cas_dist[CAS_DIST];
    uint64_t retries_max, retries_max_all;
    bool have_stats_retries;
    uint64_t stats_max_retries;
    bool have_server;
    double server_busy;        /* fraction of the measured time */
    double server_req_per_s;
    double cpu_util; /* process CPU time / elapsed: cores kept busy */
    /* rtt_mode=nic: the emulator over the measured phase */
    bool have_nic;
    double nic_cpu;         /* its CPU time / elapsed (included in cpu_util) */
    double nic_late_us;     /* average lateness of a completion */
    double nic_wake_per_req; /* futex wake syscalls per completion */
    uint64_t nic_requests;
};

/* Run one configuration; 0, or -1 when the allocator could not be opened. */
int run_config(const struct bench_opts *o, const struct allocator *a,
               const struct workload *wl, unsigned threads, struct run_result *out);

/* ---- options and report --------------------------------------------------- */
/* Parse argv; returns 0, 1 (help printed: exit 0) or 2 (error printed). */
int bench_parse_options(int argc, char **argv, struct bench_opts *o);

void report_header(const struct bench_opts *o);
void report_row(const struct bench_opts *o, const struct run_result *r);
void report_comparisons(const struct bench_opts *o, const struct run_result *rs, size_t n);

#endif
