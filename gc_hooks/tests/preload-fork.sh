#!/bin/sh
# fork() under libfmem-preload.so with a named pool: blocks are remapped
# copy-on-write, not copied (snapshots both ways, several sizes); a block
# freed by the parent, or left by a parent that died, keeps its pool pages
# while a fork child still reads it - against the parent's own requests,
# another process, a process opening the pool, `fmem recover` and `fmem
# verify` - and is given back once the child is gone; fork+exec pins
# nothing; more than 64 generations deep and 100 forks of one parent work;
# forks while threads write into the block being remapped; many small
# blocks with gaps between them remapped one call each; a fork child uses
# its parent's write-protected blocks (kernel writes, its own SIGSEGV
# handler, threads) without remapping them in its fork handler; the first fork
# costs the parent less than half a plain fork's CPU; blocks left alone
# for a while are write-protected before the fork. With PRELOAD_FORK_DIR
# on a tmpfs mounted huge=within_size (or always) it all runs on 2 MiB
# pages, and a block is checked to be on them; the last line says which.
# PRELOAD_LIB runs it against another build of the library.
set -u
top_builddir=${top_builddir:-.}
lib=${PRELOAD_LIB:-$(cd "$top_builddir" && pwd)/.libs/libfmem-preload.so}
tests=$top_builddir/gc_hooks/tests
fmem=$top_builddir/tools/fmem
[ -f "$lib" ] || { echo "preload-fork: $lib not built"; exit 1; }
tmp=$(mktemp -d)
name=fmem-preload-forkpool-$$
pool="shm:/$name"
export PRELOAD_CHECK_FILE=/dev/shm/$name.data
# PRELOAD_FORK_DIR=DIR: the pool in DIR (file:), e.g. a tmpfs mounted with
# huge=within_size, whose blocks are then on 2 MiB pages
if [ -n "${PRELOAD_FORK_DIR:-}" ]; then
    pool="file:$PRELOAD_FORK_DIR/$name"
    PRELOAD_CHECK_FILE=$PRELOAD_FORK_DIR/$name.data
fi
unset FMEM_PRELOAD_THRESHOLD FMEM_PRELOAD_URI FMEM_PRELOAD_STATS FMEM_URI
trap '"$tests/pool_status" -u "$pool" 2>/dev/null; rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" "$2"; }
sum() { field "$1" "$2" | awk '{ s += $1 } END { print s + 0 }'; }
fresh() { "$tests/pool_status" -u "$pool" 2>/dev/null; rm -f "$tmp/stats"; }
pre() { env LD_PRELOAD="$lib" FMEM_PRELOAD_URI="$uri" FMEM_PRELOAD_STATS="$tmp/stats" "$@"; }
allocated() { "$tests/pool_status" "$pool" | sed -n 's/allocated=\([0-9]*\).*/\1/p'; }

# snapshots both ways, five sizes, two fork generations: nothing copied
uri="$pool?size=256M"
fresh
pre "$tests/preload_forkpool" snap >"$tmp/out" 2>&1
rc=$?
copied=$(sum copied_at_fork "$tmp/stats")
remapped=$(field remapped_at_fork "$tmp/stats" | sort -n | tail -n 1)
if [ $rc -eq 0 ] && [ "$copied" -eq 0 ] && [ "$remapped" -gt 0 ]; then
    ok "snapshots both ways: nothing copied, $remapped bytes remapped"
else
    bad "snapshots: rc=$rc copied=$copied remapped=$remapped"; cat "$tmp/out" "$tmp/stats"
fi

# the parent frees a block a child reads; it, and another process, then
# fill the pool's free space: the child still reads its bytes
uri="$pool?size=64M"
fresh
FILL_CMD="$tests/preload_forkpool fill 25165824 3 >/dev/null" \
    pre "$tests/preload_forkpool" reuse 25165824 >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    ok "$(tail -n 1 "$tmp/out")"
