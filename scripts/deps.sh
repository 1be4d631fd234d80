#!/usr/bin/env bash
# Installs what the test suite needs and is missing: redis-server (real nodes for the lock and
# scheduler tests; redis-cli, which the chaos suite's daemon workers run), faketime (clock jumps
# on nodes) and chromium (the status page's browser
# test, driven with chromedp). Debian/Ubuntu, as root; elsewhere it
# says what to install.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${missing[*]} — install them with your package manager (e.g. apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package starts a system redis on 6379; the tests start their own on free ports.
systemctl stop redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true
