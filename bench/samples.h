/* samples.h - exact statistics of a set of latency samples (the RDMA
 * benchmarks keep every sample; fmem-bench uses histograms instead). */
#ifndef FMEM_BENCH_SAMPLES_H
#define FMEM_BENCH_SAMPLES_H

#include <stddef.h>
#include <stdint.h>

struct stat_ns {
    double median, p99, mean;
};

/* Median, nearest-rank p99 and mean of v[0..n) (sorted in place); zeros
 * when n is 0. */
struct stat_ns samples_summarize(uint64_t *v, size_t n);

#endif
