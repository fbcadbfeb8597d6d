/* hist.c - log-linear latency histogram (see bench.h for the error bound). */
#include "bench.h"

static unsigned bucket_of(uint64_t v)
{
    if (v < HIST_SUB)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v); /* >= HIST_SUB_BITS */
    if (e > HIST_MAX_EXP)
        return HIST_BUCKETS - 1;
    unsigned sub = (unsigned)(v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1);
    return HIST_SUB * (e - HIST_SUB_BITS + 1) + sub;
}

/* Midpoint of bucket i. */
static double bucket_mid(unsigned i)
{
    if (i < HIST_SUB)
        return i;
    unsigned e = i / HIST_SUB - 1 + HIST_SUB_BITS, sub = i % HIST_SUB;
    double width = (double)(UINT64_C(1) << (e - HIST_SUB_BITS));
    return (double)(HIST_SUB + sub) * width + width / 2;
}

void hist_add(struct hist *h, uint64_t ns)
{
    h->b[bucket_of(ns)]++;
    h->count++;
    h->sum += ns;
    if (ns > h->max)
        h->max = ns;
}

void hist_merge(struct hist *into, const struct hist *from)
{
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->b[i] += from->b[i];
    into->count += from->count;
    into->sum += from->sum;
    if (from->max > into->max)
        into->max = from->max;
}

double hist_quantile(const struct hist *h, double q)
{
    if (h->count == 0)
        return 0;
    /* rank of the wanted sample, 1-based: ceil(q * count) */
    double want = q * (double)h->count;
    uint64_t rank = (uint64_t)want;
    if ((double)rank < want || rank == 0)
        rank++;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            double v = bucket_mid(i);
            return v > (double)h->max ? (double)h->max : v;
        }
    }
    return (double)h->max;
}
