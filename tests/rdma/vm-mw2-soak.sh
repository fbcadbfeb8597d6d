#!/bin/sh
# Runs inside the soft-RoCE VM (tests/rdma/rxe-vm.sh): a type-2 memory node,
# an fmemd on it and test_service_mw2's random-kill test with
# FMEM_TEST_MW2_KILLS kills (1000 unless set), while a sampler writes the
# VM's memory figures and the daemons' rdma objects and descriptors every
# few seconds to $OUT (default ./mw2-soak.log).
# ($OUT.objs: the queue pairs and regions of the device and the kernel's
# last messages, every third sample.) From the build directory:
#   tests/rdma/rxe-vm.sh -t 5400 -- [env FMEM_TEST_MW2_KILLS=N] sh tests/rdma/vm-mw2-soak.sh .
set -u
B=${1:-.}
OUT=${OUT:-$(pwd)/mw2-soak.log}
: "${FMEM_TEST_MW2_KILLS:=1000}"
export FMEM_TEST_MW2_KILLS
tok=/tmp/fmem-soak-mw2.token
"$B/tools/fmem-mnode" --pool "shm:/fmem-soak-mw2?size=8M" --socket /tmp/fmem-soak-mnode.sock \
    --rdma 192.168.77.1:7472 --token $tok --mw type2 -v >/tmp/fmem-soak-mnode.log 2>&1 &
mnode=$!
i=0
until grep -q "rdma: serving" /tmp/fmem-soak-mnode.log 2>/dev/null || [ $i -gt 600 ]; do
    i=$((i + 1)); sleep 0.1
done
sock=/tmp/fmemd-soak-mw2.sock
"$B/tools/fmemd" --mnode "rdma://192.168.77.1:7472?token=$tok" --socket $sock -v \
    >/tmp/fmemd-soak.log 2>&1 &
fmemd=$!
i=0
until [ -S $sock ] || [ $i -gt 300 ]; do i=$((i + 1)); sleep 0.1; done
mem() { awk -v k="$1:" '$1 == k {print $2}' /proc/meminfo; }
res() { rdma resource show 2>/dev/null | awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) s += $(i + 1)} END {print s + 0}'; }
# "comm(pid)" of each object, counted; pids no longer alive marked dead
owners() {
    sed -n 's/.*pid \([0-9]*\) comm \([^ ]*\).*/\2 \1/p' | while read -r c p; do
        if [ -d /proc/$p ]; then echo "$c"; else echo "$c-dead"; fi
    done | sort | uniq -c | tr '\n' ' '
}
sample() {
    t0=$(date +%s) n=0
    : >"$OUT.objs"
    echo "t inact_anon anon_pages shmem unevict mlocked free qp cq mr pd cm_id ctx mw mnode_fds fmemd_fds mnode_rss fmemd_rss nproc" >"$OUT"
    while kill -0 $mnode 2>/dev/null; do
        mw=$(rdma resource show mw 2>/dev/null | wc -l)
        echo "$(($(date +%s) - t0)) $(mem 'Inactive(anon)') $(mem AnonPages) $(mem Shmem)" \
            "$(mem Unevictable) $(mem Mlocked) $(mem MemFree) $(res qp) $(res cq) $(res mr) $(res pd)" \
            "$(res cm_id) $(res ctx) $mw $(ls /proc/$mnode/fd 2>/dev/null | wc -l)" \
            "$(ls /proc/$fmemd/fd 2>/dev/null | wc -l)" \
            "$(awk '/VmRSS/ {print $2}' /proc/$mnode/status 2>/dev/null)" \
            "$(awk '/VmRSS/ {print $2}' /proc/$fmemd/status 2>/dev/null)" \
            "$(ls -d /proc/[0-9]* | wc -l)" >>"$OUT"
        n=$((n + 1))
        if [ $((n % 3)) = 1 ]; then
            echo "--- t=$(($(date +%s) - t0)) apps reaped $(grep -c ' gone' /tmp/fmemd-soak.log)" >>"$OUT.objs"
            rdma resource show qp | grep -v ib_core >>"$OUT.objs"
            rdma resource show mr | grep -v ib_core >>"$OUT.objs"
            dmesg | grep -v 'rxe-vm\|audit' | tail -n 30 >>"$OUT.objs"
        fi
        sleep 2
    done
}
sample &
sampler=$!
FMEM_TEST_SVC=unix:$sock FMEM_TEST_RDMA="192.168.77.1 7472 $tok" \
    "$B/tests/rdma/test_service_mw2" -j1 --filter 'service_mw2/applications_killed_at_random'
rc=$?
echo "soak: test status $rc"
echo "--- rdma resource show (at the end)"; rdma resource show
for k in qp mr pd cq; do echo "--- $k"; rdma resource show $k | grep -v "comm fmem"; done
echo "--- fds of the memory node"; ls -l /proc/$mnode/fd
echo "--- fds of fmemd"; ls -l /proc/$fmemd/fd | tail -n 20
kill $fmemd; wait $fmemd
kill $mnode; wait $mnode
sleep 5
kill $sampler 2>/dev/null
echo "--- after the daemons exit"; grep -E 'Inactive\(anon\)|AnonPages|Shmem:' /proc/meminfo
dmesg | grep -iE "oom|killed process|rxe|WARNING" | tail -n 20
tail -n 20 /tmp/fmemd-soak.log; tail -n 20 /tmp/fmem-soak-mnode.log
exit $rc
