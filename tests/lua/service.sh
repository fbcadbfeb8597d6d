#!/bin/sh
# tests/lua/service.sh - fmem.connect against a real allocation service: a
# memory node (fmem-mnode) and fmemd on a scratch pool file, then buffers
# and a Lua state on the connection, and every byte back at the end. The
# error path of connect (no service there) is in spec/errors_spec.lua.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
LUA=${LUA_INTERP:-lua5.4}
mnode=$top_builddir/tools/fmem-mnode
fmemd=$top_builddir/tools/fmemd
host="$top_builddir/bindings/lua/fmem-lua"
[ -x "$top_builddir/bindings/lua/.libs/fmem-lua" ] && host="$top_builddir/bindings/lua/.libs/fmem-lua"
if [ ! -x "$mnode" ] || [ ! -x "$fmemd" ]; then
    echo "skip: fmem-mnode or fmemd not built"
    exit 77
fi
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
unset FMEM_URI FMEM_LUA_BACKING FMEM_LUA_STATS
dir=$(mktemp -d /tmp/fmem-lua-svc-XXXXXX)
cleanup() {
    [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null
    [ -n "${mpid:-}" ] && kill "$mpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
waitfor() { for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.05; done; return 1; }
fail() { echo "FAIL: $*"; tail -n 5 "$dir"/*.log; exit 1; }

"$mnode" --pool "file:$dir/pool?size=64M" --socket "$dir/mnode.sock" >"$dir/mnode.log" 2>&1 &
mpid=$!
waitfor "$dir/mnode.sock" || fail "memory node did not start"
"$fmemd" --mnode "$dir/mnode.sock" --socket "$dir/fmemd.sock" --workers 1 >"$dir/fmemd.log" 2>&1 &
dpid=$!
waitfor "$dir/fmemd.sock" || fail "fmemd did not start"

cat >"$dir/client.lua" <<'EOF'
local fmem, where = require "fmem"
-- the build's module, not a stray or installed one (see run.sh)
local want = os.getenv("FMEM_EXPECT_MODULE")
assert(where == want, "require \"fmem\" loaded " .. tostring(where) .. ", not " .. tostring(want))
local uri = ...
local p = fmem.connect(uri)
local base = p:stats().allocated_bytes
-- buffers: mapped where the client can map, and through fmem_read/fmem_write
local b = p:alloc(10000)
local mapped = b:mapped()
b:write(0, "over the service")
b:set_f64(100, 2.5)
assert(b:read(0, 16) == "over the service" and b:get_f64(100) == 2.5)
local c = p:alloc(100, {map = false})
c:set_i64(8, -7)
assert(c:get_i64(8) == -7 and not c:mapped())
assert(p:stats().allocated_bytes == base + 16384 + 4096, "allocated " .. p:stats().allocated_bytes)
b:free()
c = nil
collectgarbage()
-- a Lua state whose heap is on the service's chunks
local st = fmem.newstate(p)
local n = st:dostring("local t = {} for i = 1, 50000 do t[i] = {i, tostring(i)} end return #t")
assert(n == 50000)
assert(p:stats().allocated_bytes > base)
st:close()
assert(p:stats().allocated_bytes == base, "not back: " .. p:stats().allocated_bytes)
print(("service: buffers mapped=%s and read/write, a state of 50000 tables, pool back to %d B")
      :format(tostring(mapped), base))
EOF

pass=0 fail=0
run() {
    name=$1
    shift
    if out=$("$@" "$dir/client.lua" "unix:$dir/fmemd.sock" 2>&1); then
        pass=$((pass + 1)); echo "ok: $name: $out"
    else
        fail=$((fail + 1)); echo "FAIL: $name: $out"
    fi
}
if LUA_CPATH="$top_builddir/bindings/lua/.libs/?.so;;" "$LUA" -e 'require "fmem"' >/dev/null 2>&1; then
    run "fmem.connect under $LUA" env LUA_CPATH="$top_builddir/bindings/lua/.libs/?.so;;" \
        FMEM_EXPECT_MODULE="$top_builddir/bindings/lua/.libs/fmem.so" "$LUA"
else # see run.sh: the module cannot be dlopen'ed while libfmem.so wants static TLS
    run "fmem.connect under $LUA (more static TLS)" env LUA_CPATH="$top_builddir/bindings/lua/.libs/?.so;;" \
        FMEM_EXPECT_MODULE="$top_builddir/bindings/lua/.libs/fmem.so" \
        GLIBC_TUNABLES=glibc.rtld.optional_static_tls=262144 "$LUA"
fi
run "fmem.connect under fmem-lua" env FMEM_EXPECT_MODULE=:preload: "$host"

# a buffer outlives its service: fmemd is killed, the memory node reclaims
# its blocks, and every use of the buffer raises instead of reaching memory
# that may be another application's
cat >"$dir/stale.lua" <<'LUA'
local fmem = require "fmem"
local uri, ready, go = ...
local p = fmem.connect(uri)
local c = p:alloc(4096, {map = false})
c:set_i64(0, 42)
assert(io.open(ready, "w")):close()
for _ = 1, 400 do
    local f = io.open(go)
    if f then f:close() break end
    os.execute("sleep 0.05")
end
local ok, err = pcall(c.get_i64, c, 0)
assert(not ok and err:find("the service that issued this handle is gone", 1, true), tostring(err))
local ok2, err2 = pcall(c.free, c)
assert(not ok2 and err2:find("is gone", 1, true), tostring(err2))
print("stale: " .. err)
LUA
"$host" "$dir/stale.lua" "unix:$dir/fmemd.sock" "$dir/ready" "$dir/go" >"$dir/stale.out" 2>&1 &
spid=$!
for _ in $(seq 200); do [ -e "$dir/ready" ] && break; sleep 0.05; done
kill -9 "$dpid"
wait "$dpid" 2>/dev/null
dpid=
for _ in $(seq 200); do grep -q "recovered" "$dir/mnode.log" && break; sleep 0.05; done
touch "$dir/go"
if wait "$spid"; then
    pass=$((pass + 1)); echo "ok: stale buffer after fmemd died: $(cat "$dir/stale.out")"
else
    fail=$((fail + 1)); echo "FAIL: stale buffer after fmemd died: $(cat "$dir/stale.out")"
fi
echo "lua service: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
