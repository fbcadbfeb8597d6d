#!/bin/sh
# libfmem-preload.so: what it costs beyond plain malloc.
#  - a program that overwrites its environment and argv strings keeps its
#    pool and counters (settings are copied when the library loads)
#  - fork with a private pool copies nothing (copy-on-write), children see
#    a snapshot, and any number of fork generations allocate from a pool
#  - freed blocks are reused (allocate-touch-free counts reused blocks)
#  - processes release their user id in a named pool, or the next one
#    recovers the ids of dead processes: 300 runs on a pool of 255 ids;
#    20 that exit holding blocks leave nothing once the next one has run
#  - `fmem verify` and `fmem recover` work on a pool whose user table is full
#  - the default private pool lays objects out densely: 400 blocks of
#    200 KB span at most 1.3 times their bytes (fork copies, and exec frees,
#    page tables for that span)
#  - a preloaded program maps no library of the ssd: and zmem: backends
set -u
top_builddir=${top_builddir:-.}
lib=$(cd "$top_builddir" && pwd)/.libs/libfmem-preload.so
tests=$top_builddir/gc_hooks/tests
fmem=$top_builddir/tools/fmem
[ -f "$lib" ] || { echo "preload-cost: $lib not built"; exit 1; }
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)
tmp=$(mktemp -d)
pool="shm:/fmem-preload-cost-$$"
trap '"$tests/pool_status" -u "$pool" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
unset FMEM_PRELOAD_THRESHOLD FMEM_PRELOAD_URI FMEM_PRELOAD_STATS FMEM_URI
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" "$2"; }

# settings survive a rewritten environment
out=$(LD_PRELOAD=$lib FMEM_PRELOAD_URI="$pool?size=64M" FMEM_PRELOAD_STATS="$tmp/env.stats" \
    "$tests/preload_env" hold 2>"$tmp/env.err")
if [ "$out" = done ] && [ "$(field large_allocs "$tmp/env.stats" 2>/dev/null)" = 1 ] &&
    [ "$(field fallbacks "$tmp/env.stats")" = 0 ] && [ ! -s "$tmp/env.err" ]; then
    ok "environment rewritten: the block came from the pool, counters written"
else
    bad "environment rewritten: out=$out stats: $(cat "$tmp/env.stats" 2>&1) err: $(cat "$tmp/env.err")"
fi
"$tests/pool_status" -u "$pool" 2>/dev/null

# fork with the default (private) pool: nothing copied, snapshots, and
# twelve generations each allocating from a pool
LD_PRELOAD=$lib FMEM_PRELOAD_STATS="$tmp/fork.stats" $PY -c '
import os, sys
a = bytearray(64 << 20); a[0] = 1; a[-1] = 2
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(r, 1)           # parent wrote after the fork: not seen here
    ok = a[0] == 1 and a[-1] == 2
    a[0] = 9                # not seen by the parent
    sys.exit(0 if ok else 1)
a[-1] = 7
os.write(w, b"x")
_, st = os.waitpid(pid, 0)
assert st == 0 and a[0] == 1, "fork snapshot broken"
def gen(n):
    b = bytearray(8 << 20); b[5] = n
    if n == 0:
        return 0
    pid = os.fork()
    if pid == 0:
        rc = gen(n - 1)
        sys.exit(rc if b[5] == n else 1)  # normal exit: counters written
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st)
sys.exit(gen(12))
' >"$tmp/fork.out" 2>&1
rc=$?
copied=$(field copied_at_fork "$tmp/fork.stats" | sort -n | tail -n 1)
fb=$(field fallbacks "$tmp/fork.stats" | sort -n | tail -n 1)
n=$(wc -l <"$tmp/fork.stats")
if [ $rc -eq 0 ] && [ "${copied:-x}" = 0 ] && [ "${fb:-x}" = 0 ] && [ "$n" -ge 14 ]; then
    ok "fork, private pool: snapshots hold, nothing copied, 12 generations, no fallback ($n processes)"
else
    bad "fork, private pool: rc=$rc copied=$copied fallbacks=$fb processes=$n"; cat "$tmp/fork.out" "$tmp/fork.stats"
fi

# the same twenty generations deep on a named pool: each child copies
# its blocks (the pool is shared) and then allocates from the pool again
rm -f "$tmp/gen.stats"
LD_PRELOAD=$lib FMEM_PRELOAD_URI="$pool?size=256M" FMEM_PRELOAD_STATS="$tmp/gen.stats" $PY -c '
import os, sys
def gen(n):
    b = bytearray(1 << 20); b[5] = n
    if n == 0:
        return 0
    pid = os.fork()
    if pid == 0:
        rc = gen(n - 1)
        sys.exit(rc if b[5] == n else 1)
    _, st = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(st)
