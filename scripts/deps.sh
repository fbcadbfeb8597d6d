#!/bin/sh
# Install the Debian 12 packages fmem needs to build and test (as root, or
# through sudo). Safe to run again. With --suites, also what make
# check-suites runs: CPython's regression tests and hypothesis (numpy's and
# pandas' tests need it); numpy's and pandas' tests ship in their packages.
set -e
PKGS="build-essential autoconf automake libtool pkg-config libcriterion-dev valgrind libpng-dev clang libclang-rt-14-dev libibverbs-dev librdmacm-dev libffi-dev libgmp-dev python3-dev python3-numpy python3-pandas python3-pytest python3-matplotlib python3-mypy python3-pip python3-setuptools python3-wheel liblua5.4-dev xz-utils zlib1g-dev libxml2-dev libssl-dev liburing-dev liblz4-dev libzstd-dev lua5.4 lua-busted luarocks systemd man-db libmimalloc-dev"
[ "$1" = --suites ] && PKGS="$PKGS libpython3.11-testsuite python3-hypothesis"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "deps: installing$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
