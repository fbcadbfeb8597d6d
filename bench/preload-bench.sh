#!/bin/bash
# preload-bench.sh - libfmem-preload.so against plain malloc, in one run:
#   1. real programs (whichever are installed: sort, gzip, xz, zstd,
#      sqlite3, perl, python3 with numpy, and with numpy on arrays of
#      exactly 1 MiB), plain and preloaded alternating,
#      three runs each: median CPU seconds (user + system) and their ratio
#   2. allocate-touch-free of a 200 KB block (bench/preload-alloc): CPU ns
#      per round and the ratio
#   3. the fork pause: python3 holding a 400 MiB array, os.fork() timed in
#      the parent (the first fork, and the median of 5; and the parent
#      thread's CPU time in the first fork), plain, preloaded
#      with the default private pool and preloaded with a named shm: pool
#      (whose first fork remaps the blocks copy-on-write)
#      and a fork+exec loop (python3 holding 2000 values of 200 KB runs
#      /bin/true 40 times through os.fork + os.execv: ms per spawn)
#   4. redis-server, if installed: BGSAVE fork pause (latest_fork_usec)
#      with 400 MB of 200 KB values (plain, private pool, named pool) and
#      the main thread's CPU time over the BGSAVE command, and
#      redis-benchmark SET/GET with 200 KB values (requests per second,
#      and the server's CPU time over both, which a loaded machine
#      disturbs less)
#   make bench-preload   (or: bench/preload-bench.sh [RUNS], from the build tree)
# PRELOAD_BENCH_PARTS=fork runs only 3 and 4.
# Prints the load average first: ratios, not absolute times, are the result.
set -eu
runs=${1:-3}
top=$(cd "$(dirname "$0")/.." && pwd)
build=${top_builddir:-$top}
build=$(cd "$build" && pwd)
lib=${FMEM_PRELOAD_LIB:-$build/.libs/libfmem-preload.so}
[ -f "$lib" ] || { echo "preload-bench: build first ($lib missing)" >&2; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)
tmp=$(mktemp -d /tmp/fmem-preload-cost-bench.XXXXXX)
# the named pool of the fork and BGSAVE figures
named=shm:/fmem-preload-bench-$$
named_uri="$named?size=1G"
redis_pid=
cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    rm -f "/dev/shm/fmem-preload-bench-$$" "/dev/shm/fmem-preload-bench-$$".*
    rm -rf "$tmp"
}
trap cleanup EXIT
have() { command -v "$1" >/dev/null 2>&1; }

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
cpu_of() { # CMD...: CPU seconds (user + sys) of CMD and its children
    local TIMEFORMAT="%U %S"
    { time "$@" >/dev/null 2>&1; } 2>"$tmp/t"
    awk '{ print $1 + $2 }' "$tmp/t"
}

echo "preload-bench: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $runs runs each"
parts=${PRELOAD_BENCH_PARTS:-all}
if [ "$parts" = all ]; then
echo
printf "%-24s %9s %9s %7s %9s\n" program "cpu plain" preload ratio "pool MiB"
bench() {
    local name=$1
    shift
    "$@" >"$tmp/out.plain" 2>/dev/null
    LD_PRELOAD=$lib "$@" >"$tmp/out.pre" 2>/dev/null
    cmp -s "$tmp/out.plain" "$tmp/out.pre" || { echo "$name: outputs differ" >&2; exit 1; }
    : >"$tmp/plain"; : >"$tmp/pre"; rm -f "$tmp/stats"
    for ((i = 0; i < runs; i++)); do
        cpu_of "$@" >>"$tmp/plain"
        cpu_of env LD_PRELOAD="$lib" FMEM_PRELOAD_STATS="$tmp/stats" "$@" >>"$tmp/pre"
    done
    local pc qc peak
    pc=$(median <"$tmp/plain") qc=$(median <"$tmp/pre")
    peak=$(sed -n 's/.* peak_bytes=\([0-9]*\).*/\1/p' "$tmp/stats" 2>/dev/null | sort -n | tail -n 1)
    awk -v n="$name" -v p="$pc" -v q="$qc" -v k="${peak:-0}" \
        'BEGIN { printf "%-24s %9.3f %9.3f %7.2f %9.1f\n", n, p, q, (p > 0 ? q / p : 0), k / 1048576 }'
}