sys.exit(gen(20))
' >"$tmp/gen.out" 2>&1
rc=$?
fb=$(field fallbacks "$tmp/gen.stats" | awk '{ s += $1 } END { print s + 0 }')
n=$(wc -l <"$tmp/gen.stats")
if [ $rc -eq 0 ] && [ "$fb" -eq 0 ] && [ "$n" -eq 21 ]; then
    ok "fork, named pool: 20 generations, every block in the pool"
else
    bad "fork, named pool: rc=$rc fallbacks=$fb processes=$n"; cat "$tmp/gen.out"
fi
"$tests/pool_status" -u "$pool" 2>/dev/null

# allocate-touch-free reuses blocks
LD_PRELOAD=$lib FMEM_PRELOAD_STATS="$tmp/alloc.stats" "$top_builddir/bench/preload-alloc" 204800 2000 >/dev/null
reused=$(field reused "$tmp/alloc.stats")
if [ "${reused:-0}" -ge 1990 ]; then
    ok "allocate-touch-free: $reused of 2000 blocks reused"
else
    bad "allocate-touch-free: reused=$reused"; cat "$tmp/alloc.stats"
fi

# 300 processes on a pool of 255 user ids: first 270 that exit holding a
# block (their ids stay until recovered), then 30 that free it (they give
# their id back at exit)
uri="$pool?size=64M"
i=0
while [ $i -lt 300 ]; do
    mode=hold
    [ $i -ge 270 ] && mode=free
    LD_PRELOAD=$lib FMEM_PRELOAD_URI="$uri" FMEM_PRELOAD_STATS="$tmp/uid.stats" \
        "$tests/preload_env" -k $mode 131072 >/dev/null 2>>"$tmp/uid.err"
    i=$((i + 1))
done
fbs=$(field fallbacks "$tmp/uid.stats" | awk '{ s += $1 } END { print s + 0 }')
lines=$(wc -l <"$tmp/uid.stats")
if [ "$lines" -eq 300 ] && [ "$fbs" -eq 0 ] && [ ! -s "$tmp/uid.err" ]; then
    ok "300 processes on 255 user ids: every block in the pool"
else
    bad "300 processes: $lines stats lines, $fbs fallbacks; $(head -n 3 "$tmp/uid.err")"
fi
"$fmem" verify "$uri" >"$tmp/v0.out" 2>&1
dead=$(sed -n 's/.*(\([0-9]*\) such user slots).*/\1/p' "$tmp/v0.out")
# a fresh pool: processes that free their block leave no claimed id
"$tests/pool_status" -u "$pool" 2>/dev/null
i=0
while [ $i -lt 20 ]; do
    LD_PRELOAD=$lib FMEM_PRELOAD_URI="$uri" "$tests/preload_env" -k free >/dev/null
    i=$((i + 1))
done
"$fmem" verify "$uri" >"$tmp/v1.out" 2>&1
if grep -q verifier=clean "$tmp/v1.out" && ! grep -q "such user slots" "$tmp/v1.out"; then
    ok "20 processes that freed their blocks: no user slot left claimed"
else
    bad "user ids not released at exit:"; cat "$tmp/v1.out"
fi

# processes that exit holding their block keep their id until they are
# gone; the next process to open the pool (the table far from full) gives
# their ids and blocks back: after 20 such runs one dead slot (the last
# one's) is left, and none after one more run
"$tests/pool_status" -u "$pool" 2>/dev/null
i=0
while [ $i -lt 20 ]; do
    LD_PRELOAD=$lib FMEM_PRELOAD_URI="$uri" "$tests/preload_env" -k hold >/dev/null
    i=$((i + 1))
done
"$fmem" verify "$uri" >"$tmp/v3.out" 2>&1
held=$(sed -n 's/.*(\([0-9]*\) such user slots).*/\1/p' "$tmp/v3.out")
LD_PRELOAD=$lib FMEM_PRELOAD_URI="$uri" "$tests/preload_env" -k free >/dev/null
"$fmem" verify "$uri" >"$tmp/v4.out" 2>&1
alloc=$("$tests/pool_status" "$uri" | sed -n 's/allocated=\([0-9]*\).*/\1/p')
if [ "${held:-0}" -eq 1 ] && grep -q verifier=clean "$tmp/v4.out" &&
    ! grep -q "such user slots" "$tmp/v4.out" && [ "${alloc:-x}" = 0 ]; then
    ok "20 processes exited holding blocks: each next one recovered them ($held dead slot after the 20th, none after one more)"
