#!/bin/sh
# dist-files.sh SRCDIR DISTDIR: every file of the source tree that the README,
# docs/ or a README of a subfolder names is in the release tarball (make dist
# runs this on the tree it is about to pack).
set -u
src=$1 dist=$2
missing=0
for f in $(cd "$src" && cat README.md docs/*.md bench/README.md bindings/python/README.md 2>/dev/null |
    grep -o '\(scripts\|tests\|bench\|docs\|examples\|tools\|dist\|bindings\|gc_hooks\|libfmem\|man\)/[A-Za-z0-9_./-]*[A-Za-z0-9_]' |
    sort -u); do
    # build products are named too (tests/torture, .libs): only what git
    # tracks counts (from a tarball, without git, there is nothing to check)
    [ -n "$(git -C "$src" ls-files -- "$f" 2>/dev/null | head -n 1)" ] || continue
    [ -e "$dist/$f" ] || { echo "dist: $f is named in the docs but not in the tarball"; missing=1; }
done
for f in LICENSE README.md scripts/quickstart.sh scripts/test.sh scripts/deps.sh; do
    [ -e "$dist/$f" ] || { echo "dist: $f missing"; missing=1; }
done
exit "$missing"
