/* util.c - clock, random numbers and transport-trace deltas shared by the
 * benchmark's parts. */
#include <time.h>

#include "bench.h"
#include "transport.h"

uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: tiny, good enough for picking sizes and victims */
uint64_t bench_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
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

void trace_mark(struct trace_mark *m)
{
    m->cas = tp_trace.cas;
    m->cas_fail = tp_trace.cas_fail;
    m->log_cas = tp_trace.log_cas;
    m->rtts = tp_trace.round_trips;
}

void trace_cost(const struct trace_mark *b, struct op_cost *c)
{
    c->cas = tp_trace.cas - b->cas;
    c->log_cas = tp_trace.log_cas - b->log_cas;
    c->retries = tp_trace.cas_fail - b->cas_fail;
    c->rtts = tp_trace.round_trips - b->rtts;
}
