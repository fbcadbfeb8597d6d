/* fmem-bench.c - allocation benchmark: fmem and in-tree baselines (a
 * one-sided free array, an RPC allocation server, local mmap) on the same
 * transport and workloads, in one run. See --help. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int main(int argc, char **argv)
{
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
