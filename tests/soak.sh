#!/bin/bash
# Soak test (make soak, not part of make check): one memory node, two
# allocation services, several applications per service under load for
# SOAK_SECONDS (default 60). Applications come and go; some are killed with
# SIGKILL; one fmemd is killed and restarted half-way. At the end every
# block must be back and the verifier clean.
set -u
builddir=${top_builddir:-.}
secs=${SOAK_SECONDS:-60}
apps_per=${SOAK_APPS:-3}
dir=$(mktemp -d /tmp/fmem-soak-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}" ${mnode:-} ${d0:-} ${d1:-}; do kill -9 "$p" 2>/dev/null; done
    wait 2>/dev/null
    [ -n "${FMEM_TEST_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "soak: FAIL: $*"; tail -n 20 "$dir"/*.log; exit 1; }
waitfor() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done; return 1; }

pool="file:$dir/pool?size=256M"
"$builddir/tools/fmem-mnode" --pool "$pool" --socket "$dir/mnode.sock" --heartbeat-ms 500 \
    >"$dir/mnode.log" 2>&1 &
mnode=$!
waitfor "$dir/mnode.sock" || fail "memory node did not start"
start_fmemd() {
    "$builddir/tools/fmemd" --mnode "$dir/mnode.sock" --socket "$dir/fmemd$1.sock" \
        --name "fmemd$1" --workers 2 >>"$dir/fmemd$1.log" 2>&1 &
    eval "d$1=$!"
    waitfor "$dir/fmemd$1.sock" || fail "fmemd$1 did not start"
}
start_fmemd 0
start_fmemd 1

end=$((SECONDS + secs))
seed=1
killed=0 runs=0 restarted=0
declare -A app_svc
while [ $SECONDS -lt $end ]; do
    # keep apps_per applications on each service
    live=()
    for p in "${pids[@]}"; do
        if kill -0 "$p" 2>/dev/null; then live+=("$p"); else
            wait "$p"; rc=$?
            # 0 done, 3 its service went away, 137 killed by us
            case $rc in 0|3|137) ;; *) fail "application $p exited with $rc" ;; esac
        fi
    done
    pids=("${live[@]}")
    for s in 0 1; do
        n=0
        for p in "${pids[@]}"; do [ "${app_svc[$p]}" = "$s" ] && n=$((n + 1)); done
        while [ $n -lt "$apps_per" ]; do
            seed=$((seed + 1))
            "$builddir/tests/soak_app" "unix:$dir/fmemd$s.sock" $((3 + seed % 8)) 3 "$seed" \
                >>"$dir/apps.log" 2>&1 &
            app_svc[$!]=$s
            pids+=("$!")
            n=$((n + 1))
            runs=$((runs + 1))
        done
    done
    # now and then kill an application in the middle of its traffic
    if [ $((RANDOM % 4)) -eq 0 ] && [ ${#pids[@]} -gt 0 ]; then
        victim=${pids[$((RANDOM % ${#pids[@]}))]}
        kill -9 "$victim" 2>/dev/null && killed=$((killed + 1))
    fi
    # half-way: kill fmemd1 under load and start it again
    if [ $restarted -eq 0 ] && [ $SECONDS -ge $((end - secs / 2)) ]; then
        kill -9 "$d1"; wait "$d1" 2>/dev/null
        sleep 1
        start_fmemd 1
        restarted=1
    fi
    sleep 0.5
done
for p in "${pids[@]}"; do
    wait "$p"; rc=$?
    case $rc in 0|3|137) ;; *) fail "application $p exited with $rc" ;; esac
done
pids=()
"$builddir/tools/fmem" status "unix:$dir/mnode.sock" >"$dir/status.txt" 2>&1
kill -TERM "$d0" "$d1"; wait "$d0" "$d1"
sleep 1
"$builddir/tools/fmem" status "file:$dir/pool" >"$dir/pool.txt" 2>&1
grep -q "used 0 B" "$dir/pool.txt" || { cat "$dir/pool.txt"; fail "blocks left in the pool"; }
kill -TERM "$mnode"; wait "$mnode"; mnode=
"$builddir/tools/fmem" verify "file:$dir/pool" >"$dir/verify.txt" 2>&1
grep -q "verifier=clean" "$dir/verify.txt" || { cat "$dir/verify.txt"; fail "verifier"; }
ops=$(awk '/operations/ {s += $3} END {print s + 0}' "$dir/apps.log")
echo "soak: $secs s, 2 services, $runs application runs ($killed killed), fmemd restarted" \
     "under load, $ops operations; pool empty, verifier clean"
grep -E "keys issued|recoveries" "$dir/status.txt"
echo "soak: 1 passed, 0 failed"
