#!/bin/sh
# make check: fuzz the handshake target briefly (tests/fuzz/fuzz.sh)
exec sh "${top_srcdir:-.}/tests/fuzz/fuzz.sh" handshake
