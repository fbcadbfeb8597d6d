/* clock_rng.c - clocks and random numbers shared by the benchmarks. */
#include "clock_rng.h"

uint64_t bench_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double bench_clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t bench_now_ns(void)
{
    return bench_clock_ns(CLOCK_MONOTONIC);
}

double bench_now_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

uint64_t bench_cpu_ns(void)
{
    return bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    r->s = seed * 0x9E3779B97F4A7C15u + 0x632BE59BD9B4E019u;
}

uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : 0;
}

double rng_unit(struct rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

void rng_shuffle(struct rng *r, uint32_t *a, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_below(r, i);
        uint32_t t = a[i - 1];
        a[i - 1] = a[j];
        a[j] = t;
    }
}

uint64_t xorshift64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
