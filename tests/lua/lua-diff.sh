#!/bin/sh
# tests/lua/lua-diff.sh - make check: fmem-lua behaves as lua5.4 (options,
# messages, exit codes, the REPL on a pipe and on a terminal, Ctrl-C);
# the cases are in lua_diff.py.
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
LUA=${LUA_INTERP:-lua5.4}
PY=${FMEM_PYTHON:-python3}
host="$top_builddir/bindings/lua/fmem-lua"
# the program itself rather than libtool's wrapper, so that argv[0] is ours
[ -x "$top_builddir/bindings/lua/.libs/fmem-lua" ] && host="$top_builddir/bindings/lua/.libs/fmem-lua"
lua=$(command -v "$LUA") || { echo "lua-diff: no $LUA to compare with: skipped"; exit 77; }
command -v "$PY" >/dev/null || { echo "lua-diff: no $PY: skipped"; exit 77; }
unset FMEM_LUA_BACKING FMEM_LUA_STATS FMEM_LUA_READLINE
FMEM_URI='mem:?size=256M'
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FMEM_URI LD_LIBRARY_PATH
exec "$PY" "$top_srcdir/tests/lua/lua_diff.py" "$lua" "$(cd "$(dirname "$host")" && pwd)/$(basename "$host")"