awk 'BEGIN { srand(7); for (i = 0; i < 1500000; i++) printf "%d\n", int(rand() * 1e9) }' >"$tmp/numbers"
head -c 1000000 "$tmp/numbers" >"$tmp/numbers.1m"
have sort && bench "sort -n 13MB" sort -n "$tmp/numbers"
have sort && bench "sort --parallel=2" sort --parallel=2 -S 100M "$tmp/numbers"
have gzip && bench "gzip -6 13MB" gzip -6 -c "$tmp/numbers"
have xz && bench "xz -3 1MB" xz -3 -T1 -c "$tmp/numbers.1m"
have zstd && bench "zstd -19 1MB" zstd -19 -T1 -c "$tmp/numbers.1m"
if have sqlite3; then
    cat >"$tmp/q.sql" <<'SQL'
CREATE TABLE t(a INTEGER, b TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 300000)
INSERT INTO t SELECT (x * 7919) % 1000003, printf('%08d-%s', x, hex(x)) FROM c;
CREATE INDEX ti ON t(a);
SELECT count(*), sum(a), max(b) FROM t WHERE a % 3 = 0;
SELECT b FROM t ORDER BY b DESC LIMIT 3;
SQL
    bench "sqlite3 300k rows" sh -c "sqlite3 :memory: <'$tmp/q.sql'"
fi
have perl && bench "perl 200MB string x20" perl -e '
my $s = "x" x (200 << 20); my $n = 0;
for (1 .. 20) { my $t = $s; substr($t, $_, 1) = "y"; $n += length($t) }
print "$n\n";'
if "$PY" -c 'import numpy' 2>/dev/null; then
    cat >"$tmp/np.py" <<'PY'
import numpy as np
rng = np.random.default_rng(1)
s = 0.0
for i in range(15):
    a = rng.random(2_000_000)
    b = np.sort(a) * 2 + a
    s += float(b[::1000].sum())
print(round(s, 3))
PY
    bench "python3 numpy" "$PY" "$tmp/np.py"
    # arrays of exactly 1 MiB: blocks that touch make numpy run scalar loops
    cat >"$tmp/np1m.py" <<'PY'
import numpy as np
a = np.random.default_rng(1).random(131072)
s = 0.0
for _ in range(1000):
    s += float(np.log10(np.sqrt(a))[::4096].sum())
print(round(s, 3))
PY
    bench "python3 numpy 1 MiB" "$PY" "$tmp/np1m.py"
fi

echo
printf "%-24s %9s %9s %7s\n" "allocate-touch-free" "ns plain" preload ratio
: >"$tmp/ap"; : >"$tmp/aq"
for ((i = 0; i < runs; i++)); do
    "$build/bench/preload-alloc" 204800 100000 >>"$tmp/ap"
    LD_PRELOAD=$lib "$build/bench/preload-alloc" 204800 100000 >>"$tmp/aq"
done
awk -v p="$(median <"$tmp/ap")" -v q="$(median <"$tmp/aq")" \
    'BEGIN { printf "%-24s %9.1f %9.1f %7.2f\n", "200 KB block", p, q, q / p }'
fi

echo
printf "%-24s %9s %9s %7s %9s %7s\n" "fork pause" "ms plain" private ratio named ratio
cat >"$tmp/fork.py" <<'PY'
import os, time
try:
    import numpy as np
    a = np.ones(400 << 17)          # 400 MiB of float64, every page written
except ImportError:
    a = bytearray(b"\1" * (400 << 20))
ts, cpu = [], []
for _ in range(5):
    c = time.thread_time()
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    ts.append(time.perf_counter() - t)
    cpu.append(time.thread_time() - c)
    os.waitpid(pid, 0)
