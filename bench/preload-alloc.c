/* preload-alloc.c - allocate, touch every page, free: the same block size
 * over and over, as a program with a reused large buffer does. Prints the
 * CPU time per round in ns. Run it with and without libfmem-preload.so
 * (bench/preload-bench.sh does both in one run).
 *   preload-alloc [SIZE_BYTES [ROUNDS [keep]]]   (default 204800, 200000)
 * keep: never free, so every round touches fresh memory. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "clock_rng.h"

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 0) : 204800;
    long rounds = argc > 2 ? strtol(argv[2], NULL, 0) : 200000;
    int keep = argc > 3 && argv[3][0] == 'k';
    if (size == 0 || rounds <= 0) {
        fprintf(stderr, "usage: preload-alloc [SIZE_BYTES [ROUNDS [keep]]]\n");
        return 2;
    }
    /* volatile: the compiler may not drop the malloc/free pair */
    char *volatile p;
    double t0 = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID);
    for (long r = 0; r < rounds; r++) {
        p = malloc(size);
        if (!p)
            return 1;
        for (size_t i = 0; i < size; i += 4096)
            p[i] = (char)r;
        if (!keep)
            free(p);
    }
    double t = bench_clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0;
    printf("%.1f\n", t / (double)rounds * 1e9);
    return 0;
}
