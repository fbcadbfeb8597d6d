#!/bin/bash
# preload-overhead.sh - real programs with libfmem-preload.so against the
# same programs without it, in one run. Runs alternate (plain, preloaded,
# plain, ...) so that load from elsewhere hits both alike; each figure is
# the median of REPS runs. Prints one line per program: wall seconds
# without and with the library and their ratio, the same for CPU seconds
# (user + system: less disturbed by other work on the machine), and the
# peak bytes the pool held.
#   bench/preload-overhead.sh [--json FILE] [REPS]   (default 5; from the build tree)
# --json FILE also writes the figures there: {"reps", "loadavg", "programs":
# [{"name", "wall_plain", "wall_preload", "cpu_plain", "cpu_preload",
# "peak_bytes"}, ...]}.
set -eu
json=""
if [ "${1:-}" = --json ]; then
    json=${2:?preload-overhead: --json needs a file name}
    shift 2
fi
reps=${1:-5}
top=$(cd "$(dirname "$0")/.." && pwd)
lib=${FMEM_PRELOAD_LIB:-$top/.libs/libfmem-preload.so}
[ -f "$lib" ] || { echo "preload-overhead: build first ($lib missing)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

awk 'BEGIN { srand(7); for (i = 0; i < 1500000; i++) printf "%d\n", int(rand() * 1e9) }' >"$tmp/numbers"
head -c 2000000 "$tmp/numbers" >"$tmp/numbers.2m"
cat >"$tmp/lists.py" <<'PY'
a = list(range(4_000_000))
b = [str(i) for i in range(1_000_000)]
d = {i: i * i for i in range(500_000)}
a.extend(a[:1_000_000]); a.sort(reverse=True)
print(len(a), len(b), len(d))
PY

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# timed FILE CMD...: append "wall cpu" seconds of CMD to FILE
timed() {
    local out=$1 TIMEFORMAT="%R %U %S"
    shift
    { time "$@" >/dev/null 2>&1; } 2>"$tmp/t"
    awk '{ print $1, $2 + $3 }' "$tmp/t" >>"$out"
}

# bench NAME CMD...: stdout of CMD goes to /dev/null (compared once)
bench() {
    name=$1
    shift
    "$@" >"$tmp/out.plain"
    LD_PRELOAD=$lib "$@" >"$tmp/out.pre"
    cmp -s "$tmp/out.plain" "$tmp/out.pre" || { echo "$name: outputs differ" >&2; exit 1; }
    : >"$tmp/plain" && : >"$tmp/pre" && rm -f "$tmp/stats"
    for ((i = 0; i < reps; i++)); do
        timed "$tmp/plain" "$@"
        timed "$tmp/pre" env LD_PRELOAD="$lib" FMEM_PRELOAD_STATS="$tmp/stats" "$@"
    done
    local pw pc qw qc peak
    pw=$(cut -d' ' -f1 "$tmp/plain" | median) pc=$(cut -d' ' -f2 "$tmp/plain" | median)
    qw=$(cut -d' ' -f1 "$tmp/pre" | median) qc=$(cut -d' ' -f2 "$tmp/pre" | median)
    peak=$(sed -n 's/.* peak_bytes=\([0-9]*\).*/\1/p' "$tmp/stats" | sort -n | tail -n 1)
    awk -v n="$name" -v pw="$pw" -v qw="$qw" -v pc="$pc" -v qc="$qc" -v k="${peak:-0}" \
        'BEGIN { printf "%-20s %7.3f %7.3f %6.3f   %7.3f %7.3f %6.3f %9.1f\n",
                 n, pw, qw, qw / pw, pc, qc, qc / pc, k / 1048576 }'
    printf '{"name": "%s", "wall_plain": %s, "wall_preload": %s, "cpu_plain": %s, "cpu_preload": %s, "peak_bytes": %s}\n' \
        "$name" "$pw" "$qw" "$pc" "$qc" "${peak:-0}" >>"$tmp/rows.json"
}

echo "preload-overhead: median of $reps alternating runs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-20s %23s   %22s %9s\n" "" "wall s: plain preload ratio" "cpu s: plain preload ratio" "peak"
printf "%-20s %7s %7s %6s   %7s %7s %6s %9s\n" program plain preload ratio plain preload ratio MiB
bench "sort -n 13MB" sort -n "$tmp/numbers"
bench "sort --parallel=2" sort --parallel=2 -S 100M "$tmp/numbers"
bench "python3 big lists" "$PY" "$tmp/lists.py"
bench "xz -3 2MB" xz -3 -T1 -c "$tmp/numbers.2m"
bench "gzip -6 13MB" gzip -6 -c "$tmp/numbers"

if [ -n "$json" ]; then
    {
        printf '{"benchmark": "preload-overhead", "reps": %s, "cores": %s, "loadavg": "%s",\n "programs": [' \
            "$reps" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"
        paste -sd, "$tmp/rows.json"
        echo ']}'
    } >"$json"
fi
