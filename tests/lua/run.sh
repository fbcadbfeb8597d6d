#!/bin/sh
# tests/lua/run.sh - the Lua binding's tests (make check): the spec files
# under lua5.4 with the module, under fmem-lua on shm and in a region; a
# GC-heavy script under fmem-lua with the pool's usage before and after;
# busted on the same specs when it is installed; fmem-lua's command line.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
LUA=${LUA_INTERP:-lua5.4}
host="$top_builddir/bindings/lua/fmem-lua"
# the program itself rather than libtool's wrapper (a shell each time)
[ -x "$top_builddir/bindings/lua/.libs/fmem-lua" ] && host="$top_builddir/bindings/lua/.libs/fmem-lua"
here="$top_srcdir/tests/lua"
specs=$(ls "$here"/spec/*_spec.lua)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset FMEM_LUA_BACKING FMEM_LUA_STATS LUA_INIT LUA_INIT_5_4
# fmem-lua's pool and fmem.open()'s default: smaller than 1 GiB starts faster
FMEM_URI='mem:?size=256M'
# our module first, then Lua's usual places (;;) for busted's; absolute, as
# the specs run from a scratch directory
builddir_abs=$(cd "$top_builddir" && pwd)
module="$builddir_abs/bindings/lua/.libs/fmem.so"
LUA_CPATH="$builddir_abs/bindings/lua/.libs/?.so;;"
LD_LIBRARY_PATH="$(cd "$top_builddir" && pwd)/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export FMEM_URI LUA_CPATH LD_LIBRARY_PATH

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
# step NAME CMD...: CMD must succeed; its output is shown when it does not
step() {
    name=$1
    shift
    if "$@" >"$tmp/out" 2>&1; then
        summary=$(grep -E ' passed|successes' "$tmp/out" | tail -n 1)
        ok "$name (${summary:-$(tail -n 1 "$tmp/out")})"
    else
        bad "$name"
        sed 's/^/    /' "$tmp/out"
    fi
}

# The module must load into the stock interpreter. A libfmem.so marked
# STATIC_TLS with a large TLS segment cannot be dlopen'ed: that is a
# library bug outside this binding (see docs/lua.md), reported here as
# KNOWN BUG without failing, and the rest runs with more static TLS.
if ! "$LUA" -e 'require "fmem"' >"$tmp/load" 2>&1; then
    if grep -q 'static TLS' "$tmp/load"; then
        echo "KNOWN BUG: require \"fmem\" in $LUA: $(grep -o '[^[:space:]]*: cannot allocate memory in static TLS block' "$tmp/load")"
        echo "    (continuing with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=262144)"
        GLIBC_TUNABLES=glibc.rtld.optional_static_tls=262144
        export GLIBC_TUNABLES
    else
        bad "require \"fmem\" in $LUA"
        cat "$tmp/load"
    fi
else
    ok "require \"fmem\" in $LUA"
fi

# A stray fmem.so (left by a build in the source root, say) in the current
# directory must not be what the specs test: runner.lua checks that
# require "fmem" loaded the build's (FMEM_EXPECT_MODULE).
here=$(cd "$here" && pwd)
host=$(cd "$(dirname "$host")" && pwd)/$(basename "$host")
mkdir "$tmp/cwd" && echo 'not a module' >"$tmp/cwd/fmem.so" && cd "$tmp/cwd" || exit 99
specs=$(ls "$here"/spec/*_spec.lua)
# shellcheck disable=SC2086 # the spec list is split on purpose
step "specs under $LUA" env FMEM_EXPECT_MODULE="$module" "$LUA" "$here/runner.lua" $specs
# shellcheck disable=SC2086
step "specs under fmem-lua (shm)" env FMEM_EXPECT_MODULE=:preload: "$host" "$here/runner.lua" $specs
if FMEM_LUA_BACKING=region:50:64M "$host" -e '' >"$tmp/region" 2>&1; then
    # shellcheck disable=SC2086
    step "specs under fmem-lua (region, 50 % cache)" \
        env FMEM_LUA_BACKING=region:50:64M "$host" "$here/runner.lua" $specs
    have_region=1
else
    echo "skip: fmem-lua in a region: $(cat "$tmp/region")"
    have_region=0
fi

# churn BACKING ROUNDS: gc_churn.lua under fmem-lua gives the checksum the
# stock interpreter gives; the heap peaked above 1 MiB, nothing spilled to
# the C library, and the pool holds after the run what it held before.
want=$("$LUA" "$here/gc_churn.lua" 40)
churn() {
    backing=$1
    rounds=$2
    expect=$want
    [ "$rounds" = 40 ] || expect=$("$LUA" "$here/gc_churn.lua" "$rounds")
    if ! FMEM_LUA_STATS=1 FMEM_LUA_BACKING=$backing "$host" "$here/gc_churn.lua" "$rounds" \
        >"$tmp/churn.out" 2>"$tmp/churn.err"; then
        bad "gc_churn.lua under fmem-lua ($backing)"
        cat "$tmp/churn.err"
        return
    fi
    stats=$(grep '^fmem-lua: backing=' "$tmp/churn.err")
    val() { echo "$stats" | sed -n "s/.* $1=\([0-9]*\).*/\1/p"; }
    got=$(cat "$tmp/churn.out")
    if [ "$got" != "$expect" ]; then
        bad "gc_churn.lua under fmem-lua ($backing): '$got', want '$expect'"
    elif [ "$(val pool_before)" != "$(val pool_after)" ] || [ "$(val heap_after_close)" != 0 ]; then
        bad "gc_churn.lua under fmem-lua ($backing): pool not back: $stats"
    elif [ "$(val spills)" != 0 ] || [ "$(val heap_peak)" -lt 1048576 ]; then
        bad "gc_churn.lua under fmem-lua ($backing): heap not used: $stats"
    elif [ -n "${3:-}" ] && [ "$(val "$3")" -eq 0 ]; then
        bad "gc_churn.lua under fmem-lua ($backing): no $3: $stats"
    else
        ok "gc_churn.lua under fmem-lua ($backing): peak $(val heap_peak) B, pool $(val pool_before) -> $(val pool_after) B${3:+, $3 $(val "$3")}"
    fi
}
churn shm 40
if [ "$have_region" = 1 ]; then
    churn region:50:16M 40 faults
    churn region:10:16M 4 evictions
