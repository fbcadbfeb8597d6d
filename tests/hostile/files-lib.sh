# files-lib.sh - shared by tests/hostile/files-*.test (sourced, not a test)
here=$(cd "$(dirname "$0")" && pwd)
top_builddir=${top_builddir:-$here/../..}
B=$(cd "$top_builddir" && pwd)
OPEN=$B/tests/hostile/pool_open
MNODE=$B/tools/fmem-mnode
for p in "$OPEN" "$MNODE"; do
    [ -x "$p" ] || { echo "SKIP: $p not built (make check builds it)"; exit 77; }
done
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
finish() {
    echo "$(basename "$0"): $pass passed, $fail failed"
    [ "$fail" -eq 0 ] && exit 0
    exit 1
}
need_root() { [ "$(id -u)" = 0 ] || { echo "SKIP: needs root ($1)"; exit 77; }; }
# as an unprivileged attacker (root runs the test; nobody attacks)
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

# mnode_fate URI LOG SOCK: start a memory node on URI and tell what became
# of it: "exit N" (it stopped by itself), "signal N", or "serving" (its
# socket appeared, or it still ran after 5 s: then it is killed)
mnode_fate() {
    "$MNODE" --pool "$1" --socket "$3" >"$2" 2>&1 &
    mpid=$!
    i=0
    while kill -0 "$mpid" 2>/dev/null && [ ! -S "$3" ] && [ $i -lt 50 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    if kill -0 "$mpid" 2>/dev/null; then
        kill -9 "$mpid"
        wait "$mpid" 2>/dev/null
        rm -f "$3"
        echo serving
        return
    fi
    wait "$mpid"
    st=$?
    if [ $st -gt 128 ]; then echo "signal $((st - 128))"; else echo "exit $st"; fi
}
