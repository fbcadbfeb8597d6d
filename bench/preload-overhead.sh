#!/bin/sh
# preload-overhead.sh - wall time of real programs with libfmem-preload.so
# against the same programs without it, in one run. Runs alternate (plain,
# preloaded, plain, ...) so that load from elsewhere hits both alike; each
# figure is the median of REPS runs. Prints one line per program: seconds
# without, with, their ratio, and the peak bytes the pool held.
#   bench/preload-overhead.sh [REPS]      (default 5; from the build tree)
set -eu
reps=${1:-5}
top=$(cd "$(dirname "$0")/.." && pwd)
lib=${FMEM_PRELOAD_LIB:-$top/.libs/libfmem-preload.so}
[ -f "$lib" ] || { echo "preload-overhead: build first ($lib missing)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

awk 'BEGIN { srand(7); for (i = 0; i < 1500000; i++) printf "%d\n", int(rand() * 1e9) }' >"$tmp/numbers"
head -c 4000000 "$tmp/numbers" >"$tmp/numbers.4m"
cat >"$tmp/lists.py" <<'PY'
a = list(range(4_000_000))
b = [str(i) for i in range(1_000_000)]
d = {i: i * i for i in range(500_000)}
a.extend(a[:1_000_000]); a.sort(reverse=True)
print(len(a), len(b), len(d))
PY

now() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# bench NAME CMD...: stdout of CMD goes to /dev/null (compared once)
bench() {
    name=$1
    shift
    "$@" >"$tmp/out.plain"
    LD_PRELOAD=$lib "$@" >"$tmp/out.pre"
    cmp -s "$tmp/out.plain" "$tmp/out.pre" || { echo "$name: outputs differ" >&2; exit 1; }
    : >"$tmp/plain" && : >"$tmp/pre" && rm -f "$tmp/stats"
    i=0
    while [ $i -lt "$reps" ]; do
        t0=$(now); "$@" >/dev/null; t1=$(now)
        LD_PRELOAD=$lib FMEM_PRELOAD_STATS=$tmp/stats "$@" >/dev/null; t2=$(now)
        echo $((t1 - t0)) >>"$tmp/plain"
        echo $((t2 - t1)) >>"$tmp/pre"
        i=$((i + 1))
    done
    p=$(median <"$tmp/plain") q=$(median <"$tmp/pre")
    peak=$(sed -n 's/.* peak_bytes=\([0-9]*\).*/\1/p' "$tmp/stats" | sort -n | tail -n 1)
    awk -v n="$name" -v p="$p" -v q="$q" -v k="${peak:-0}" \
        'BEGIN { printf "%-22s %9.3f %9.3f %7.3f %10.1f\n", n, p / 1e9, q / 1e9, q / p, k / 1048576 }'
}

echo "preload-overhead: median of $reps alternating runs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-22s %9s %9s %7s %10s\n" program "plain s" "preload s" ratio "peak MiB"
bench "sort -n 13MB" sort -n "$tmp/numbers"
bench "sort --parallel=2" sort --parallel=2 -S 100M "$tmp/numbers"
bench "python3 big lists" "$PY" "$tmp/lists.py"
bench "xz -3 4MB" xz -3 -T1 -c "$tmp/numbers.4m"
bench "gzip -6 13MB" gzip -6 -c "$tmp/numbers"
