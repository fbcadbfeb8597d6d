#!/bin/sh
# Runs inside the soft-RoCE VM (tests/rdma/rxe-vm.sh, started by
# make bench-rdma): fmem-mwbench on rxa, memory registration vs memory
# window binding. Usage: rdma-bench.sh BUILDDIR [fmem-mwbench options]
# The VM emulates its CPU (TCG), so the default iteration count is small.
set -u
B=${1:-.}
[ $# -gt 0 ] && shift
echo "rdma-bench: kernel $(uname -r), $(nproc) CPU(s), device rxa" >&2
exec "$B/bench/fmem-mwbench" --dev rxa --iters 500 "$@"
