#!/bin/sh
# The manual pages: every function libfmem.so exports has its own section in
# libfmem(3) with the comment of its declaration; every page formats
# without warnings; the program pages carry the programs' --help options.
set -u
b=${top_builddir:-.}
s=${top_srcdir:-.}
fail=0
lib=$b/.libs/libfmem.so
[ -e "$lib" ] || { echo "no $lib"; exit 1; }
for f in $(nm -D --defined-only "$lib" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }'); do
    # ".SS name", then the declaration, then a comment paragraph
    awk -v f="$f" '$0 == ".SS " f { s = 1; next } s && /^\.SS|^\.SH/ { exit } s && /^\.PP/ { p = 1 }
        END { exit !p }' "$b/man/libfmem.3" || { echo "FAIL: $f is not documented in libfmem(3)"; fail=1; }
done
command -v man >/dev/null 2>&1 || echo "man (man-db) is not installed: formatting not checked"
command -v man >/dev/null 2>&1 && for page in "$b"/man/*.[138]; do
    w=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
    [ -z "$w" ] || { echo "FAIL: $page: $w"; fail=1; }
done
grep -q -- '--app-max-bytes' "$b/man/fmemd.8" || { echo "FAIL: fmemd(8) lacks --app-max-bytes"; fail=1; }
grep -q -- '--heartbeat-ms' "$b/man/fmem-mnode.8" || { echo "FAIL: fmem-mnode(8) lacks --heartbeat-ms"; fail=1; }
grep -q -- '--json' "$b/man/fmem.1" || { echo "FAIL: fmem(1) lacks --json"; fail=1; }
[ "$fail" = 0 ] && echo "man: $(grep -c '^\.SS fmem_' "$b/man/libfmem.3") functions in libfmem(3)"
exit "$fail"