else
    bad "freed while a child reads: rc=$rc"; cat "$tmp/out"
fi

# the parent dies holding a block, its child reads on: nothing gives the
# block back (a process opening the pool, fmem recover, fmem verify) until
# the child exits; then fmem recover does
fresh
rm -f "$tmp/go" "$tmp/go.res"
pre "$tests/preload_forkpool" hold 16777216 "$tmp/go" >"$tmp/out" 2>&1
rc=$?
child=$(sed -n 's/^child \([0-9]*\)/\1/p' "$tmp/out")
held=$(allocated)
pre "$tests/preload_forkpool" fill 25165824 3 >"$tmp/fill.out" 2>&1
for u in 1 2 3; do "$fmem" recover "$uri" $u >>"$tmp/recover.out" 2>&1; done
"$fmem" verify "$uri" >"$tmp/verify.out" 2>&1
vrc=$?
after=$(allocated)
touch "$tmp/go"
i=0
while kill -0 "$child" 2>/dev/null && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
res=$(cat "$tmp/go.res" 2>/dev/null)
if [ $rc -eq 0 ] && [ -n "$child" ] && [ "${held:-0}" -ge 16777216 ] && [ "$after" = "$held" ] &&
    [ $vrc -eq 0 ] && ! grep -q "awaiting recovery\|leak" "$tmp/verify.out" && [ "$res" = ok ] &&
    grep -q "processes forked from it still read its blocks" "$tmp/recover.out"; then
    ok "parent died, child read on: $held bytes kept through a pool open, fmem recover, fmem verify"
else
    bad "parent died: rc=$rc child=$child held=$held after=$after verify=$vrc res=$res"
    cat "$tmp/out" "$tmp/fill.out" "$tmp/recover.out" "$tmp/verify.out"
fi
"$fmem" verify "$uri" >"$tmp/verify2.out" 2>&1
for u in 1 2 3; do "$fmem" recover "$uri" $u >/dev/null 2>&1; done
gone=$(allocated)
if grep -q "awaiting recovery" "$tmp/verify2.out" && [ "$gone" = 0 ]; then
    ok "child gone: verify reports the dead user's blocks, fmem recover gives them back"
else
    bad "child gone: allocated=$gone"; cat "$tmp/verify2.out"
fi

# the same, but the parent is killed (SIGKILL) and the next process to
# open the pool gives the blocks back
fresh
rm -f "$tmp/go" "$tmp/go.res"
pre "$tests/preload_forkpool" hold 16777216 "$tmp/go" kill >"$tmp/out" 2>&1
child=$(sed -n 's/^child \([0-9]*\)/\1/p' "$tmp/out")
pre "$tests/preload_forkpool" fill 1048576 1 >/dev/null 2>&1
held=$(allocated)
touch "$tmp/go"
i=0
while kill -0 "$child" 2>/dev/null && [ $i -lt 500 ]; do sleep 0.02; i=$((i + 1)); done
pre "$tests/preload_forkpool" fill 1048576 1 >/dev/null 2>&1
gone=$(allocated)
if [ "${held:-0}" -ge 16777216 ] && [ "$gone" = 0 ] && [ "$(cat "$tmp/go.res" 2>/dev/null)" = ok ]; then
    ok "parent killed: a process opening the pool kept its blocks while the child ran, freed them after"
else
    bad "parent killed, recovery by the next process: held=$held after=$gone"
fi

# fork + exec pins nothing: the freed block's space serves at once
uri="$pool?size=64M"
fresh
if pre "$tests/preload_forkpool" exec 41943040 >"$tmp/out" 2>&1; then
    ok "fork+exec: the parent's freed block is the pool's again while the child runs"
else
    bad "fork+exec"; cat "$tmp/out"
fi

# generations: 80 deep, each with a block of its own in the pool
uri="$pool?size=256M"
fresh
pre "$tests/preload_forkpool" chain 80 >"$tmp/out" 2>&1
rc=$?
fb=$(sum fallbacks "$tmp/stats")
if [ $rc -eq 0 ] && [ "$fb" -eq 0 ]; then
    ok "$(tail -n 1 "$tmp/out"), every block in the pool"
