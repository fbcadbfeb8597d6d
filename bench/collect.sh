#!/bin/bash
# bench/collect.sh - run the benchmarks the docs quote and keep their JSON
# output, from a build tree (make first):
#
#   bench/collect.sh [OUTDIR]        (default docs/data; make bench-json)
#
# Writes OUTDIR/machine.json (cores, kernel, load before and after) and one
# file per benchmark: alloc.jsonl (fmem-bench, churn of 4 KiB blocks, fmem
# and its baselines at 1..64 threads), ipc.jsonl (fmemd against an embedded
# pool), region.jsonl (fmem-regionbench at
# several cache sizes), malloc.jsonl (fmem-mallocbench), numpy.json,
# arena.json, pandas.jsonl, lua-gc.json, preload.json. `make plots` draws docs/img/ from
# them (bench/plots.py). A benchmark that cannot run here (no userfaultfd,
# no Python binding, no lua5.4) is reported and skipped. SECONDS_PER_POINT
# (default 1) is fmem-bench's and fmem-regionbench's time per configuration.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
out=${1:-$top_srcdir/docs/data}
secs=${SECONDS_PER_POINT:-1}
mkdir -p "$out"
b=$top_builddir/bench
pyrun=$top_srcdir/bindings/python/pyrun
export FMEM_BUILDDIR=${FMEM_BUILDDIR:-$(cd "$top_builddir" && pwd)}
load() { cut -d' ' -f1-3 /proc/loadavg; }
step() { echo "collect: $* (load $(load))" >&2; }
skipped=""

load_before=$(load)
step "fmem-bench: churn, fmem / free-array / rpc, 1..64 threads"
"$b/fmem-bench" --allocators fmem,free-array,rpc --workload churn --threads 1,2,4,8,16,32,64 \
    --seconds "$secs" --json >"$out/alloc.jsonl.tmp" && mv "$out/alloc.jsonl.tmp" "$out/alloc.jsonl" ||
    skipped="$skipped fmem-bench"
step "fmem-bench: service (fmemd) against embedded"
"$b/fmem-bench" --workload ipc --seconds 2 --json >"$out/ipc.jsonl.tmp" 2>/dev/null &&
    mv "$out/ipc.jsonl.tmp" "$out/ipc.jsonl" || skipped="$skipped fmem-bench-ipc"
step "fmem-regionbench: cache 100..10 %, kernel swap alongside (root only)"
"$b/fmem-regionbench" --cache-pct 100,75,50,25,10 --size 256M --seconds "$secs" --json --vs-swap \
    >"$out/region.jsonl.tmp" && mv "$out/region.jsonl.tmp" "$out/region.jsonl" ||
    skipped="$skipped fmem-regionbench"
step "fmem-mallocbench: glibc, mimalloc, fmem"
"$b/fmem-mallocbench" --threads 2 --json >"$out/malloc.jsonl.tmp" 2>/dev/null &&
    mv "$out/malloc.jsonl.tmp" "$out/malloc.jsonl" || skipped="$skipped fmem-mallocbench"
step "numpy-bench.py"
"$pyrun" "$top_srcdir/bench/numpy-bench.py" --rounds 5 --json "$out/numpy.json" >&2 ||
    skipped="$skipped numpy-bench"
step "pandas-bench.py --quick, kernel swap alongside (root only)"
"$pyrun" "$top_srcdir/bench/pandas-bench.py" --quick --vs-swap --json "$out/pandas.jsonl" >&2 ||
    skipped="$skipped pandas-bench"
step "arena-bench.py"
"$pyrun" "$top_srcdir/bench/arena-bench.py" --json "$out/arena.json" >&2 ||
    skipped="$skipped arena-bench"
step "lua-gc-bench.sh"
top_builddir=$top_builddir "$top_srcdir/bench/lua-gc-bench.sh" --json "$out/lua-gc.json" >&2 ||
    skipped="$skipped lua-gc-bench"
step "preload-overhead.sh"
"$top_srcdir/bench/preload-overhead.sh" --json "$out/preload.json" 3 >&2 ||
    skipped="$skipped preload-overhead"
rm -f "$out"/*.tmp
printf '{"cores": %s, "kernel": "%s", "load_before": "%s", "load_after": "%s", "date": "%s", "skipped": "%s"}\n' \
    "$(nproc)" "$(uname -r)" "$load_before" "$(load)" "$(date -u +%Y-%m-%d)" "${skipped# }" \
    >"$out/machine.json"
step "done${skipped:+; skipped:$skipped}"
[ -z "$skipped" ]
