#!/bin/sh
# The command-line programs follow the usual conventions: --version and
# --help exit 0 on stdout; a bad command line is one line on stderr and
# exit 2; subcommands have their own help; URI errors name the bad key or
# value; fmem status --json is JSON; --map wants .png; --node is checked.
set -u
B=${top_builddir:-.}/tools
tmp=$(mktemp -d /tmp/fmem-packaging-cli.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect RC STREAM-LINES PATTERN -- CMD...: exit status, number of lines on
# the stream that matters (stdout for rc 0, stderr otherwise; - for any)
# and a pattern that must occur in it
expect() {
    rc=$1 lines=$2 pat=$3; shift 4
    "$@" >"$tmp/out" 2>"$tmp/err"; got=$?
    [ "$rc" = 0 ] && f=$tmp/out || f=$tmp/err
    [ "$got" = "$rc" ] || { fail "$*: exit $got, want $rc: $(head -c 300 "$tmp/err")"; return; }
    n=$(wc -l <"$f")
    [ "$lines" = - ] || [ "$n" = "$lines" ] || { fail "$*: $n lines, want $lines: $(cat "$f")"; return; }
    grep -q -- "$pat" "$f" || fail "$*: no '$pat' in: $(cat "$f")"
}

for p in fmem fmemd fmem-mnode; do
    expect 0 1 "^$p (fmem) [0-9]" -- "$B/$p" --version
    expect 0 1 "^$p (fmem) [0-9]" -- "$B/$p" -V
    expect 0 - "usage: $p" -- "$B/$p" --help
    expect 2 1 "^$p: unknown option '--no-such-option' (see $p --help)\$" -- "$B/$p" --no-such-option
done
for p in fmemd fmem-mnode; do
    expect 2 1 "^$p: unknown option '-Z'" -- "$B/$p" -Z
    expect 2 1 "^$p: option '--socket' needs a value" -- "$B/$p" --socket
    expect 2 1 "^$p: .* required" -- "$B/$p"
done
expect 2 1 "^fmemd: --app-max-bytes: bad value '1Q'" -- "$B/fmemd" --app-max-bytes 1Q
expect 2 1 "no command given" -- "$B/fmem"
expect 2 1 "^fmem: unknown command 'frobnicate'" -- "$B/fmem" frobnicate
for c in status verify recover; do
    expect 0 - "usage: fmem $c" -- "$B/fmem" $c --help
    expect 0 - "usage: fmem $c" -- "$B/fmem" help $c
done
expect 0 - "usage: fmemd" -- "$B/fmem" daemon --help
expect 2 1 "^fmem verify: expects one URI" -- "$B/fmem" verify
expect 2 1 "^fmem verify: unknown option '--quick'" -- "$B/fmem" verify --quick
expect 2 1 "^fmem recover: expects" -- "$B/fmem" recover shm:/x
expect 2 1 "^fmem status: unknown option '--bogus'" -- "$B/fmem" status --bogus
expect 2 1 "must end in .png, not 'map.jpg'" -- "$B/fmem" status --map map.jpg
expect 2 1 "needs a value: '--map'" -- "$B/fmem" status --map
expect 2 1 "\-\-node wants 0\.\.[0-9]*, not 'two'" -- "$B/fmem" status --node two
expect 2 1 "\-\-node wants 0\.\.[0-9]*, not '99999'" -- "$B/fmem" status --node 99999
# URI errors name the bad key or value
expect 2 1 "unknown parameter 'sise'" -- "$B/fmem" status "shm:/fmem-packaging-x?sise=1G"
expect 2 1 "bad value size='1Q'" -- "$B/fmem" status "shm:/fmem-packaging-x?size=1Q"
expect 2 1 "unknown scheme" -- "$B/fmem" status "nfs:/x"
expect 2 1 "unknown parameter 'sise'" -- "$B/fmem" verify "shm:/fmem-packaging-x?sise=1G"
# ssd: and zmem: nodes live in their process: nothing to read from outside
expect 2 1 "zmem: a node private to the process that opens it" -- "$B/fmem" status "zmem:?size=4M"
expect 2 1 "private to the process that opens them" -- "$B/fmem" verify "zmem:?size=4M"
expect 2 1 "bad value codec='lz5' (want lz4 or zstd)" -- "$B/fmem" status "zmem:?codec=lz5"
# a bare path must be a socket; errno's text is kept
expect 2 1 "$tmp/none: No such file or directory" -- "$B/fmem" status "$tmp/none"
: >"$tmp/plain"
expect 2 1 "$tmp/plain: not a socket .*file:$tmp/plain" -- "$B/fmem" status "$tmp/plain"

# a real pool file: status --json is one JSON object; --node is range-checked
lua=${top_builddir:-.}/bindings/lua/fmem-lua
if [ -x "$lua" ]; then
    "$lua" -e "local p = assert(require('fmem').open('file:$tmp/pool?size=64MiB')); p:close()" ||
        fail "fmem-lua could not create a pool file"
    "$B/fmem" status --json "file:$tmp/pool" >"$tmp/json" || fail "status --json exit $?"
    python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
n = d["nodes"][0]
assert n["capacity_bytes"] == 64 << 20, n
assert n["spans"]["total"] == 512, n
' "$tmp/json" || fail "status --json: $(cat "$tmp/json")"
    expect 2 1 "\-\-node 1: the pool has 1 node (0\.\.0)" -- "$B/fmem" status "file:$tmp/pool" --node 1
    # a node's emulated link (bw=, rtt_ns=) is shown as its path
    expect 0 - "path: emulated link 1073741824 bytes/s, round trip 3000 ns" -- \
        "$B/fmem" status "file:$tmp/pool?bw=1G&rtt_ns=3000"
    expect 2 1 "bad value bw='1X'" -- "$B/fmem" status "file:$tmp/pool?bw=1X"
    expect 0 - "map: $tmp/m.PNG" -- "$B/fmem" status "file:$tmp/pool" --map "$tmp/m.PNG"
    head -c 8 "$tmp/m.PNG" | od -An -c | grep -q 'P   N   G' || fail "--map wrote no PNG"
else
    echo "fmem-lua not built: pool-file checks not run"
fi
# a bare path that is a daemon's socket is asked like unix:PATH
"$B/fmem-mnode" --pool "file:$tmp/mpool?size=64M" --socket "$tmp/mnode.sock" 2>"$tmp/mnode.log" &
mnode=$!
for _ in $(seq 100); do [ -S "$tmp/mnode.sock" ] && break; sleep 0.1; done
expect 0 - "^memory node file:$tmp/mpool" -- "$B/fmem" status "$tmp/mnode.sock"
expect 0 1 "^{\"kind\": \"memory_node\"" -- "$B/fmem" status --json "$tmp/mnode.sock"
kill "$mnode"; wait "$mnode"
[ "$fails" = 0 ] && echo "cli: all checks passed" || exit 1
