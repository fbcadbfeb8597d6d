#!/bin/sh
# tests/status-daemons.sh - fmem status against running daemons: a memory
# node and fmemd on a scratch pool, an application holding blocks through
# fmemd; the text report and --json (both rendered from the daemons' status
# records) must show the application, its allocations and the used space.
set -u
top_builddir=${top_builddir:-.}
B=$top_builddir/tools
host="$top_builddir/bindings/lua/fmem-lua"
[ -x "$top_builddir/bindings/lua/.libs/fmem-lua" ] && host="$top_builddir/bindings/lua/.libs/fmem-lua"
if [ ! -x "$B/fmem-mnode" ] || [ ! -x "$B/fmemd" ] || [ ! -x "$host" ]; then
    echo "skip: daemons or fmem-lua not built"
    exit 77
fi
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
unset FMEM_URI FMEM_LUA_BACKING FMEM_LUA_STATS
dir=$(mktemp -d /tmp/fmem-status-daemons-XXXXXX)
cleanup() {
    : >"$dir/done"
    for p in ${cpid:-} ${dpid:-} ${mpid:-}; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
waitfor() { for _ in $(seq 200); do [ -e "$1" ] && return 0; sleep 0.05; done; return 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$B/fmem-mnode" --pool "file:$dir/pool?size=64M" --socket "$dir/mnode.sock" >"$dir/mnode.log" 2>&1 &
mpid=$!
waitfor "$dir/mnode.sock" || { echo "FAIL: memory node did not start"; exit 1; }
"$B/fmemd" --mnode "$dir/mnode.sock" --socket "$dir/fmemd.sock" --workers 1 --name statsvc \
    >"$dir/fmemd.log" 2>&1 &
dpid=$!
waitfor "$dir/fmemd.sock" || { echo "FAIL: fmemd did not start"; exit 1; }

# the application: three blocks held until the checks are done
cat >"$dir/app.lua" <<'EOF'
local fmem = require "fmem"
local dir = ...
local p = assert(fmem.connect("unix:" .. dir .. "/fmemd.sock"))
local held = {p:alloc(4096), p:alloc(10000), p:alloc(1 << 20)}
local f = io.open(dir .. "/holding", "w"); f:close()
while not io.open(dir .. "/done") do os.execute("sleep 0.05") end
held = nil
EOF
"$host" "$dir/app.lua" "$dir" >"$dir/app.log" 2>&1 &
cpid=$!
waitfor "$dir/holding" || { echo "FAIL: the application did not start: $(cat "$dir/app.log")"; exit 1; }

"$B/fmem" status "$dir/fmemd.sock" >"$dir/svc.txt" 2>&1 || fail "status of fmemd: exit $?"
grep -q "^allocation service $dir/fmemd.sock" "$dir/svc.txt" || fail "fmemd text: $(cat "$dir/svc.txt")"
grep -q "^  app [0-9]*: fmem-lua pid $cpid uid [0-9]*, holds [1-9][0-9]* blocks" "$dir/svc.txt" ||
    fail "fmemd text lacks the application: $(cat "$dir/svc.txt")"
"$B/fmem" status --json "$dir/fmemd.sock" >"$dir/svc.json" 2>"$dir/err" || fail "status --json of fmemd: exit $? $(cat "$dir/err")"
python3 - "$dir/svc.json" "$dir" <<'EOF' || fail "fmemd JSON: $(cat "$dir/svc.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "service" and d["socket"] == sys.argv[2] + "/fmemd.sock", d
assert d["application_count"] == 1 and len(d["applications"]) == 1, d
a = d["applications"][0]
# the service hands out blocks to the application's block cache too
assert a["blocks"] >= 3 and a["allocs"] >= 3 and a["bytes"] >= 4096 + 12288 + (1 << 20), a
assert len(d["workers"]) == 1 and d["workers"][0]["served"] >= 3, d["workers"]
n = d["nodes"][0]
assert n["connected"] and n["capacity_bytes"] == 64 << 20, n
assert n["used_bytes"] >= a["bytes"], n
EOF

# fmemd reports its applications to the memory node with its heartbeats
for _ in $(seq 60); do
    "$B/fmem" status "unix:$dir/mnode.sock" >"$dir/mn.txt" 2>&1 || break
    grep -q " 1 applications" "$dir/mn.txt" && break
    sleep 0.1
done
"$B/fmem" status "unix:$dir/mnode.sock" >"$dir/mn.txt" 2>&1 || fail "status of the memory node: exit $?"
grep -q "^  user [0-9]*: statsvc pid $dpid, 1 applications" "$dir/mn.txt" ||
    fail "memory node text lacks fmemd: $(cat "$dir/mn.txt")"
"$B/fmem" status --json "unix:$dir/mnode.sock" >"$dir/mn.json" 2>"$dir/err" || fail "status --json of the memory node: exit $? $(cat "$dir/err")"
python3 - "$dir/mn.json" "$dpid" <<'EOF' || fail "memory node JSON: $(cat "$dir/mn.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["kind"] == "memory_node", d
s = d["services"]
assert len(s) == 1 and s[0]["name"] == "statsvc" and s[0]["pid"] == int(sys.argv[2]), s
assert s[0]["applications"] == 1, s
assert d["nodes"][0]["used_bytes"] > 0 and d["nodes"][0]["capacity_bytes"] == 64 << 20, d
EOF

echo "$((9 - fails)) passed, $fails failed"
[ "$fails" = 0 ]
