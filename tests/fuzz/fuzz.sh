#!/bin/sh
# fuzz.sh - build and run one libFuzzer target (clang, with AddressSanitizer
# and UndefinedBehaviorSanitizer) on every input the kit takes from outside:
#
#   msg          the daemons' message decoder and ring request decoder
#   handshake    fmemd and fmem-mnode, in process, as a hostile peer sees
#                them: their sockets (handshake and later messages) and the
#                application's request ring
#   uri          the pool URI parser
#   pool_file    a pool whose metadata file someone rewrote: open, use,
#                verify and recover it
#   verbs_hello  the private data of RDMA connection setup
#
# Usage: fuzz.sh TARGET. FUZZ_SECONDS (default 5) is how long it runs;
# FUZZ_CORPUS=DIR keeps the corpus there (default: a temporary one). The
# committed seeds in tests/fuzz/seeds/TARGET (valid inputs and every input
# that once crashed) are always read. Objects and binaries are kept in
# $top_builddir/tests/fuzz/build and rebuilt when a source changes; a crash
# leaves its input in $top_builddir/tests/fuzz/crash-TARGET-*.
# Exit 0 when nothing was found, 1 on a crash, leak or hang, 77 (skip)
# without clang's libFuzzer runtime.
set -u
srcdir=$(cd "${top_srcdir:-.}" && pwd)
builddir=$(cd "${top_builddir:-.}" && pwd)
target=${1:?usage: fuzz.sh TARGET}
secs=${FUZZ_SECONDS:-5}
clang=${CLANG:-clang}
out=$builddir/tests/fuzz
obj=$out/build/obj
bin=$out/build/fuzz_$target
seeds=$srcdir/tests/fuzz/seeds/$target

core_sources() { # every library source that needs nothing but libc (and the
    # ssd:/zmem: stores' lz4 and zstd; ssd: without liburing here)
    (cd "$srcdir" && ls libfmem/*.c libfmem/core/*.c libfmem/transport/*.c libfmem/service/*.c)
}
extra=""
case $target in
msg) sources="libfmem/service/msg.c libfmem/service/status_wire.c"; extra="-max_len=70000" ;;
uri) sources="libfmem/uri.c"; extra="-max_len=8192" ;;
verbs_hello) sources="libfmem/transport/verbs/verbs_proto.c"; extra="-max_len=256" ;;
pool_file) sources=$(core_sources); extra="-max_len=65536" ;;
# the daemons' threads allocate as they please: no leak check per input
handshake) sources=$(core_sources); extra="-max_len=16384 -detect_leaks=0" ;;
*) echo "fuzz.sh: unknown target $target"; exit 2 ;;
esac
sources="tests/fuzz/fuzz_$target.c $sources"

if ! command -v "$clang" >/dev/null 2>&1; then
    echo "SKIP: $clang not found (install clang and libclang-rt-14-dev)"
    exit 77
fi
mkdir -p "$obj"
# can this clang build a libFuzzer target at all?
probe=$out/build/probe
if [ ! -x "$probe" ] &&
    ! printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' |
        "$clang" -x c -fsanitize=fuzzer,address - -o "$probe" >/dev/null 2>&1; then
    echo "SKIP: $clang cannot build a libFuzzer target (install libclang-rt-14-dev)"
    exit 77
fi
FLAGS="-g -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -std=c11 -D_GNU_SOURCE"
CPP="-I$srcdir/libfmem/include -I$srcdir/libfmem -I$srcdir/libfmem/core -I$srcdir/libfmem/transport"

# build, one at a time (make -j runs several targets at once): an object is
# rebuilt when its source or any header is newer
exec 9>"$out/build/.lock"
flock 9
newest_h=$(ls -t "$srcdir"/libfmem/*.h "$srcdir"/libfmem/*/*.h "$srcdir"/libfmem/include/*.h | head -n 1)
stale=""
objs=""
for s in $sources; do
    o=$obj/$(echo "$s" | tr / _ | sed 's/\.c$/.o/')
    objs="$objs $o"
    if [ ! -f "$o" ] || [ "$srcdir/$s" -nt "$o" ] || [ "$newest_h" -nt "$o" ]; then
        stale="$stale $s"
    fi
done
log=$out/build/$target.log
if [ -n "$stale" ]; then
    echo "fuzz.sh: compiling$stale"
    for s in $stale; do echo "$s"; done |
        xargs -P 2 -I{} sh -c 'o='"$obj"'/$(echo "{}" | tr / _ | sed "s/\.c$/.o/");
            '"$clang $FLAGS -fsanitize=fuzzer-no-link $CPP"' -c "'"$srcdir"'/{}" -o "$o" 2>>"'"$log"'" ||
            { rm -f "$o"; exit 1; }' ||
        { echo "fuzz.sh: the $target target does not compile:"; tail -n 20 "$log"; exit 1; }
fi
relink=""
[ -f "$bin" ] || relink=1
for o in $objs; do [ "$o" -nt "$bin" ] && relink=1; done
if [ -n "$relink" ] &&
    ! $clang $FLAGS -fsanitize=fuzzer $objs -lpthread -llz4 -lzstd -o "$bin" 2>>"$log"; then
    echo "fuzz.sh: the $target target does not link:"
    tail -n 20 "$log"
    exit 1
fi
flock -u 9

# the targets' pool files and sockets go here, removed even after a crash
FMEM_FUZZ_DIR=$(mktemp -d /dev/shm/fmem-fuzz-XXXXXX) || exit 1
export FMEM_FUZZ_DIR
if [ -n "${FUZZ_CORPUS:-}" ]; then
    corpus=$FUZZ_CORPUS
    mkdir -p "$corpus"
    trap 'rm -rf "$FMEM_FUZZ_DIR"' EXIT
else
    corpus=$(mktemp -d)
    trap 'rm -rf "$corpus" "$FMEM_FUZZ_DIR"' EXIT
fi
[ -d "$seeds" ] || seeds=""
echo "fuzzing $target for $secs s (corpus $corpus${seeds:+, seeds $seeds})"
run=$out/build/$target.run.log
# crashes, leaks and hangs exit 1 (libFuzzer's default 77 would read as skip)
"$bin" -max_total_time="$secs" -timeout=20 -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 -use_value_profile=1 $extra -artifact_prefix="$out/crash-$target-" \
    "$corpus" $seeds >"$run" 2>&1
rc=$?
if [ $rc -eq 0 ]; then tail -n 12 "$run"; else tail -n 80 "$run"; fi
# one line for the record: time, executions, coverage
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run" | tail -n 1)
last=$(grep -aE '^#[0-9]+.*cov: ' "$run" | tail -n 1)
cov=$(echo "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(echo "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
corp=$(echo "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
echo "fuzz $target: $secs s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}: $([ $rc -eq 0 ] && echo 'nothing found' || echo "FOUND A PROBLEM (see $out/crash-$target-*)")" |
    tee "$out/build/$target.summary"
exit $rc
