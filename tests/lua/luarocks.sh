#!/bin/sh
# tests/lua/luarocks.sh - make check: `luarocks make` of the rockspec
# against a staged `make install` builds a module that loads in lua5.4 and
# reports its version, and writes nothing into the source tree (no fmem.so
# in the root, where ./?.so would find it, no objects next to the sources).
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
LUA=${LUA_INTERP:-lua5.4}
command -v luarocks >/dev/null || { echo "luarocks: not installed: skipped"; exit 77; }
command -v "$LUA" >/dev/null || { echo "luarocks: no $LUA: skipped"; exit 77; }
builddir=$(cd "$top_builddir" && pwd)
srcdir=$(cd "$top_srcdir" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# one make install at a time in this tree (test_packaging.py does one too:
# concurrent libtool relinks would share file names)
if ! flock "$builddir/tests/.make-install.lock" ${MAKE:-make} -C "$builddir" install \
    DESTDIR="$tmp/dest" >"$tmp/install.log" 2>&1; then
    tail -n 30 "$tmp/install.log"
    echo "luarocks: make install DESTDIR= failed"
    exit 99
fi
lib=$(dirname "$(find "$tmp/dest" -name 'libfmem_hooks.so' | head -n 1)")
prefix=$(dirname "$lib")
find "$srcdir" -name fmem.so -o -name 'lfmem_*.o' >"$tmp/stray.before"
# luarocks builds from the directory it runs in: the top of the source tree
if ! (cd "$srcdir" && luarocks --lua-version 5.4 --tree "$tmp/tree" make \
    bindings/lua/fmem-scm-1.rockspec FMEM_DIR="$prefix") >"$tmp/rock.log" 2>&1; then
    cat "$tmp/rock.log"
    bad "luarocks make"
fi
find "$srcdir" -name fmem.so -o -name 'lfmem_*.o' >"$tmp/stray.after"
if cmp -s "$tmp/stray.before" "$tmp/stray.after"; then
    echo "ok: luarocks make wrote no module or object into the source tree"
else
    bad "luarocks make left files in the source tree: $(comm -13 "$tmp/stray.before" "$tmp/stray.after")"
fi
mod=$(find "$tmp/tree" -path '*/lua/5.4/fmem.so')
out=$(cd "$tmp" && LD_LIBRARY_PATH="$lib" LUA_CPATH="$(dirname "$mod")/?.so" "$LUA" -e '
  local fmem, where = require "fmem"
  local b <close> = fmem.open("mem:?size=8M"):alloc(10)
  b:write(0, "rock")
  io.write(fmem._VERSION, " ", where, " ", b:read(0, 4))' 2>&1)
if [ "$out" = "fmem 0.1 $mod rock" ]; then
    echo "ok: the rock's module loads: $out"
else
    bad "the rock's module: '$out' (module $mod)"
fi
grep -q 'license = "MIT"' "$srcdir/bindings/lua/fmem-scm-1.rockspec" || bad "no licence in the rockspec"
if luarocks --lua-version 5.4 lint "$srcdir/bindings/lua/fmem-scm-1.rockspec" >"$tmp/lint" 2>&1; then
    echo "ok: luarocks lint"
else
    bad "luarocks lint: $(cat "$tmp/lint")"
fi
[ "$fail" -eq 0 ] && echo "luarocks: 3 passed, 0 failed" || echo "luarocks: $((3 - fail)) passed, $fail failed"
[ "$fail" -eq 0 ]
