/* util.c - transport-trace deltas shared by the benchmark's parts (the
 * clocks and random numbers are in clock_rng.c). */
#include "bench.h"
#include "transport.h"

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
