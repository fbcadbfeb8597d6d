#!/bin/sh
# Configure (once) and build fmem in the source tree.
set -e
cd "$(dirname "$0")/.."
[ -x configure ] || autoreconf -fi >/dev/null
[ -f Makefile ] || ./configure -q
make -j"$(nproc)" >/dev/null
