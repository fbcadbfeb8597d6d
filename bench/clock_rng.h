/* clock_rng.h - the clocks and the random number generator every benchmark
 * uses (bench/clock_rng.c; no dependency on libfmem). */
#ifndef FMEM_BENCH_CLOCK_RNG_H
#define FMEM_BENCH_CLOCK_RNG_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Reading of clock `id` (CLOCK_MONOTONIC, CLOCK_PROCESS_CPUTIME_ID, ...). */
uint64_t bench_clock_ns(clockid_t id);
double bench_clock_s(clockid_t id);
uint64_t bench_now_ns(void); /* CLOCK_MONOTONIC */
double bench_now_s(void);    /* the same in seconds */
uint64_t bench_cpu_ns(void); /* CPU time of the whole process */

/* splitmix64: tiny, good enough for picking sizes, places and victims */
struct rng {
    uint64_t s;
};
void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* uniform in [0, n) */
uint64_t rng_below(struct rng *r, uint64_t n);
/* uniform in [0, 1) */
double rng_unit(struct rng *r);
/* Put a[0..n) in a uniformly random order (Fisher-Yates). */
void rng_shuffle(struct rng *r, uint32_t *a, size_t n);

/* xorshift64 (state never 0): kept for the benchmarks whose output for a
 * given seed is quoted in docs/ (fmem-fragbench --seed, fmem-backendbench's
 * data and so its compression ratios), so that the same seed still gives
 * the same workload. */
uint64_t xorshift64(uint64_t *s);

#endif