else
    bad "chain: rc=$rc fallbacks=$fb"; tail -n 5 "$tmp/out"
fi

# 100 forks of one parent, a block freed after each (deferred): at the end
# nothing is pinned (48 MiB of a 64 MiB pool serve)
uri="$pool?size=64M"
fresh
MANY_BIG=50331648 pre "$tests/preload_forkpool" many 100 >"$tmp/out" 2>&1
rc=$?
copied=$(sum copied_at_fork "$tmp/stats")
if [ $rc -eq 0 ] && [ "$copied" -eq 0 ]; then
    ok "$(tail -n 1 "$tmp/out")"
else
    bad "many forks: rc=$rc copied=$copied"; tail -n 5 "$tmp/out"
fi

# no descriptor for the lock: the parent copies its blocks into private
# memory before the fork (no pipe either: it does not wait), the snapshot holds
uri="$pool?size=64M"
fresh
(ulimit -n 64 && pre "$tests/preload_forkpool" nofd) >"$tmp/out" 2>&1
rc=$?
copied=$(sum copied_at_fork "$tmp/stats")
if [ $rc -eq 0 ] && [ "$copied" -ge 8388608 ]; then
    ok "no descriptor for the fork's lock: the parent copied its block into private memory (copied_at_fork), snapshot held"
else
    bad "nofd: rc=$rc copied=$copied"; tail -n 5 "$tmp/out"
fi

# forks while other threads allocate, write and free
uri="$pool?size=256M"
fresh
if pre "$tests/preload_forkpool" threads 40 >"$tmp/out" 2>&1; then
    ok "$(tail -n 1 "$tmp/out")"
else
    bad "threads"; tail -n 5 "$tmp/out"
fi

# forks while three threads rewrite the block each fork remaps: a large
# one (its page tables moved aside) and a small one (write-protected at
# the fork and remapped at the first write; with FMEM_PRELOAD_LAZY_FORK=0
# its entries dropped and remapped at the fork)
for size in 33554432 1572864; do
    uri="$pool?size=256M"
    fresh
    if pre "$tests/preload_forkpool" writers 20 $size >"$tmp/out" 2>&1; then
        ok "$(tail -n 1 "$tmp/out")"
    else
        bad "writers $size"; tail -n 5 "$tmp/out"
    fi
done

# many small blocks with gaps between them, across two forks: snapshots
# both ways, blocks allocated into the gaps, a thread allocating all along;
# afterwards every block is the pool's again. 200 KB blocks (three pool
# blocks side by side): one remapping call per block; 20 KB ones: several
# blocks per group of records the fork looks at, some remapped at the first
# fork and some new at the second (the first's private pages must stay)
for g in "600 204800 count" "2000 20480"; do
    uri="$pool?size=256M"
    fresh
    # shellcheck disable=SC2086
    FMEM_PRELOAD_THRESHOLD=16384 pre "$tests/preload_forkpool" gaps $g >"$tmp/out" 2>&1
    rc=$?
    left=$(allocated)
    if [ $rc -eq 0 ] && [ "${left:-1}" -eq 0 ]; then
        ok "$(tail -n 1 "$tmp/out"), nothing left allocated"
    else
        bad "gaps $g: rc=$rc allocated after exit=$left"; tail -n 5 "$tmp/out"
    fi
done
unset FMEM_PRELOAD_THRESHOLD