print(ts[0] * 1000, sorted(ts)[2] * 1000, cpu[0] * 1000)
PY
: >"$tmp/fp"; : >"$tmp/fq"; : >"$tmp/fn"
for ((i = 0; i < runs; i++)); do
    "$PY" "$tmp/fork.py" >>"$tmp/fp"
    LD_PRELOAD=$lib "$PY" "$tmp/fork.py" >>"$tmp/fq"
    LD_PRELOAD=$lib FMEM_PRELOAD_URI="$named_uri" "$PY" "$tmp/fork.py" >>"$tmp/fn"
    rm -f "/dev/shm/fmem-preload-bench-$$" "/dev/shm/fmem-preload-bench-$$".*
done
# three figures side by side: plain, private pool, named pool
row3() {
    awk -v t="$1" -v p="$2" -v q="$3" -v n="$4" -v f="$5" 'BEGIN {
        printf "%-24s " f " " f " %7.2f " f " %7.2f\n", t, p, q, (p ? q / p : 0), n, (p ? n / p : 0) }'
}
c1() { cut -d' ' -f"$1" "$2" | median; }
row3 "os.fork 400MiB, first" "$(c1 1 "$tmp/fp")" "$(c1 1 "$tmp/fq")" "$(c1 1 "$tmp/fn")" "%9.2f"
row3 "os.fork 400MiB, median" "$(c1 2 "$tmp/fp")" "$(c1 2 "$tmp/fq")" "$(c1 2 "$tmp/fn")" "%9.2f"
# the parent's CPU time in the first fork: what the load disturbs least
row3 "first fork, CPU ms" "$(c1 3 "$tmp/fp")" "$(c1 3 "$tmp/fq")" "$(c1 3 "$tmp/fn")" "%9.2f"

# fork+exec: python3 holding 2000 values of 200 KB (400 MB, the redis case
# below) runs /bin/true 40 times with os.fork + os.execv, writing one
# value between spawns: wall ms per spawn (median of the runs)
cat >"$tmp/spawn.py" <<'PY'
import os, time
vals = [bytearray(b"\1" * 204800) for _ in range(2000)]
t = time.perf_counter()
for i in range(40):
    pid = os.fork()
    if pid == 0:
        os.execv("/bin/true", ["true"])
    os.waitpid(pid, 0)
    vals[i][0] = 2
print((time.perf_counter() - t) * 1000 / 40)
PY
: >"$tmp/sp"; : >"$tmp/sq"; : >"$tmp/sn"
for ((i = 0; i < runs; i++)); do
    "$PY" "$tmp/spawn.py" >>"$tmp/sp"
    LD_PRELOAD=$lib "$PY" "$tmp/spawn.py" >>"$tmp/sq"
    LD_PRELOAD=$lib FMEM_PRELOAD_URI="$named_uri" "$PY" "$tmp/spawn.py" >>"$tmp/sn"
    rm -f "/dev/shm/fmem-preload-bench-$$" "/dev/shm/fmem-preload-bench-$$".*
done
row3 "fork+exec, 2000x200KB" "$(median <"$tmp/sp")" "$(median <"$tmp/sq")" "$(median <"$tmp/sn")" "%9.2f"

if ! have redis-server || ! have redis-cli; then
    echo
    echo "redis: redis-server not installed (apt-get install redis-server); skipped"
    exit 0
