/* samples.c - see samples.h. */
#include "samples.h"

#include <stdlib.h>

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

struct stat_ns samples_summarize(uint64_t *v, size_t n)
{
    struct stat_ns s = {0, 0, 0};
    if (n == 0)
        return s;
    qsort(v, n, sizeof *v, cmp_u64);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)v[i];
    s.mean = sum / (double)n;
    s.median = n % 2 ? (double)v[n / 2] : ((double)v[n / 2 - 1] + (double)v[n / 2]) / 2;
    s.p99 = (double)v[(99 * n + 99) / 100 - 1]; /* ceil(0.99 n) */
    return s;
}