# lazy fork: 24 forks (three nested) of a parent with 200 blocks of
# 200 KB, a thread allocating, writing and freeing all along; the parent
# rewrites every block after each fork (through read() too, frees one,
# moves one with realloc); the forking thread remaps nothing during the
# fork (the blocks are write-protected, remapped at their first write);
# the child's fork handler makes at most 2 remapping calls (its blocks are
# remapped at its first access to each) or, with
# FMEM_PRELOAD_CHILD_REMAP=eager, remaps them all; then the same with
# write protection turned off (FMEM_PRELOAD_LAZY_FORK=0:
# every block remapped at fork) and, where this runs as root and
# unprivileged users may not use userfaultfd, as user nobody (refused by
# the kernel). Nothing is left in the pool after any of them.
modes="lazy eagerchild eager"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null &&
    [ "$(cat /proc/sys/vm/unprivileged_userfaultfd 2>/dev/null)" = 0 ]; then
    modes="$modes refused"
fi
for mode in $modes; do
    uri="$pool?size=256M"
    fresh
    if [ $mode = lazy ]; then
        FMEM_PRELOAD_THRESHOLD=16384 pre "$tests/preload_forkpool" lazy 200 24 count >"$tmp/out" 2>&1
    elif [ $mode = eagerchild ]; then
        FMEM_PRELOAD_CHILD_REMAP=eager FMEM_PRELOAD_THRESHOLD=16384 \
            pre "$tests/preload_forkpool" lazy 200 24 count >"$tmp/out" 2>&1
    elif [ $mode = eager ]; then
        FMEM_PRELOAD_LAZY_FORK=0 FMEM_PRELOAD_THRESHOLD=16384 pre "$tests/preload_forkpool" lazy 200 24 >"$tmp/out" 2>&1
    else
        chmod 755 "$tmp"
        : >"$tmp/stats"
        chmod 666 "$tmp/stats"
        FMEM_PRELOAD_THRESHOLD=16384 pre setpriv --reuid=65534 --regid=65534 --clear-groups \
            "$tests/preload_forkpool" lazy 200 24 >"$tmp/out" 2>&1
    fi
    rc=$?
    left=$(allocated)
    prot=$(sum protected_at_fork "$tmp/stats")
    onwrite=$(sum remapped_on_write "$tmp/stats")
    if [ $mode != eager ] && [ $mode != refused ]; then
        want=$([ "$prot" -gt 0 ] && [ "$onwrite" -gt 0 ] && echo y); else
        want=$([ "$prot" -eq 0 ] && [ "$(sum remapped_at_fork "$tmp/stats")" -gt 0 ] && echo y); fi
    if [ $rc -eq 0 ] && [ "${left:-1}" -eq 0 ] && [ "$want" = y ]; then
        ok "$mode: $(tail -n 1 "$tmp/out"), protected_at_fork=$prot remapped_on_write=$onwrite, nothing left allocated"
    else
        bad "$mode fork: rc=$rc allocated after exit=$left protected=$prot on_write=$onwrite"; tail -n 5 "$tmp/out"
    fi
done

# a fork child of a parent with 200 blocks of 200 KB (write-protected at
# the fork): its fork handler makes at most 2 remapping calls, and before
# any other use of the blocks a grandchild (at most 2 calls as well)
# writes ten of them without the child seeing it, the kernel writes into them (recvmsg,
# preadv, fstat, syscall()), a SIGSEGV handler of the child's own is in
# place while it writes some, four threads race to check and write the
# rest, and it writes one after closing every descriptor: each works, and
# the parent's bytes stay as they were; the same with the remap in the
# child's fork handler (FMEM_PRELOAD_CHILD_REMAP=eager, no count), and
# with the child's remaps failing (copied from the pool file instead);
# closefirst: the child closes every descriptor and opens files in their
# place before it forks, and the grandchild still sees the parent's bytes
for mode in default eager failremap closefirst; do
    uri="$pool?size=256M"
    fresh
    if [ $mode = default ]; then
        FMEM_PRELOAD_THRESHOLD=16384 pre "$tests/preload_forkpool" childuse 200 >"$tmp/out" 2>&1
    elif [ $mode = failremap ] || [ $mode = closefirst ]; then
        FMEM_PRELOAD_THRESHOLD=16384 pre timeout 120 "$tests/preload_forkpool" childuse 200 $mode \
            >"$tmp/out" 2>&1
    else
        FMEM_PRELOAD_CHILD_REMAP=eager FMEM_PRELOAD_THRESHOLD=16384 \
            pre "$tests/preload_forkpool" childuse 200 >"$tmp/out" 2>&1
    fi
    rc=$?
    left=$(allocated)
    prot=$(sum protected_at_fork "$tmp/stats")
    early=$(sum protected_early "$tmp/stats")
    if [ $rc -eq 0 ] && [ "${left:-1}" -eq 0 ] && [ $((prot + early)) -gt 0 ]; then
        ok "$mode child: $(tail -n 1 "$tmp/out"), nothing left allocated"
    else
        bad "child's uses, $mode: rc=$rc allocated after exit=$left protected=$prot+$early"
        tail -n 8 "$tmp/out"
    fi
