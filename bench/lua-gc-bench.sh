#!/bin/bash
# bench/lua-gc-bench.sh - bench/lua-gc.lua under the stock lua5.4 and under
# fmem-lua, in one run, with ratios against the stock interpreter:
#   lua5.4                 the Debian interpreter, glibc malloc
#   fmem-lua libc          fmem-lua with glibc malloc (the binary's own cost)
#   fmem-lua shm           the heap on directly mapped chunks of a shm: pool
#   fmem-lua region 100%   the heap in a region whose cache holds all of it
#   fmem-lua region 50%    ... whose cache holds half of the heap's peak
#                          (peak measured on shm in the same run)
# Each configuration runs RUNS times (default 3); the best wall and CPU
# (user + system, all threads) times count. SCALE scales the workload.
#
#   make bench-lua    or    top_builddir=. bench/lua-gc-bench.sh [--json FILE]
# --json FILE also writes the figures there: {"scale", "runs", "loadavg",
# "configs": [{"name", "wall", "cpu", "wall_ratio", "cpu_ratio"}, ...]}.
set -u
json=""
if [ "${1:-}" = --json ]; then
    json=${2:?lua-gc-bench: --json needs a file name}
fi
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(dirname "$0")/..}
LUA=${LUA_INTERP:-lua5.4}
runs=${RUNS:-3}
scale=${SCALE:-1}
script=$top_srcdir/bench/lua-gc.lua
host=$top_builddir/bindings/lua/.libs/fmem-lua
[ -x "$host" ] || host=$top_builddir/bindings/lua/fmem-lua
[ -x "$host" ] || { echo "lua-gc-bench: build fmem-lua first (make)" >&2; exit 1; }
command -v "$LUA" >/dev/null || { echo "lua-gc-bench: $LUA not found" >&2; exit 1; }
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
shm=fmem-lua-bench-$$
export FMEM_URI="shm:/$shm?size=1G"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; rm -f "/dev/shm/$shm"' EXIT
unset FMEM_LUA_BACKING FMEM_LUA_STATS

# once NAME CMD...: one run; keeps the best wall and CPU seconds in
# wall[NAME] and cpu[NAME], the fmem-lua statistics in stats[NAME]; the
# checksum must be the same everywhere
declare -A wall cpu stats
once() {
    local name=$1 t w c sum
    shift
    TIMEFORMAT='%R %U %S'
    { time FMEM_LUA_STATS=1 "$@" "$script" "$scale" >"$tmp/out" 2>"$tmp/err"; } 2>"$tmp/time"
    t=$(tail -n 1 "$tmp/time")
    w=$(echo "$t" | awk '{print $1}')
    c=$(echo "$t" | awk '{printf "%.3f", $2 + $3}')
    sum=$(grep '^checksum' "$tmp/out")
    if [ -z "$sum" ] || { [ -n "${want:-}" ] && [ "$sum" != "$want" ]; }; then
        echo "lua-gc-bench: $name: wrong output" >&2
        cat "$tmp/out" "$tmp/err" >&2
        exit 1
    fi
    want=$sum
    if [ -z "${wall[$name]:-}" ] || awk "BEGIN{exit !($w < ${wall[$name]})}"; then wall[$name]=$w; fi
    if [ -z "${cpu[$name]:-}" ] || awk "BEGIN{exit !($c < ${cpu[$name]})}"; then cpu[$name]=$c; fi
    stats[$name]=$(grep '^fmem-lua: backing=' "$tmp/err" | sed 's/^fmem-lua: //')
}
field() { echo "${stats[$1]}" | sed -n "s/.*\<$2=\([0-9]*\).*/\1/p"; }

echo "lua-gc-bench: bench/lua-gc.lua scale $scale, best of $runs runs, pool $FMEM_URI"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# the heap's peak on shm sizes the region configurations
once "fmem-lua shm" env FMEM_LUA_BACKING=shm "$host"
peak=$(field "fmem-lua shm" heap_peak)
mib=$((1024 * 1024))
size=$(((4 * peak + mib - 1) / mib)) # address space: room for fragmentation
[ "$size" -ge 64 ] || size=64
half=$(((peak / 2 + 4095) / 4096 * 4)) # KiB
# the configurations take turns, so that a change of load hits them alike
for ((r = 0; r < runs; r++)); do
    once "lua5.4" "$LUA"
    once "fmem-lua libc" env FMEM_LUA_BACKING=libc "$host"
    [ "$r" = 0 ] || once "fmem-lua shm" env FMEM_LUA_BACKING=shm "$host"
    once "fmem-lua region 100%" env FMEM_LUA_BACKING="region:${size}M:${size}M" "$host"
    once "fmem-lua region 50%" env FMEM_LUA_BACKING="region:${half}K:${size}M" "$host"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

printf '\n%-22s %8s %8s %11s %10s  %s\n' config wall_s cpu_s wall_ratio cpu_ratio notes
for name in "lua5.4" "fmem-lua libc" "fmem-lua shm" "fmem-lua region 100%" "fmem-lua region 50%"; do
    notes=""
    case $name in
    *shm) notes="heap peak $peak B, spills $(field "$name" spills)" ;;
    *region*) notes="cache $(field "$name" cache_bytes) B of ${size} MiB, faults $(field "$name" faults), fetches $(field "$name" fetches), evictions $(field "$name" evictions), writebacks $(field "$name" writebacks), spills $(field "$name" spills)" ;;
    esac
    awk -v n="$name" -v w="${wall[$name]}" -v c="${cpu[$name]}" -v w0="${wall[lua5.4]}" \
        -v c0="${cpu[lua5.4]}" -v notes="$notes" \
        'BEGIN { printf "%-22s %8.3f %8.3f %11.2f %10.2f  %s\n", n, w, c, w / w0, c / c0, notes }'
    awk -v n="$name" -v w="${wall[$name]}" -v c="${cpu[$name]}" -v w0="${wall[lua5.4]}" \
        -v c0="${cpu[lua5.4]}" 'BEGIN { printf "{\"name\": \"%s\", \"wall\": %s, \"cpu\": %s, \"wall_ratio\": %.4f, \"cpu_ratio\": %.4f}\n", n, w, c, w / w0, c / c0 }' \
        >>"$tmp/rows.json"
done
if [ -n "$json" ]; then
    {
        printf '{"benchmark": "lua-gc", "scale": %s, "runs": %s, "cores": %s, "loadavg": "%s", "heap_peak": %s,\n "configs": [' \
            "$scale" "$runs" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$peak"
        paste -sd, "$tmp/rows.json"
        echo ']}'
    } >"$json"
fi
echo
awk -v a="${wall[fmem-lua shm]}" -v b="${wall[fmem-lua region 50%]}" -v w0="${wall[lua5.4]}" \
    'BEGIN { printf "ratio (wall, fmem-lua / lua5.4): shm %.2f, region at 50%% cache %.2f\n", a / w0, b / w0 }'
