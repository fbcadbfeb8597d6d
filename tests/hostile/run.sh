#!/bin/sh
# tests/hostile/run.sh - run every attack program in tests/hostile/ and
# print one line per program: "PASS: NAME", "FAIL: NAME" or "SKIP: NAME".
# Exits non-zero if any failed. `make check-hostile` builds them and runs
# this; the test command (scripts/test.sh) counts it as one test.
#
# Convention for adding an attack:
# - one executable per attack, named tests/hostile/NAME.test (NAME starts
#   with its class, e.g. class2-idle-and-flood), in the build tree (a
#   check program of your area's .am fragment under tests/hostile/,
#   included from Makefile.am; HOSTILE_TESTS adds to check_PROGRAMS) or in
#   the source tree (a script with its executable bit set, in EXTRA_DIST);
#   helpers there that are not attacks must not end in .test;
# - it plays the attack against real daemons (tools/fmem-mnode,
#   tools/fmemd from $top_builddir) in a directory of its own under /tmp,
#   asserts what must hold, cleans up, and exits 0 when everything held,
#   77 when it cannot run here (say why on stderr), anything else on a
#   failure; its stdout and stderr are kept in tests/hostile/NAME.log;
# - it runs alone (one at a time, in name order) and within a few minutes
#   (it is killed after HOSTILE_TIMEOUT seconds, default 900).
# Environment: top_builddir, top_srcdir (default: this script's tree).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
export top_srcdir top_builddir
logdir="$top_builddir/tests/hostile"
mkdir -p "$logdir"

# every NAME.test of the build tree, then those only in the source tree
list=$(
    for d in "$top_builddir/tests/hostile" "$top_srcdir/tests/hostile"; do
        for f in "$d"/*.test; do
            [ -f "$f" ] && [ -x "$f" ] && printf '%s %s\n' "$(basename "$f" .test)" "$f"
        done
    done | sort -s -k1,1 -u
)
if [ -z "$list" ]; then
    echo "hostile: no tests/hostile/*.test program found (make check-hostile builds them)"
    exit 1
fi

# the scratch pools the attacks make in /dev/shm (fmem-hostile-*; the
# pool's metadata, .data and the memory node's .sessions file) must be
# gone when an attack ends, whatever it killed: one left behind fails it
shm_pools() { ls -A /dev/shm 2>/dev/null | grep '^fmem-hostile-' | sort; }

pass=0 fail=0 skip=0
echo "$list" | {
    while read -r name prog; do
        log="$logdir/$name.log"
        start=$(date +%s)
        before=$(shm_pools)
        timeout -k 10 "${HOSTILE_TIMEOUT:-900}" "$prog" >"$log" 2>&1
        rc=$?
        secs=$(($(date +%s) - start))
        if [ -n "$before" ]; then left=$(shm_pools | grep -vxF "$before"); else left=$(shm_pools); fi
        if [ -n "$left" ] && [ "$rc" -ne 77 ]; then
            echo "left behind in /dev/shm (removed now): $(echo $left)" >>"$log"
            (cd /dev/shm && echo "$left" | while read -r f; do rm -f -- "$f"; done)
            [ "$rc" -eq 0 ] && rc=1
        fi
        case $rc in
        0) echo "PASS: $name (${secs} s)"; pass=$((pass + 1)) ;;
        77) echo "SKIP: $name ($(tail -n 1 "$log"))"; skip=$((skip + 1)) ;;
        *)
            echo "FAIL: $name (exit $rc, ${secs} s; $log)"
            tail -n 20 "$log" | sed 's/^/    /'
            fail=$((fail + 1))
            ;;
        esac
    done
    echo "hostile: $pass passed, $fail failed, $skip skipped"
    [ "$fail" -eq 0 ]
}
