#!/bin/sh
# The systemd units of the daemons (dist/*.service.in, as make builds them):
# they run as the user fmem, never root, sandboxed, with readiness
# notification, systemd-analyze verify accepts them, and
# `systemd-analyze security --offline=yes` rates each below 5.0 ("OK"; 10
# is "UNSAFE"). Skipped (77) without systemd-analyze.
set -u
builddir=${top_builddir:-.}
srcdir=${top_srcdir:-.}
if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "skip: systemd-analyze is not installed"
    exit 77
fi
dir=$(mktemp -d /tmp/fmem-units-XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail=0
for unit in fmem-mnode fmemd; do
    # the unit as installed, with this build's programs (verify looks for them)
    sed -e "s|@bindir[@]|$(cd "$builddir" && pwd)/tools|g" -e "s|@sysconfdir[@]|/etc|g" \
        "$srcdir/dist/$unit.service.in" \
        >"$dir/$unit.service"
    f=$dir/$unit.service
    for want in 'User=fmem' 'Group=fmem' 'Type=notify' 'RuntimeDirectory=fmem' \
        'ProtectSystem=strict' 'PrivateTmp=yes' 'NoNewPrivileges=yes' 'CapabilityBoundingSet=$'; do
        grep -q "^$want" "$f" || { echo "FAIL: $unit.service lacks $want"; fail=1; }
    done
    if ! systemd-analyze verify "$f" >"$dir/verify.log" 2>&1 || [ -s "$dir/verify.log" ]; then
        echo "FAIL: systemd-analyze verify $unit.service:"; cat "$dir/verify.log"; fail=1
    fi
    systemd-analyze security --offline=yes "$f" >"$dir/security.log" 2>&1
    level=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p' "$dir/security.log")
    if [ -z "$level" ]; then
        echo "FAIL: no exposure level for $unit.service:"; cat "$dir/security.log"; fail=1
        continue
    fi
    echo "$unit.service: exposure level $level"
    # --threshold is in tenths: 49 is 4.9
    if ! awk -v l="$level" 'BEGIN { exit !(l < 5.0) }' ||
        ! systemd-analyze security --offline=yes --threshold=49 "$f" >/dev/null 2>&1; then
        echo "FAIL: $unit.service is rated $level, not below 5.0:"
        grep '✗' "$dir/security.log"
        fail=1
    fi
done
exit $fail
