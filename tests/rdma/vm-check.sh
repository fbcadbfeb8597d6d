#!/bin/sh
# Runs inside the soft-RoCE VM (make check-rdma): fmem-mnode serves a pool
# on rxa (192.168.77.1) with a window per block; the clients run the
# transport-independent conformance suite over RDMA, then the key-security
# tests (an application-role connection trying keys it was not given).
set -u
B=${1:-.}
log=/tmp/fmem-mnode.log
token=/tmp/fmem-rdma.token
# the pool on 2 MiB huge pages when the VM can have them
pool="shm:/fmem-rdma?size=64M"
if mkdir -p /dev/hugepages && mount -t hugetlbfs none /dev/hugepages 2>/dev/null &&
    echo 80 >/proc/sys/vm/nr_hugepages && [ "$(cat /proc/sys/vm/nr_hugepages)" -ge 40 ]; then
    pool="file:/dev/hugepages/fmem-rdma?size=64M"
fi
echo "check-rdma: pool $pool"
"$B/tools/fmem-mnode" --pool "$pool" --socket /tmp/fmem-mnode.sock \
    --rdma 192.168.77.1:7471 --token $token -v >"$log" 2>&1 &
server=$!
i=0
until grep -q "rdma: serving" "$log" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 $server 2>/dev/null; then
        echo "check-rdma: memory node did not start:"; cat "$log"; exit 1
    fi
    sleep 0.1
done
# clients take the default route to the memory node (see docs/verbs-notes.md:
# traffic between the two rxe devices of one namespace is dropped)
export FMEM_TEST_URI="rdma://192.168.77.1:7471?token=$token"
rc=0
"$B/tests/test_conformance" -j1 || rc=1 # one pool for all: one test at a time
"$B/tests/test_crash" -j1 || rc=$((rc | 1))
export FMEM_TEST_RDMA="192.168.77.1 7471 $token" FMEM_TEST_RXE=1
"$B/tests/rdma/test_security" || rc=$((rc + 2))
# the allocation's posted log flush: fewer round trips, frees from other threads
"$B/tests/rdma/test_flush_rdma" -j1 || rc=$((rc | 1))
# a second memory node with type-2B windows bound to applications' queue pairs
"$B/tools/fmem-mnode" --pool "shm:/fmem-rdma-mw2?size=8M" --socket /tmp/fmem-mnode-mw2.sock \
    --rdma 192.168.77.1:7472 --token /tmp/fmem-rdma-mw2.token --mw type2 -v \
    >/tmp/fmem-mnode-mw2.log 2>&1 &
server2=$!
i=0
until grep -q "rdma: serving" /tmp/fmem-mnode-mw2.log 2>/dev/null || [ $i -gt 600 ]; do
    i=$((i + 1)); sleep 0.1
done
FMEM_TEST_RDMA_MW2="192.168.77.1 7472 /tmp/fmem-rdma-mw2.token" "$B/tests/rdma/test_mw2" ||
    rc=$((rc | 32))
# an fmemd on it: its applications get keys bound to their own queue pairs
sock2=/tmp/fmemd-rdma-mw2.sock
"$B/tools/fmemd" --mnode "rdma://192.168.77.1:7472?token=/tmp/fmem-rdma-mw2.token" \
    --socket $sock2 >/tmp/fmemd-mw2.log 2>&1 &
fmemd2=$!
i=0
until [ -S $sock2 ] || [ $i -gt 300 ]; do i=$((i + 1)); sleep 0.1; done
FMEM_TEST_SVC=unix:$sock2 FMEM_TEST_RDMA="192.168.77.1 7472 /tmp/fmem-rdma-mw2.token" \
    FMEM_TEST_FMEMD="$B/tools/fmemd" "$B/tests/rdma/test_service_mw2" -j1 || rc=$((rc | 32))
kill $fmemd2; wait $fmemd2
cat /tmp/fmemd-mw2.log
kill $server2; wait $server2
cat /tmp/fmem-mnode-mw2.log
# which queue pair a window key works from, type 1 and type 2B (asserted)
"$B/bench/fmem-mwbench" --dev rxa --check || rc=$((rc | 16))
# an fmemd on the same memory node; its applications use their own QPs
sock=/tmp/fmemd-rdma.sock
"$B/tools/fmemd" --mnode "rdma://192.168.77.1:7471?token=$token" --socket $sock \
    >/tmp/fmemd.log 2>&1 &
fmemd=$!
i=0
until [ -S $sock ] || [ $i -gt 300 ]; do i=$((i + 1)); sleep 0.1; done
FMEM_TEST_SVC=unix:$sock FMEM_TEST_FMEMD="$B/tools/fmemd" "$B/tests/rdma/test_service_rdma" -j1 ||
    rc=$((rc + 4))
kill $fmemd; wait $fmemd
cat /tmp/fmemd.log
# a memory node serving over RDMA hands its files to no local service
if "$B/tools/fmemd" --mnode /tmp/fmem-mnode.sock --socket /tmp/fmemd-shm.sock \
    --connect-ms 2000 >/tmp/fmemd-shm.log 2>&1 || ! grep -q "does not support" /tmp/fmemd-shm.log; then
    echo "check-rdma: a shm service was not refused:"; cat /tmp/fmemd-shm.log; rc=$((rc + 8))
fi
kill $server; wait $server
cat "$log"
echo "vm-check: status $rc (bits: 1 conformance, 2 security, 4 service, 8 shm refusal, 16 window checks, 32 type-2 windows failed)"
exit $rc
