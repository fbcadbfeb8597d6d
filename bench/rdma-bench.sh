#!/bin/sh
# Runs inside the soft-RoCE VM (tests/rdma/rxe-vm.sh, started by
# make bench-rdma), everything on rxa (192.168.77.1):
#  1. fmem-mwbench: memory registration vs memory window binding;
#  2. fmem-rdmabench: fmem through rdma:// (a verbs_serve memory node)
#     against the free-array and RPC baselines (fmem-rdmabench --serve).
# Usage: rdma-bench.sh BUILDDIR [--mw 'fmem-mwbench options']
#            [--rdma 'fmem-rdmabench options'] [--serve 'its --serve options']
#            [--pin yes|no] [--ab OLDBUILD]
# --ab OLDBUILD: afterwards, fmem and the free array of this build and of
# another build directory (an older tree) against the same memory node,
# alternately new, old, new, old, so that drift between runs shows.
# The VM emulates its CPU (TCG), so the default iteration counts are small.
set -u
B=${1:-.}
[ $# -gt 0 ] && shift
mw_args="" rdma_args="" serve_args="" pin=yes ab=""
while [ $# -gt 0 ]; do
    case "$1" in
    --mw) mw_args=$2; shift 2 ;;
    --rdma) rdma_args=$2; shift 2 ;;
    --serve) serve_args=$2; shift 2 ;;
    --pin) pin=${2:-yes}; shift 2 ;;
    --ab) ab=$2; shift 2 ;;
    *) mw_args="$mw_args $1"; shift ;; # older form: fmem-mwbench options
    esac
done
echo "rdma-bench: kernel $(uname -r), $(nproc) CPU(s), device rxa" >&2
rc=0

echo "== fmem-mwbench: memory regions vs memory windows =="
# shellcheck disable=SC2086 # options are meant to be split
"$B/bench/fmem-mwbench" --dev rxa --iters 500 $mw_args || rc=1

echo
echo "== fmem-rdmabench: fmem vs free array vs RPC =="
addr=192.168.77.1 token=/tmp/fmem-rdmabench.token
vlog=/tmp/fmem-rdmabench-mnode.log slog=/tmp/fmem-rdmabench-serve.log
# The memory node's side (verbs_serve and its regenerator, the RPC server)
# gets CPU 0 to itself and the clients the others, as a memory node has a
# core of its own; otherwise spinning clients would take the CPU that RPC
# and fmem's key regeneration need. --pin no turns this off.
srv_cpu="" cli_cpu=""
ncpu=$(nproc)
if [ "$pin" != no ] && [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null; then
    srv_cpu="taskset -c 0" cli_cpu="taskset -c 1-$((ncpu - 1))"
fi
$srv_cpu "$B/tests/rdma/verbs_serve" "shm:/fmem-rdmabench?size=64M" $addr 7481 $token >$vlog 2>&1 &
mnode=$!
# shellcheck disable=SC2086
$srv_cpu "$B/bench/fmem-rdmabench" --serve $addr 7482 --pool-size 64M $serve_args >$slog 2>&1 &
serve=$!
# both print a line starting "ready" once they listen
i=0
until grep -q '^ready' $vlog 2>/dev/null && grep -q '^ready' $slog 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $mnode 2>/dev/null || ! kill -0 $serve 2>/dev/null; then
        echo "rdma-bench: a server did not start:"
        cat $vlog $slog
        kill $mnode $serve 2>/dev/null
        exit 1
    fi
    sleep 0.1
done
echo "memory node (verbs_serve): $(grep '^ready' $vlog)"
echo "baselines (fmem-rdmabench --serve): $(grep '^ready' $slog)"
echo "CPUs: servers ${srv_cpu:-unpinned}, clients ${cli_cpu:-unpinned}"
# shellcheck disable=SC2086
$cli_cpu "$B/bench/fmem-rdmabench" --fmem "rdma://$addr:7481?token=$token" --baseline $addr:7482 \
    $rdma_args || rc=$((rc + 2))
# fmem alone (no baselines competing for the memory node's CPU), with its
# allocation's log flush posted (the default) and waited for
# (FMEM_VERBS_WAIT_POSTS=1, as before posting), same memory node, same boot,
# in the order posted, waited, posted so that drift shows; these runs time
# every chain (FMEM_VERBS_PROF=1, two clock system calls per chain in the VM)
for mode in posted waited posted; do
    echo
    echo "== fmem-rdmabench, fmem alone, log flush $mode =="
    wp=0
    [ $mode = waited ] && wp=1
    # shellcheck disable=SC2086
    FMEM_VERBS_WAIT_POSTS=$wp FMEM_VERBS_PROF=1 $cli_cpu "$B/bench/fmem-rdmabench" \
        --fmem "rdma://$addr:7481?token=$token" --allocators fmem $rdma_args || rc=$((rc + 4))
done
if [ -n "$ab" ]; then
    for which in new old new old; do
        d=$B
        [ $which = old ] && d=$ab
        echo
        echo "== fmem-rdmabench, $which build ($d), fmem and free array =="
        # shellcheck disable=SC2086
        $cli_cpu "$d/bench/fmem-rdmabench" --fmem "rdma://$addr:7481?token=$token" \
            --baseline $addr:7482 --allocators fmem,free-array $rdma_args || rc=$((rc + 8))
    done
fi
kill $mnode $serve
wait $mnode $serve
echo "memory node at exit: $(grep -v '^ready' $vlog | tr '\n' ' ')"
echo "baselines at exit: $(grep -v '^ready' $slog | tr '\n' ' ')"
exit $rc