fi

# child processes (io.popen, os.execute) from a state in far memory
want=$("$LUA" "$here/spawn.lua" 60)
for backing in shm region:25:16M; do
    [ "$backing" = shm ] || [ "$have_region" = 1 ] || continue
    got=$(FMEM_LUA_BACKING=$backing "$host" "$here/spawn.lua" 60 2>&1)
    [ "$got" = "$want" ] && ok "spawn.lua under fmem-lua ($backing)" ||
        bad "spawn.lua under fmem-lua ($backing): '$got', want '$want'"
done

# the same specs under busted, when it is there for Lua 5.4
if "$LUA" -e 'require "busted.runner"' >/dev/null 2>&1 && [ -f /usr/bin/busted ]; then
    # shellcheck disable=SC2086
    step "specs under busted" "$LUA" /usr/bin/busted -o utfTerminal $specs
else
    echo "skip: busted for Lua 5.4 not installed"
fi

# fmem-lua's command line
echo 'io.write(select("#", ...), " ", arg[1], " ", table.concat({...}, ","))' >"$tmp/args.lua"
out=$("$host" -E "$tmp/args.lua" a b 2>&1)
[ "$out" = "2 a a,b" ] && ok "fmem-lua: arg and ... ($out)" || bad "fmem-lua: arg and ...: '$out'"
out=$(echo 'print(6 * 7)' | "$host" 2>&1)
[ "$out" = 42 ] && ok "fmem-lua: script on stdin" || bad "fmem-lua: script on stdin: '$out'"
# the REPL without readline (lua-diff.sh compares the readline one with lua5.4)
out=$(printf 'x = 20\nx + 1\nfor i = 1, 2 do\nio.write(i)\nend\n' | FMEM_LUA_READLINE=0 "$host" -i 2>&1)
case $out in *"> 21"*"> >> >> 12"*) ok "fmem-lua: interactive without readline" ;;
    *) bad "fmem-lua: interactive without readline: '$out'" ;; esac
out=$("$host" -l string -e 'error("boom")' 2>&1)
rc=$?
case "$rc $out" in "1 "*"boom"*"stack traceback"*) ok "fmem-lua: errors exit 1 with a traceback" ;;
    *) bad "fmem-lua: error exit: $rc '$out'" ;; esac
out=$(FMEM_LUA_BACKING=bogus "$host" -e 'print(1)' 2>&1)
rc=$?
case "$rc $out" in "1 fmem-lua: FMEM_LUA_BACKING='bogus': want"*) ok "fmem-lua: bad FMEM_LUA_BACKING refused" ;;
    *) bad "fmem-lua: bad backing: $rc '$out'" ;; esac
out=$(FMEM_LUA_BACKING=libc "$host" -e 'print(require("fmem").host())' 2>&1)
[ "$out" = nil ] && ok "fmem-lua: libc backing has no host heap" || bad "fmem-lua: libc: '$out'"

echo "lua: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
