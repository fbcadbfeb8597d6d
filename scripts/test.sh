#!/bin/sh
# Build and run the whole test suite; the last line is the summary
# ("check: N passed, N failed").
set -u
cd "$(dirname "$0")/.."
./scripts/deps.sh || exit 1
./scripts/build.sh || exit 1
make -j"$(nproc)" check >/dev/null 2>&1
rc=$?
# per-test results from the automake harness
pass=$(grep -h '^:test-result: PASS' $(find . -name '*.trs') 2>/dev/null | wc -l)
fail=$(grep -hE '^:test-result: (FAIL|ERROR|XPASS)' $(find . -name '*.trs') 2>/dev/null | wc -l)
for f in $(grep -lE '^:test-result: (FAIL|ERROR|XPASS)' $(find . -name '*.trs') 2>/dev/null); do
    log=${f%.trs}.log
    echo "---- ${log}" ; tail -n 40 "$log"
done
[ "$rc" -eq 0 ] || [ "$fail" -gt 0 ] || fail=1
# attack programs against real daemons (tests/hostile/run.sh): one test
if make check-hostile >check-hostile.log 2>&1; then
    pass=$((pass + 1))
else
    fail=$((fail + 1))
    echo "---- check-hostile.log"; tail -n 40 check-hostile.log
fi
# the verbs transport on soft-RoCE, in a VM (when built with rdma-core)
if [ -x tests/rdma/verbs_serve ]; then # built by make check when rdma-core is there
    if make check-rdma >check-rdma.log 2>&1; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "---- check-rdma.log"; tail -n 40 check-rdma.log
    fi
fi
echo "check: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
