#!/bin/sh
# libfmem-preload.so under real programs: the malloc-family checker, sort
# on a multi-MB file, python3 building big lists, gzip and xz on a large
# input. Each output must equal the run without the library, the pool must
# hold the large buffers (counters at exit, and a named pool seen from
# outside while a program runs), and bad environment values must give one
# clear line and leave the program on the system allocator.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
lib=$(cd "$top_builddir" && pwd)/.libs/libfmem-preload.so
tests=$top_builddir/gc_hooks/tests
[ -f "$lib" ] || { echo "preload: $lib not built"; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
tmp=$(mktemp -d)
pool="shm:/fmem-preload-test-$$"
trap '"$tests/pool_status" -u "$pool" 2>/dev/null; "$tests/pool_status" -u "$checkpool" 2>/dev/null; rm -rf "$tmp"' EXIT
checkpool=
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
unset FMEM_PRELOAD_THRESHOLD FMEM_PRELOAD_URI FMEM_PRELOAD_STATS FMEM_URI

# run NAME CMD...: stdout of CMD without and with the library must match,
# and the pool must have held large blocks (peak_bytes > 0)
run() {
    name=$1
    shift
    "$@" >"$tmp/$name.plain" 2>/dev/null
    rm -f "$tmp/$name.stats"
    LD_PRELOAD=$lib FMEM_PRELOAD_STATS=$tmp/$name.stats "$@" >"$tmp/$name.pre" 2>"$tmp/$name.err"
    if ! cmp -s "$tmp/$name.plain" "$tmp/$name.pre"; then
        bad "$name: output differs with the library"
        return
    fi
    peak=$(sed -n 's/.* peak_bytes=\([0-9]*\).*/\1/p' "$tmp/$name.stats" 2>/dev/null | sort -n | tail -n 1)
    if [ "${peak:-0}" -gt 0 ]; then
        ok "$name: identical output, peak $peak bytes in the pool"
    else
        bad "$name: no large block went to the pool"; cat "$tmp/$name.stats" "$tmp/$name.err" 2>/dev/null
    fi
}

# the malloc family itself, on a named pool: "in the pool" is then a
# mapping of its data file (an in-process pool is anonymous memory)
checkpool="shm:/fmem-preload-check-$$"
if LD_PRELOAD=$lib FMEM_PRELOAD_URI="$checkpool?size=1G" PRELOAD_CHECK_FILE="/dev/shm/fmem-preload-check-$$.data" \
        "$tests/preload_check" >"$tmp/check.out" 2>&1; then
    ok "$(tail -n 1 "$tmp/check.out")"
else
    bad "preload_check"; cat "$tmp/check.out"
fi

# sizes around every boundary of the size plan, content checked, on the
# default pool and on a named one: every one of them must be a pool block
# (the checks of its usable size would pass on the system allocator too)
for where in default named; do
    rm -f "$tmp/sizes.stats"
    if [ $where = named ]; then set -- FMEM_PRELOAD_URI="$checkpool?size=1G"; else set --; fi
    env LD_PRELOAD=$lib FMEM_PRELOAD_STATS="$tmp/sizes.stats" "$@" "$tests/preload_sizes" \
        >"$tmp/sizes.out" 2>&1
    rc=$?
    allocs=$(sed -n 's/.* large_allocs=\([0-9]*\).*/\1/p' "$tmp/sizes.stats" 2>/dev/null | sort -n | tail -n 1)
    fbs=$(sed -n 's/.* fallbacks=\([0-9]*\).*/\1/p' "$tmp/sizes.stats" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
    if [ $rc -eq 0 ] && [ "${allocs:-0}" -ge 300 ] && [ "$fbs" -eq 0 ]; then
        ok "sizes, $where pool: $(tail -n 1 "$tmp/sizes.out"), $allocs pool blocks"
    else
        bad "sizes, $where pool: rc=$rc allocs=$allocs fallbacks=$fbs"; cat "$tmp/sizes.out" "$tmp/sizes.stats"
    fi
    "$tests/pool_status" -u "$checkpool" 2>/dev/null
done
set --

# a request larger than the pool's room: the system allocator serves it,
# and the counters say why
rm -f "$tmp/room.stats"
out=$(LD_PRELOAD=$lib FMEM_PRELOAD_URI="mem:?size=64M" FMEM_PRELOAD_STATS="$tmp/room.stats" \
    "$tests/preload_env" -k free 100000000 2>&1)
if [ "$out" = done ] && grep -q ' fallbacks=1 .*no_room=1 ' "$tmp/room.stats"; then
    ok "100 MB on a 64 MiB pool: served by the system, counted (no_room=1)"
else
    bad "no room: out=$out stats: $(cat "$tmp/room.stats" 2>&1)"
fi

# fork from one thread while another opens the pool: no child hangs
# (on a named pool: a child's block is "in a pool" when it is in a data file)
if LD_PRELOAD=$lib FMEM_PRELOAD_URI="$checkpool?size=256M" "$tests/preload_fork_open" 40 \
        >"$tmp/forkopen.out" 2>&1; then
    ok "$(tail -n 1 "$tmp/forkopen.out")"
else
    bad "preload_fork_open"; cat "$tmp/forkopen.out"
fi
# the same on the default private pool (its blocks: one anonymous mapping
# of 2 GiB and more)
if LD_PRELOAD=$lib "$tests/preload_fork_open" 20 >"$tmp/forkopen.out" 2>&1; then
    ok "default pool: $(tail -n 1 "$tmp/forkopen.out")"
else
    bad "preload_fork_open, default pool"; cat "$tmp/forkopen.out"
fi

# inputs: 3 MB of numbers in a fixed pseudo-random order (kept small: the
# whole script runs each program twice)
awk 'BEGIN { srand(42); for (i = 0; i < 300000; i++) printf "%d\n", int(rand() * 1e9) }' >"$tmp/numbers"
run sort sort -n "$tmp/numbers"
run sort-threads sort --parallel=2 -S 64M "$tmp/numbers"
run python $PY -c '
import hashlib
a = list(range(1_000_000))
b = [str(i) for i in range(200_000)]
d = {i: i * i for i in range(100_000)}
a.extend(a[:300_000]); a.sort(reverse=True)
print(len(a), sum(a[:1000]), hashlib.sha256(" ".join(b).encode()).hexdigest(), sum(d.values()))'
head -c 1000000 "$tmp/numbers" >"$tmp/numbers.1m"
head -n 30000 "$tmp/numbers" >"$tmp/small"
run xz sh -c "xz -1 -T1 -c '$tmp/numbers.1m' | xz -d -c | md5sum; xz -1 -T1 -c '$tmp/numbers.1m' | md5sum"
"$tests/pool_status" -u "$checkpool" 2>/dev/null
PRELOAD_CHECK_FILE="/dev/shm/fmem-preload-check-$$.data" "$tests/preload_check" >/dev/null 2>&1 &&
    bad "preload_check passes without the library (its pool test is void)"
gzip -6 -c "$tmp/numbers" >"$tmp/gz.plain"
LD_PRELOAD=$lib gzip -6 -c "$tmp/numbers" >"$tmp/gz.pre"
cmp -s "$tmp/gz.plain" "$tmp/gz.pre" && ok "gzip: identical output" || bad "gzip: output differs"

# a named pool shows a running program's large buffers (a 16 MB list) from
# outside
mkfifo "$tmp/to" "$tmp/from"
LD_PRELOAD=$lib FMEM_PRELOAD_URI="$pool?size=256M" $PY -c '
import sys
x = list(range(2_000_000))
print("ready", flush=True)
sys.stdin.readline()
print(sum(x))' <"$tmp/to" >"$tmp/from" 2>"$tmp/named.err" &
exec 3>"$tmp/to" 4<"$tmp/from"
read -r line <&4
during=$("$tests/pool_status" "$pool" | sed -n 's/allocated=\([0-9]*\).*/\1/p')
echo >&3
read -r total <&4
exec 3>&- 4<&-
wait
after=$("$tests/pool_status" "$pool" | sed -n 's/allocated=\([0-9]*\).*/\1/p')
if [ "$line" = ready ] && [ "$total" = 1999999000000 ] && [ "${during:-0}" -ge 16000000 ]; then
    ok "named pool: ${during} bytes allocated while python3 ran, ${after:-?} after it exited"
else
    bad "named pool: line=$line total=$total during=$during"; cat "$tmp/named.err"
fi

# bad values: one clear line, the program runs on the system allocator
badenv() {
    what=$1 pattern=$2
    shift 2
    out=$(env LD_PRELOAD="$lib" "$@" FMEM_PRELOAD_STATS="$tmp/bad.stats" sort -n "$tmp/small" 2>"$tmp/bad.err" | md5sum)
    want=$(sort -n "$tmp/small" | md5sum)
    lines=$(grep -c 'fmem-preload: ' "$tmp/bad.err")
    if [ "$out" = "$want" ] && grep -q "$pattern" "$tmp/bad.err" && [ "$lines" -eq 1 ]; then
        ok "$what: $(cat "$tmp/bad.err")"
    else
        bad "$what: output ok? $([ "$out" = "$want" ] && echo yes || echo no); stderr:"; cat "$tmp/bad.err"
    fi
    rm -f "$tmp/bad.stats"
}
badenv "threshold abc" "FMEM_PRELOAD_THRESHOLD='abc' is not a size" FMEM_PRELOAD_THRESHOLD=abc
badenv "threshold 12Q" "FMEM_PRELOAD_THRESHOLD='12Q'" FMEM_PRELOAD_THRESHOLD=12Q
badenv "threshold 0" "FMEM_PRELOAD_THRESHOLD='0'" FMEM_PRELOAD_THRESHOLD=0
badenv "threshold overflow" "is not a size" FMEM_PRELOAD_THRESHOLD=99999999999999999999G
badenv "empty uri" "FMEM_PRELOAD_URI is empty" FMEM_PRELOAD_URI=
badenv "bad uri" "pool nosuch:/x: .*system allocator" FMEM_PRELOAD_URI=nosuch:/x
badenv "child remap typo" "FMEM_PRELOAD_CHILD_REMAP='eagr' must be eager or lazy" FMEM_PRELOAD_CHILD_REMAP=eagr
badenv "two-node pool" "pool mem:?size=2M.*one memory node" "FMEM_PRELOAD_URI=mem:?size=2M&nodes=2"
out=$(LD_PRELOAD=$lib FMEM_PRELOAD_STATS=yes /bin/echo hi 2>"$tmp/bad.err")
[ "$out" = hi ] && grep -q "FMEM_PRELOAD_STATS='yes' must be" "$tmp/bad.err" &&
    ok "stats yes: $(cat "$tmp/bad.err")" || bad "stats yes"
# a good threshold is taken
LD_PRELOAD=$lib FMEM_PRELOAD_THRESHOLD=4M FMEM_PRELOAD_STATS="$tmp/t.stats" sort -n "$tmp/small" >/dev/null
grep -q 'threshold=4194304 ' "$tmp/t.stats" && ok "threshold 4M taken" || bad "threshold 4M: $(cat "$tmp/t.stats")"

echo "preload: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
