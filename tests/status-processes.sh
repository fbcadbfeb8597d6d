#!/bin/sh
# tests/status-processes.sh - fmem status --processes: a process with a
# live region over two memory nodes and zmem:/ssd: nodes publishes its
# figures; the text and --json reports show per-path bytes and bandwidth,
# the chosen parameters and the store nodes; once the process is killed
# its page is stale and removed. Bad pages next to it (truncated, garbage,
# another version, a symlink, another user's) are named and skipped,
# never a crash.
set -u
top_builddir=${top_builddir:-.}
B=$top_builddir/tools
app=$top_builddir/tests/status_app
if [ ! -x "$B/fmem" ] || [ ! -x "$app" ]; then
    echo "skip: fmem or tests/status_app not built"
    exit 77
fi
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
dir=$(mktemp -d /tmp/fmem-status-processes-XXXXXX)
FMEM_STATS_DIR=$dir/pages
FMEM_STATS_INTERVAL_MS=50
export FMEM_STATS_DIR FMEM_STATS_INTERVAL_MS
mkdir "$FMEM_STATS_DIR"
cleanup() {
    : >"$dir/done"
    [ -n "${apid:-}" ] && kill "$apid" 2>/dev/null
    [ -n "${spid:-}" ] && kill "$spid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
me=$(id -u)
# start_app DIR LOG [ARGS...]: the test application on DIR in the
# background (its pid in apid), waited for until it is ready
start_app() {
    local d=$1 log=$2
    shift 2
    "$app" "$d" "$@" >"$log" 2>&1 &
    apid=$!
    for _ in $(seq 400); do [ -e "$d/ready" ] && break; sleep 0.05; done
}
# kill_app: kill -9 the application started last and reap it
kill_app() {
    kill -9 "$apid"
    wait "$apid" 2>/dev/null
    apid=
}

start_app "$dir" "$dir/app.log" "$dir/cold.ssd"
[ -e "$dir/ready" ] || { cat "$dir/app.log"; echo "FAIL: the application did not start"; exit 1; }
sleep 0.3 # a rewrite after the last transfers
page="$FMEM_STATS_DIR/fmem-stats.$me.$apid"
[ -f "$page" ] || fail "no stats page $page"

# bad pages of this user, named for live processes (this shell) and dead ones
printf 'garbage' >"$FMEM_STATS_DIR/fmem-stats.$me.$$"
head -c 40000 "$page" >"$FMEM_STATS_DIR/fmem-stats.$me.1"          # truncated
dd if=/dev/urandom of="$FMEM_STATS_DIR/fmem-stats.$me.999999999" bs=1k count=50 2>/dev/null
ln -s "$page" "$FMEM_STATS_DIR/fmem-stats.$me.2"                      # a symlink
cp "$page" "$FMEM_STATS_DIR/fmem-stats.12345.$apid"                   # another user's name
: >"$FMEM_STATS_DIR/fmem-stats.nonsense"

"$B/fmem" status --processes >"$dir/text" 2>"$dir/err"
rc=$?
[ $rc -eq 0 ] || fail "status --processes exited $rc"
grep -q "^process $apid (status_app): 1 region, 2 ssd:/zmem: nodes" "$dir/text" ||
    fail "no process line for $apid: $(head -3 "$dir/text")"
grep -q "parameters: unit 16.0 KiB, fetch [0-9.]* [KM]iB ([0-9]* units, at most [0-9]*), read-ahead [0-9]* units, stripe [0-9]* of [0-9]* paths, I/O width [0-9]*, tier " "$dir/text" ||
    fail "no parameters line"
grep -q "path 0 (mem)" "$dir/text" || fail "no path 0 line"
grep -q "node zmem (" "$dir/text" || fail "no zmem node"
grep -q "node ssd (" "$dir/text" || fail "no ssd node"
grep -q "fmem-stats.$me.$$: not a stats page\|fmem-stats.$me.$$: truncated" "$dir/err" ||
    fail "garbage page not named: $(cat "$dir/err")"
grep -q "fmem-stats.$me.2: a symbolic link; skipped" "$dir/err" || fail "symlink not named"
grep -q "1 page of other users" "$dir/err" || fail "other user's page not counted"
grep -q "fmem-stats.nonsense: not a stats page's name" "$dir/err" || fail "bad name not named"
# pages of processes that are gone are removed, also garbage ones
[ -e "$FMEM_STATS_DIR/fmem-stats.$me.999999999" ] && fail "dead process's garbage page kept"
[ -e "$FMEM_STATS_DIR/fmem-stats.$me.$$" ] || fail "a live process's bad page was removed"
[ -L "$FMEM_STATS_DIR/fmem-stats.$me.2" ] && [ -f "$page" ] || fail "symlink or its target touched wrongly"

"$B/fmem" status --processes --json >"$dir/json" 2>/dev/null || fail "--json exited $?"
python3 - "$dir/json" "$apid" <<'PY' || fail "JSON report"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["kind"] == "processes", r
ps = [p for p in r["processes"] if p["pid"] == int(sys.argv[2])]
assert len(ps) == 1, r
p = ps[0]
assert p["program"] == "status_app", p
assert len(p["regions"]) == 1, p
g = p["regions"][0]
assert g["size"] == 8 << 20 and g["unit"] == 16 << 10, g
par = g["parameters"]
for k in ("unit", "prefetch_units", "stripe_width", "paths", "io_width", "tier", "fetch_units",
          "fetch_max"):
    assert k in par, par
assert 1 <= par["fetch_units"] <= par["fetch_max"], par
assert "fetch" in par["fixed"], par
assert par["paths"] >= 2 and par["io_width"] >= 1, par
assert g["faults"] > 0 and g["evictions"] > 0 and g["writebacks"] > 0, g
written = sum(x["bytes_written"] for x in g["paths"])
assert written >= 7 << 20, g["paths"]
assert any(x["bandwidth"] > 0 for x in g["paths"]), g["paths"]
kinds = sorted(n["kind"] for n in p["nodes"])
assert kinds == ["ssd", "zmem"], kinds
assert all(n["capacity_bytes"] == 32 << 20 for n in p["nodes"]), p["nodes"]
assert r["other_users_pages"] == 1, r
PY

# the process goes: its page is removed at exit
: >"$dir/done"
wait "$apid"
apid=
[ -e "$page" ] && fail "page kept after a clean exit"

# a killed process leaves its page: stale, removed by fmem status
mkdir -p "$dir/k"
start_app "$dir/k" "$dir/app2.log"
kpid=$apid
kill_app
[ -f "$FMEM_STATS_DIR/fmem-stats.$me.$kpid" ] || fail "killed process left no page (nothing to test)"
"$B/fmem" status --processes >"$dir/text2" 2>"$dir/err2" || fail "status after kill exited $?"
grep -q "process $kpid is gone; removed its page" "$dir/err2" || fail "stale page not reported: $(cat "$dir/err2")"
[ -e "$FMEM_STATS_DIR/fmem-stats.$me.$kpid" ] && fail "stale page kept"
grep -q "^process $kpid" "$dir/text2" && fail "dead process listed"

# forge_page SRC PID DEST: a copy of the page SRC whose header names PID
# (its start time stays SRC's: for a running PID, a page of a process
# that had its pid before)
forge_page() {
    python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<Q", b, 40, int(sys.argv[2]))   # sp_header.pid
open(sys.argv[3], "wb").write(b)
PY
}
# The next process of this user that publishes a page removes this user's
# stale pages: a killed process's, one whose pid now runs another process;
# never another user's (by name or by owner), never a symlink's target.
mkdir -p "$dir/k2" "$dir/n"
start_app "$dir/k2" "$dir/app4.log"
k2=$apid
kill_app
P=$FMEM_STATS_DIR/fmem-stats
[ -f "$P.$me.$k2" ] || fail "killed process left no page (nothing to test)"
sleep 600 &
spid=$!
forge_page "$P.$me.$k2" "$spid" "$P.$me.$spid"
other=$((me + 1))
cp "$P.$me.$k2" "$P.$other.$k2"
echo target >"$dir/target"
ln -s "$dir/target" "$P.$me.999999997"
if [ "$me" = 0 ]; then
    cp "$P.$me.$k2" "$P.$me.999999996" && chown 65534 "$P.$me.999999996"
fi
start_app "$dir/n" "$dir/app5.log"
npid=$apid
[ -f "$P.$me.$npid" ] || fail "the next process published no page"
[ -e "$P.$me.$k2" ] && fail "the next publisher kept a killed process's page"
[ -e "$P.$me.$spid" ] && fail "the next publisher kept a page of a reused pid"
[ -e "$P.$other.$k2" ] || fail "the next publisher removed another user's page"
[ -f "$dir/target" ] || fail "the next publisher removed a symlink's target"
[ "$me" != 0 ] || [ -e "$P.$me.999999996" ] || fail "the next publisher removed a file another user owns"
[ -e "$P.$me.$$" ] || fail "the next publisher removed a live process's bad page"
# fmem status removes a page of a reused pid too
forge_page "$P.$me.$npid" "$spid" "$P.$me.$spid"
"$B/fmem" status --processes >"$dir/text3" 2>"$dir/err3" || fail "status exited $?"
[ -e "$P.$me.$spid" ] && fail "fmem status kept a page of a reused pid"
grep -q "^process $npid (status_app)" "$dir/text3" || fail "live process not listed: $(cat "$dir/text3")"
kill "$spid"; wait "$spid" 2>/dev/null
spid=
: >"$dir/n/done"
wait "$npid"
apid=
rm -f "$P.$me.999999996"

# FMEM_STATS=0: nothing published
mkdir -p "$dir/o"
FMEM_STATS=0 start_app "$dir/o" "$dir/app3.log"
opid=$apid
[ -e "$FMEM_STATS_DIR/fmem-stats.$me.$opid" ] && fail "FMEM_STATS=0 still published"
: >"$dir/o/done"
wait "$opid"
apid=

[ $fails -eq 0 ] && echo "status-processes: all passed"
exit $((fails > 0))
