#!/bin/sh
# tests/readme-snippets.sh - make check: the README's code blocks compile
# and run as shown (tests/readme_snippets.py has the rules).
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
PY=${FMEM_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
exec "$PY" "$top_srcdir/tests/readme_snippets.py" "$top_srcdir" "$top_builddir"
