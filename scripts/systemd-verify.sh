#!/usr/bin/env bash
# Checks a systemd unit with `systemd-analyze verify`: directives, values and the programs it
# runs. The unit's cronlock (/usr/local/bin/cronlock, not installed on a build machine) is
# pointed at a stand-in executable in a copy of the unit; everything else is verified as
# written. Any warning fails.
set -euo pipefail
unit="$1"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not found: install systemd (scripts/deps.sh does)" >&2
  exit 1
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '#!/bin/sh\n' >"$tmp/cronlock"
chmod +x "$tmp/cronlock"
sed "s#/usr/local/bin/cronlock#$tmp/cronlock#g" "$unit" >"$tmp/$(basename "$unit")"
out="$(cd "$tmp" && systemd-analyze verify "$tmp/$(basename "$unit")" 2>&1)" || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then
  echo "$out" >&2
  exit 1
fi
echo "$unit: systemd-analyze verify: ok"
