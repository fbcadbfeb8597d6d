#!/bin/sh
# make check: fuzz the pool_file target briefly (tests/fuzz/fuzz.sh)
exec sh "${top_srcdir:-.}/tests/fuzz/fuzz.sh" pool_file
