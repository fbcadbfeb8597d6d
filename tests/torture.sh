#!/bin/sh
# a few hundred SIGKILLs of workers sharing one pool, each recovered live;
# then again with frees going through the quarantine (as over verbs: a free
# commits with the block marked, and the block is freed in its layer after)
"${top_builddir:-.}/tests/torture" --kills "${TORTURE_KILLS:-300}" || exit 1
FMEM_QUARANTINE_LOCAL=1 exec "${top_builddir:-.}/tests/torture" --kills "${TORTURE_KILLS:-300}"