done

# blocks left alone for a while are write-protected before the first fork
# (the fork then makes a call only for the three written since); writes
# before the fork (memset, read(), realloc in place) lift the protection,
# the child sees every block as of the fork; with
# FMEM_PRELOAD_EARLY_PROTECT=0 nothing is protected before the fork and
# the snapshot holds as well
for mode in early off; do
    uri="$pool?size=256M"
    fresh
    if [ $mode = early ]; then
        FMEM_PRELOAD_THRESHOLD=16384 pre "$tests/preload_forkpool" early 200 count >"$tmp/out" 2>&1
    else
        FMEM_PRELOAD_EARLY_PROTECT=0 FMEM_PRELOAD_THRESHOLD=16384 \
            pre "$tests/preload_forkpool" early 200 >"$tmp/out" 2>&1
    fi
    rc=$?
    left=$(allocated)
    early=$(sum protected_early "$tmp/stats")
    written=$(sum written_early "$tmp/stats")
    if [ $mode = early ]; then want=$([ "$early" -gt 0 ] && [ "$written" -gt 0 ] && echo y); else
        want=$([ "$early" -eq 0 ] && [ "$(sum protected_at_fork "$tmp/stats")" -gt 0 ] && echo y); fi
    if [ $rc -eq 0 ] && [ "${left:-1}" -eq 0 ] && [ "$want" = y ]; then
        ok "$mode: $(tail -n 1 "$tmp/out"), protected_early=$early written_early=$written, nothing left allocated"
    else
        bad "early protection, $mode: rc=$rc allocated after exit=$left protected_early=$early written_early=$written"
        tail -n 5 "$tmp/out"
    fi
done

# the first fork after a 128 MiB block was allocated: the parent's CPU
# time is under half a plain fork's (no page-by-page teardown)
uri="$pool?size=256M"
fresh
if pre "$tests/preload_forkpool" firstfork 134217728 >"$tmp/out" 2>&1; then
    ok "$(tail -n 1 "$tmp/out")"
else
    bad "first fork"; tail -n 5 "$tmp/out"
fi

# where the pool's file system gives it 2 MiB pages, the blocks are on them
huge=$(awk -v d="$(df --output=target "$(dirname "$PRELOAD_CHECK_FILE")" | tail -n 1)" \
    '$2 == d && $3 == "tmpfs" { h = "never"; n = split($4, o, ","); for (i = 1; i <= n; i++)
        if (o[i] ~ /^huge=/) h = substr(o[i], 6) } END { print h }' /proc/mounts)
if [ "$huge" = within_size ] || [ "$huge" = always ]; then
    uri="$pool?size=256M"
    fresh
    if pre "$tests/preload_forkpool" huge 33554432 >"$tmp/out" 2>&1; then
        ok "$(tail -n 1 "$tmp/out")"
    else
        bad "huge pages"; tail -n 5 "$tmp/out"
    fi
fi
echo "preload-fork: $pass passed, $fail failed (pool on tmpfs huge=${huge:-?})"
[ $fail -eq 0 ]
