/* fmem-bench.c - allocation benchmark: fmem and in-tree baselines (a
 * one-sided free array, an RPC allocation server, local mmap) on the same
 * transport and workloads, in one run. See --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int fmem_bench_ipc(int argc, char **argv);    /* wl_ipc.c: service round trips */
int fmem_bench_region(int argc, char **argv); /* wl_region.c: region scans */

/* --workload ipc and --workload region are benchmarks of their own, with
 * their own options: hand them the arguments without the --workload pair. */
static int other_workload(int argc, char **argv, int *status)
{
    for (int i = 1; i < argc; i++) {
        const char *w = NULL;
        int skip = 0;
        if (!strcmp(argv[i], "--workload") && i + 1 < argc)
            w = argv[i + 1], skip = 2;
        else if (!strncmp(argv[i], "--workload=", 11))
            w = argv[i] + 11, skip = 1;
        if (!w || (strcmp(w, "ipc") && strcmp(w, "region")))
            continue;
        char **rest = calloc((size_t)argc, sizeof *rest);
        if (!rest)
            return 0;
        int n = 0;
        for (int k = 0; k < argc; k++)
            if (k < i || k >= i + skip)
                rest[n++] = argv[k];
        *status = !strcmp(w, "ipc") ? fmem_bench_ipc(n, rest) : fmem_bench_region(n, rest);
        free(rest);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int other;
    if (other_workload(argc, argv, &other))
        return other;
    static struct bench_opts o;
    int rc = bench_parse_options(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    for (unsigned a = 0; a < o.nallocs; a++)
        if (o.allocs[a] == &alloc_mmap && o.rtt_ns)
            fprintf(stderr, "fmem-bench: note: mmap has no injected delay; compare it with "
                            "--rtt-ns 0\n");
    size_t n = (size_t)o.nallocs * o.nworkloads * o.nthreads, done = 0;
    struct run_result *rs = calloc(n, sizeof *rs);
    if (!rs) {
        fprintf(stderr, "fmem-bench: out of memory\n");
        return 1;
    }
    report_header(&o);
    int status = 0;
    for (unsigned w = 0; w < o.nworkloads; w++)
        for (unsigned a = 0; a < o.nallocs; a++)
            for (unsigned t = 0; t < o.nthreads; t++) {
                if (run_config(&o, o.allocs[a], o.workloads[w], o.threads[t], &rs[done])) {
                    status = 1;
                    continue;
                }
                report_row(&o, &rs[done]);
                if (rs[done].errors)
                    status = 1;
                done++;
            }
    report_comparisons(&o, rs, done);
    free(rs);
    return status;
}
