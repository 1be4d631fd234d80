#!/usr/bin/env bash
# Installs what the test suite needs and is missing: redis-server (real nodes for the lock and
# scheduler tests; redis-cli, which the chaos suite's daemon workers run), faketime (clock jumps
# on nodes), chromium (the status page's browser test, driven with chromedp), podman with runc
# and busybox-static (the container image's test: internal/containertest builds the image and
# runs three containers; busybox gives its job a shell and flock), and systemd-analyze (checks
# deploy/systemd), prometheus and jq (scripts/promcheck.sh: promtool checks deploy/prometheus and
# the queries of deploy/grafana, which jq reads; cmd/cronlock's alert test runs a real
# Prometheus), postgresql (initdb and the server for the Postgres fence tests,
# internal/pgtest; Debian keeps them in /usr/lib/postgresql/<version>/bin). Debian/Ubuntu, as
# root; elsewhere it says what to install.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v faketime >/dev/null 2>&1 || missing+=(faketime)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
command -v jq >/dev/null 2>&1 || missing+=(jq)
{ command -v initdb || compgen -G '/usr/lib/postgresql/*/bin/initdb'; } >/dev/null 2>&1 || missing+=(postgresql)
# A running docker serves the image test as well; otherwise podman, with runc as its runtime.
if ! command -v podman >/dev/null 2>&1 && ! docker info >/dev/null 2>&1; then missing+=(podman); fi
if command -v podman >/dev/null 2>&1 || [[ " ${missing[*]} " == *" podman "* ]]; then
  command -v runc >/dev/null 2>&1 || missing+=(runc)
fi
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || missing+=(busybox-static) # static: copied into an image

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: ${missing[*]} — install them with your package manager (e.g. apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The package starts a system redis on 6379; the tests start their own on free ports.
  systemctl stop redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true
  # Likewise a system prometheus on 9090 (and its node exporter): the test starts its own.
  # Likewise a system postgresql on 5432: internal/pgtest starts its own.
  for svc in prometheus prometheus-node-exporter postgresql; do
    systemctl stop "$svc" >/dev/null 2>&1 || service "$svc" stop >/dev/null 2>&1 || true
  done
fi

# podman as root in a container (the CI machine): runc as the runtime, and no default ulimits
# (the machine refuses setrlimit). Written once; an existing file is left alone.
conf=/etc/containers/containers.conf
if command -v podman >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && [ ! -e "$conf" ]; then
  mkdir -p "$(dirname "$conf")"
  printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' >"$conf"
  echo "wrote $conf: runtime runc, no default ulimits"
fi
