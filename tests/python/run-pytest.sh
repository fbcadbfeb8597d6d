#!/bin/sh
# Run the Python tests (tests/python/test_*.py) with pytest against the
# module built in this tree: FMEM_PYSTAGE names the staged package
# (bindings/python/stage, or the ASan one), FMEM_PYTHON the interpreter.
# With FMEM_ASAN_LIB set, that libasan is preloaded (make check-python-asan).
# pytest's "no tests collected" (exit 5) counts as a failure.
top_srcdir=${top_srcdir:-$(dirname "$0")/../..}
top_builddir=${top_builddir:-$top_srcdir}
PY=${FMEM_PYTHON:-/usr/bin/python3}
STAGE=${FMEM_PYSTAGE:-$top_builddir/bindings/python/stage}
if [ ! -f "$STAGE/fmem/__init__.py" ]; then
    echo "run-pytest: no staged fmem package in $STAGE (run make first)" >&2
    exit 99
fi
if ! "$PY" -c 'import pytest' 2>/dev/null; then
    echo "run-pytest: $PY has no pytest (apt-get install python3-pytest): skipped" >&2
    exit 77
fi
FMEM_BUILDDIR=$(cd "$top_builddir" && pwd)
# libfmem.so currently needs ~64 KiB of static TLS, more than glibc keeps
# for libraries loaded at run time: reserve it (see docs/python.md)
GLIBC_TUNABLES=${GLIBC_TUNABLES:-glibc.rtld.optional_static_tls=0x20000}
export GLIBC_TUNABLES
PYTHONPATH=$STAGE${PYTHONPATH:+:$PYTHONPATH}
PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH FMEM_BUILDDIR PYTHONDONTWRITEBYTECODE
# tmp_path directories in a scratch directory removed at the end (pytest
# keeps the last three runs' in /tmp/pytest-of-USER otherwise)
basetemp=$(mktemp -d "${TMPDIR:-/tmp}/fmem-pytest-XXXXXX") || exit 99
trap 'rm -rf "$basetemp"' EXIT
# quiet, and no cache files in the source tree
set -- -q -p no:cacheprovider --basetemp="$basetemp" "$top_srcdir/tests/python" "$@"
if [ -n "$FMEM_ASAN_LIB" ]; then
    LD_PRELOAD=$FMEM_ASAN_LIB${LD_PRELOAD:+:$LD_PRELOAD} "$PY" -m pytest "$@"
else
    "$PY" -m pytest "$@"
fi
rc=$?
[ $rc -eq 5 ] && { echo "run-pytest: no tests were collected" >&2; exit 1; }
exit $rc
