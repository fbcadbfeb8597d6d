#!/bin/sh
# Fuzz the service's message decoders with libFuzzer (clang). In make check
# it runs FUZZ_SECONDS (15) seconds; `make fuzz` runs longer on a corpus
# kept in tests/fuzz_corpus. Skipped (exit 77) without clang's fuzzer runtime.
srcdir=${top_srcdir:-.}
builddir=${top_builddir:-.}
secs=${FUZZ_SECONDS:-15}
clang=${CLANG:-clang}
bin=$builddir/tests/fuzz_msg.bin
log=$builddir/tests/fuzz_msg.build.log
if ! command -v "$clang" >/dev/null 2>&1; then
    echo "SKIP: $clang not found (install clang and libclang-rt-14-dev)"
    exit 77
fi
if ! "$clang" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -std=c11 -D_GNU_SOURCE -I"$srcdir/libfmem/include" -I"$srcdir/libfmem" \
        "$srcdir/tests/fuzz_msg.c" "$srcdir/libfmem/service/msg.c" -o "$bin" >"$log" 2>&1; then
    echo "SKIP: $clang cannot build a libFuzzer target (is clang's fuzzer runtime installed?)"
    tail -n 5 "$log"
    exit 77
fi
if [ -n "$FUZZ_CORPUS" ]; then
    corpus=$FUZZ_CORPUS
    mkdir -p "$corpus"
else
    corpus=$(mktemp -d)
    trap 'rm -rf "$corpus"' EXIT
fi
echo "fuzzing the decoders for $secs s"
exec "$bin" -max_total_time="$secs" -use_value_profile=1 -max_len=70000 -print_final_stats=1 \
    -artifact_prefix="$builddir/tests/fuzz_msg-" "$corpus"
