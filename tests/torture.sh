#!/bin/sh
# a few hundred SIGKILLs of workers sharing one pool, each recovered live
exec "${top_builddir:-.}/tests/torture" --kills "${TORTURE_KILLS:-300}"
