#!/usr/bin/env bash
# Builds the Jaeger v2 binary that the end-to-end tracing test runs (internal/e2e), once, and
# prints its path:
#
#   CRONLOCK_JAEGER="$(scripts/jaeger.sh)" go test -run TestJaeger ./internal/e2e/
#
# Jaeger is built from tools/jaeger, a Go module of its own: its dependencies (an OpenTelemetry
# collector distribution) cannot share a module with cronlock's OpenTelemetry version. The
# first build takes about 4 minutes and 2.3 GB of memory on 2 CPUs; the binary is then kept in
# ${CRONLOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cronlock}, under a name that carries the
# Jaeger version and a hash of tools/jaeger/go.mod and go.sum, so a change there rebuilds it
# and nothing else does. Progress goes to stderr; stdout is only the path.
set -euo pipefail
# tools/jaeger is a module of its own, outside the repository's go.work on purpose.
export GOWORK=off
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="$root/tools/jaeger"
cache="${CRONLOCK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cronlock}"
version="$(cd "$tools" && go list -m -f '{{.Version}}' github.com/jaegertracing/jaeger)"
hash="$(cat "$tools/go.mod" "$tools/go.sum" | sha256sum | cut -c1-12)"
bin="$cache/jaeger-$version-$hash"
if [ ! -x "$bin" ]; then
  mkdir -p "$cache"
  echo "building jaeger $version into $bin (the first time takes a few minutes)" >&2
  start=$(date +%s)
  tmp="$(mktemp "$bin.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  (cd "$tools" && go build -trimpath -buildvcs=false -o "$tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$tmp" "$bin"
  trap - EXIT
  echo "built jaeger in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
