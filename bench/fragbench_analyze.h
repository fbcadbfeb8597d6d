/* fragbench_analyze.h - pair-compatibility statistics of a fragmented
 * heap and what offset-preserving merges at 64 KiB and 4 KiB could reach
 * (fragbench_analyze.c). */
#ifndef FMEM_BENCH_FRAGBENCH_ANALYZE_H
#define FMEM_BENCH_FRAGBENCH_ANALYZE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* obj[i] (NULL: freed) of len[i] bytes, from a heap whose slabs are
 * 64 KiB aligned; live_bytes: the sum of the live objects' lengths. */
void frag_analyze(void *const *obj, const size_t *len, size_t n, uint64_t live_bytes, FILE *out);

#endif
