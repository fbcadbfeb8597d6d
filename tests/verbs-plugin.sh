#!/bin/sh
# libfmem.so and libfmem-preload.so do not link rdma-core; a program on
# libfmem.so that never opens an rdma:// pool loads none of librdmacm,
# libibverbs or libnl; the first rdma:// pool loads the verbs plugin
# (libfmem/transport/verbs/plugin.am), and without the plugin such a pool fails with
# "not supported" as in a build without rdma-core.
set -u
b=${top_builddir:-.}
fail=0
rdma_libs='librdmacm|libibverbs|libnl'
for lib in "$b/.libs/libfmem.so" "$b/.libs/libfmem-preload.so"; do
    if readelf -d "$lib" | grep NEEDED | grep -Eq "$rdma_libs"; then
        echo "FAIL: $lib links rdma-core:"; readelf -d "$lib" | grep NEEDED; fail=1
    fi
done
readelf -d "$b/.libs/libfmem-verbs.so" | grep NEEDED | grep -q librdmacm ||
    { echo "FAIL: the plugin does not link librdmacm"; fail=1; }
# loaded files of a program on libfmem.so (the demo) and of the preload
# library under /bin/true
loaded() { LD_DEBUG=files "$@" 2>&1 >/dev/null | grep -E "file=.*($rdma_libs)"; }
l=$(loaded "$b/examples/demo")
[ -z "$l" ] || { echo "FAIL: the demo loaded rdma-core:"; echo "$l"; fail=1; }
l=$(LD_PRELOAD="$(cd "$b" && pwd)/.libs/libfmem-preload.so" loaded /bin/true)
[ -z "$l" ] || { echo "FAIL: libfmem-preload.so loaded rdma-core:"; echo "$l"; fail=1; }
# the demo really ran on libfmem.so (not a static copy)
LD_DEBUG=files "$b/examples/demo" 2>&1 >/dev/null | grep -q 'file=.*libfmem\.so' ||
    { echo "FAIL: the demo does not load libfmem.so"; fail=1; }
# an rdma:// pool through libfmem.so (fmem verify) loads the plugin and
# with it librdmacm; nothing listens on port 9, so it then fails
l=$(LD_DEBUG=files timeout 60 "$b/tools/fmem" verify 'rdma://127.0.0.1:9' 2>&1 >/dev/null)
echo "$l" | grep -q 'file=.*libfmem-verbs\.so' ||
    { echo "FAIL: rdma:// did not load the plugin"; echo "$l" | tail -5; fail=1; }
echo "$l" | grep -q 'file=.*librdmacm' || { echo "FAIL: rdma:// did not load librdmacm"; fail=1; }
# without the plugin: not supported, and rdma-core is not loaded
out=$(FMEM_VERBS_PLUGIN=/nonexistent/libfmem-verbs.so timeout 60 "$b/tools/fmem" verify \
    'rdma://127.0.0.1:9' 2>&1)
echo "$out" | grep -q 'does not support' || { echo "FAIL: without the plugin: $out"; fail=1; }
[ "$fail" = 0 ] && echo "verbs plugin: libfmem.so and libfmem-preload.so load rdma-core only for rdma:// pools"
exit "$fail"
