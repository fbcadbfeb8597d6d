#!/bin/sh
# Runs inside the soft-RoCE VM (see check-rdma.sh): the memory node serves a
# pool on rxa (192.168.77.1); the clients connect from rxb (192.168.77.2)
# and run the transport-independent conformance suite over RDMA.
set -u
B=${1:-.}
log=/tmp/verbs_serve.log
"$B/tests/rdma/verbs_serve" "shm:/fmem-rdma?size=256M" 192.168.77.1 7471 >"$log" 2>&1 &
server=$!
i=0
until grep -q ready "$log" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 100 ] || ! kill -0 $server 2>/dev/null; then
        echo "check-rdma: memory node did not start:"; cat "$log"; exit 1
    fi
    sleep 0.1
done
# clients take the default route to the memory node (see docs/verbs-notes.md:
# traffic between the two rxe devices of one namespace is dropped)
export FMEM_TEST_URI="rdma://192.168.77.1:7471"
rc=0
"$B/tests/test_conformance" || rc=1
kill $server; wait $server
exit $rc
