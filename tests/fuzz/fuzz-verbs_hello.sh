#!/bin/sh
# make check: fuzz the verbs_hello target briefly (tests/fuzz/fuzz.sh)
exec sh "${top_srcdir:-.}/tests/fuzz/fuzz.sh" verbs_hello