fi
# redis_run PRELOAD(0|1): start a server on a socket of our own, fill it,
# print "fork_usec set_rps get_rps peak_bytes server_cpu_ms"
redis_run() {
    local sock=$tmp/redis.sock pre=$1 env=()
    [ "$pre" = 1 ] && env=(LD_PRELOAD="$lib" FMEM_PRELOAD_STATS="$tmp/redis.stats")
    [ "$pre" = 2 ] && env=(LD_PRELOAD="$lib" FMEM_PRELOAD_URI="$named_uri"
                           FMEM_PRELOAD_STATS="$tmp/redis.stats")
    rm -f "$tmp/redis.stats" "$tmp/dump.rdb"
    env "${env[@]}" redis-server --port 0 --unixsocket "$sock" --dir "$tmp" --save "" \
        --appendonly no --enable-debug-command yes --rdbcompression no --daemonize no \
        >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 50); do redis-cli -s "$sock" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -s "$sock" debug populate 2000 key 204800 >/dev/null
    # the main thread's CPU time over the bgsave command (the fork and its
    # handlers; nanoseconds, /proc/PID/schedstat): what the load disturbs least
    local fork_cpu0 fork_cpu1
    fork_cpu0=$(cut -d' ' -f1 /proc/$redis_pid/task/$redis_pid/schedstat)
    redis-cli -s "$sock" bgsave >/dev/null
    fork_cpu1=$(cut -d' ' -f1 /proc/$redis_pid/task/$redis_pid/schedstat)
    while redis-cli -s "$sock" info persistence | grep -q 'rdb_bgsave_in_progress:1'; do sleep 0.1; done
    local fork_us
    fork_us=$(redis-cli -s "$sock" info stats | sed -n 's/^latest_fork_usec:\([0-9]*\).*/\1/p')
    local set get cpu0 cpu1
    # the server's CPU time over the benchmark: unlike requests per second
    # it does not depend on what else the machine runs
    cpu0=$(awk '{ print $14 + $15 }' /proc/$redis_pid/stat)
    redis-benchmark -s "$sock" -t set,get -d 204800 -n 1000 -r 1000 -q 2>/dev/null | tr '\r' '\n' \
        >"$tmp/rb.out"
    cpu1=$(awk '{ print $14 + $15 }' /proc/$redis_pid/stat)
    set=$(sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p' "$tmp/rb.out")
    get=$(sed -n 's/^GET: \([0-9.]*\) requests per second.*/\1/p' "$tmp/rb.out")
    redis-cli -s "$sock" shutdown nosave >/dev/null 2>&1 || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=
    local peak
    peak=$(sed -n 's/.* peak_bytes=\([0-9]*\).*/\1/p' "$tmp/redis.stats" 2>/dev/null | sort -n | tail -n 1)
    rm -f "/dev/shm/fmem-preload-bench-$$" "/dev/shm/fmem-preload-bench-$$".*
    echo "${fork_us:-0} ${set:-0} ${get:-0} ${peak:-0} $(( (cpu1 - cpu0) * 1000 / $(getconf CLK_TCK) ))" \
        "$(( (fork_cpu1 - fork_cpu0) / 1000 ))"
}
: >"$tmp/rp"; : >"$tmp/rq"; : >"$tmp/rn"
for ((i = 0; i < runs; i++)); do
    redis_run 0 >>"$tmp/rp"
    redis_run 1 >>"$tmp/rq"
    redis_run 2 >>"$tmp/rn"
done
col() { cut -d' ' -f"$1" "$2" | median; }
echo
printf "%-24s %9s %9s %7s %9s %7s\n" "redis 400 MB, 200 KB" plain private ratio named ratio
row3 "BGSAVE fork pause ms" "$(col 1 "$tmp/rp" | awk '{ print $1 / 1000 }')" \
    "$(col 1 "$tmp/rq" | awk '{ print $1 / 1000 }')" "$(col 1 "$tmp/rn" | awk '{ print $1 / 1000 }')" "%9.2f"
row3 "BGSAVE thread CPU ms" "$(col 6 "$tmp/rp" | awk '{ print $1 / 1000 }')" \
    "$(col 6 "$tmp/rq" | awk '{ print $1 / 1000 }')" "$(col 6 "$tmp/rn" | awk '{ print $1 / 1000 }')" "%9.2f"
echo
printf "%-24s %9s %9s %7s\n" "redis, private pool" plain preload ratio
awk -v p="$(col 2 "$tmp/rp")" -v q="$(col 2 "$tmp/rq")" \
    'BEGIN { printf "%-24s %9.0f %9.0f %7.2f\n", "SET requests/s", p, q, q / p }'
awk -v p="$(col 3 "$tmp/rp")" -v q="$(col 3 "$tmp/rq")" \
    'BEGIN { printf "%-24s %9.0f %9.0f %7.2f\n", "GET requests/s", p, q, q / p }'
awk -v p="$(col 5 "$tmp/rp")" -v q="$(col 5 "$tmp/rq")" \
    'BEGIN { printf "%-24s %9.0f %9.0f %7.2f\n", "server CPU ms, SET+GET", p, q, (p ? q / p : 0) }'
echo "redis preloaded: pool peak $(( $(col 4 "$tmp/rq") >> 20 )) MiB"
