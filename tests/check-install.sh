#!/bin/sh
# make install into a scratch root; the shared library is versioned, exports
# only fmem_*, and a program builds against it with pkg-config and runs.
set -eu
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -C "$top_builddir" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; exit 1; }
lib=$(find "$tmp/root" -name 'libfmem.so.*.*' | head -n 1)
[ -n "$lib" ] || { echo "no versioned libfmem.so.X.Y.Z installed"; exit 1; }
libdir=$(dirname "$lib")
[ -e "$libdir/libfmem.so" ] || { echo "no libfmem.so link"; exit 1; }
pcdir=$(find "$tmp/root" -name fmem.pc -exec dirname {} \; | head -n 1)
[ -n "$pcdir" ] || { echo "fmem.pc not installed"; exit 1; }
[ -n "$(find "$tmp/root" -path '*/include/fmem/fmem.h')" ] ||
    { echo "fmem.h not installed under INCLUDEDIR/fmem"; exit 1; }
[ -z "$(find "$tmp/root" -path '*/include/fmem*.h' -not -path '*/include/fmem/*')" ] ||
    { echo "a header installed outside INCLUDEDIR/fmem"; exit 1; }
las=$(find "$tmp/root" -name '*.la')
[ -z "$las" ] || { echo "libtool archives installed:"; echo "$las"; exit 1; }
for f in LICENSE README.md docs/choosing.md docs/img/alloc-threads.png; do
    [ -n "$(find "$tmp/root" -path "*/share/doc/fmem/$f")" ] || { echo "DOCDIR/$f not installed"; exit 1; }
done
defaults=$(find "$tmp/root" -path '*/etc/default/fmem')
[ -n "$defaults" ] || { echo "SYSCONFDIR/default/fmem not installed"; exit 1; }
# the verbs transport is a plugin beside the library (libfmem/transport/verbs/plugin.am)
if grep -q '^RDMA_LIBS = -l' "$top_builddir/Makefile"; then
    [ -e "$libdir/fmem/libfmem-verbs.so" ] || { echo "LIBDIR/fmem/libfmem-verbs.so not installed"; exit 1; }
    ! readelf -d "$lib" | grep NEEDED | grep -Eq 'librdmacm|libibverbs' ||
        { echo "the installed libfmem.so links rdma-core"; exit 1; }
fi
# manual pages (when python3 generated them), a link page per function
if grep -q '^PYTHON3 = /' "$top_builddir/Makefile"; then
    for m in man1/fmem.1 man8/fmemd.8 man8/fmem-mnode.8 man3/libfmem.3 man3/fmem_open.3 \
        man3/fmem_heap_malloc.3; do
        [ -n "$(find "$tmp/root" -path "*/share/man/$m")" ] || { echo "$m not installed"; exit 1; }
    done
fi
# the units read the settings file where it was installed
for u in $(find "$tmp/root" -name 'fmem*.service'); do
    grep -q "^EnvironmentFile=-${defaults#"$tmp/root"}\$" "$u" ||
        { echo "$u does not read ${defaults#"$tmp/root"}"; exit 1; }
done
# exported symbols: all start with fmem_
bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRVW]/ {print $3}' | grep -v '^fmem_' | grep -v '^FMEM_' || true)
[ -z "$bad" ] || { echo "exported non-API symbols:"; echo "$bad"; exit 1; }
nm -D --defined-only "$lib" | grep -q ' T fmem_alloc' || { echo "fmem_alloc not exported"; exit 1; }
# build the demo against the installed library through pkg-config
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$tmp/root"
cc -std=c11 -Wall -Wextra -Werror "$top_srcdir/examples/demo.c" -o "$tmp/demo" \
    $(pkg-config --cflags --libs fmem)
LD_LIBRARY_PATH="$libdir" "$tmp/demo" >"$tmp/demo.out"
grep -q 'hello, far memory' "$tmp/demo.out" || { cat "$tmp/demo.out"; exit 1; }
echo "install check: $(basename "$lib"), $(nm -D --defined-only "$lib" | grep -c ' T fmem_') exported functions"