else
    bad "dead holders not recovered: held=$held allocated=$alloc"; cat "$tmp/v3.out" "$tmp/v4.out"
fi

# a user table full of live claims: verify and recover still open the pool
mkfifo "$tmp/hold"
"$tests/pool_status" -c "$uri" <"$tmp/hold" >"$tmp/claim.out" &
holder=$!
exec 3>"$tmp/hold"
for _ in 1 2 3 4 5 6 7 8 9 10; do grep -q claimed "$tmp/claim.out" && break; sleep 1; done
claimed=$(sed -n 's/claimed //p' "$tmp/claim.out")
"$fmem" verify "$uri" >"$tmp/v2.out" 2>&1
vrc=$?
"$fmem" recover "$uri" 3 >"$tmp/r2.out" 2>&1
if [ "${claimed:-0}" -ge 255 ] && [ $vrc -eq 0 ] && grep -q verifier=clean "$tmp/v2.out" &&
    ! grep -q "no free user id" "$tmp/r2.out"; then
    ok "user table full ($claimed ids): verify clean, recover answers: $(head -n 1 "$tmp/r2.out")"
else
    bad "full table: claimed=$claimed verify rc=$vrc"; cat "$tmp/v2.out" "$tmp/r2.out"
fi
# the holder dies with every id claimed: the next process recovers them
kill -9 $holder 2>/dev/null
exec 3>&-
wait $holder 2>/dev/null
rm -f "$tmp/after.stats"
LD_PRELOAD=$lib FMEM_PRELOAD_URI="$uri" FMEM_PRELOAD_STATS="$tmp/after.stats" "$tests/preload_env" -k free >/dev/null
"$fmem" recover "$uri" 7 >"$tmp/r3.out" 2>&1
rrc=$?
if [ "$(field fallbacks "$tmp/after.stats")" = 0 ] && ! grep -q "no free user id" "$tmp/r3.out"; then
    ok "table full of dead claims: a new process gets an id; recover: $(head -n 1 "$tmp/r3.out") (rc $rrc)"
else
    bad "dead claims: $(cat "$tmp/after.stats") recover: $(cat "$tmp/r3.out")"
fi
echo "(verify after the 300 runs: ${dead:-0} dead user slots awaiting recovery)"

# dense layout of the default private pool: the span of 400 blocks of 200 KB
# (each touched; all in the pool) is at most 1.3 times their bytes (two
# pool blocks' worth of address space each would be 2.5 times)
LD_PRELOAD=$lib FMEM_PRELOAD_STATS="$tmp/dense.stats" $PY -c '
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
n, size = 400, 200 << 10
p = [libc.malloc(size) for _ in range(n)]
for q in p:
    ctypes.memset(q, 1, size)
print(max(p) + size - min(p), n * size)' >"$tmp/dense.out" 2>&1
read -r span bytes <"$tmp/dense.out"
if [ "$(field fallbacks "$tmp/dense.stats")" = 0 ] && [ "$(field large_allocs "$tmp/dense.stats")" -ge 400 ] &&
    [ "${span:-0}" -gt 0 ] && [ "$((span * 10))" -le "$((bytes * 13))" ]; then
    ok "private pool: 400 blocks of 200 KB span $span bytes for $bytes"
else
    bad "private pool layout: span ${span:-?} for ${bytes:-?} bytes (at most 1.3x)"; cat "$tmp/dense.out" "$tmp/dense.stats"
fi

# what a preloaded program loads: no io_uring, lz4 or zstd library (the
# ssd: and zmem: backends, whose memory the interposer cannot map anyway,
# are not in libfmem-preload.so)
LD_PRELOAD=$lib cat /proc/self/maps >"$tmp/maps.pre" 2>&1
if grep -q libfmem-preload "$tmp/maps.pre" && ! grep -Eq 'liburing|liblz4|libzstd' "$tmp/maps.pre"; then
    ok "a preloaded program maps no liburing, liblz4 or libzstd"
else
    bad "a preloaded program maps: $(grep -Eo '[^/]*(liburing|liblz4|libzstd|libfmem-preload)[^ ]*' "$tmp/maps.pre" | sort -u | tr '\n' ' ')"
fi

echo "preload-cost: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
