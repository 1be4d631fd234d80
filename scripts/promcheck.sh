#!/usr/bin/env bash
# Checks the monitoring files with promtool: deploy/prometheus/alerts.yml (`promtool check
# rules`, then its unit tests, `promtool test rules`), and every query of the Grafana dashboard
# deploy/grafana/cronlock.json — each panel's `expr` and each variable's label_values()
# metric — as the rules of a generated rule file, so that promtool parses each one. Grafana's
# variables are replaced first: $__rate_interval, $__interval and $__range by 5m, $job by .*;
# any other variable is an error (add it here).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in promtool jq; do
  command -v "$tool" >/dev/null 2>&1 || { echo "promcheck: $tool not found: run scripts/deps.sh (Debian: apt-get install prometheus jq)" >&2; exit 1; }
done
promtool check rules deploy/prometheus/alerts.yml
(cd deploy/prometheus && promtool test rules alerts_test.yml)

dash=deploy/grafana/cronlock.json
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# JSON is YAML: one recording rule per query, named after its panel.
jq '{groups: [{name: "dashboard", rules: [
      ( [.. | objects | select(has("targets")) | .title as $t | .targets[] | {panel: $t, expr}]
        + [.templating.list[] | select(.type == "query") | {panel: ("variable " + .name),
             expr: (.definition | capture("^label_values\\((?<m>[^,]+),").m)}] )
      | to_entries[] | {record: "dashboard_query_\(.key)", expr: .value.expr,
                        labels: {panel: .value.panel}}
    ]}]}' "$dash" |
  sed -e 's/\$__rate_interval/5m/g' -e 's/\$__interval/5m/g' -e 's/\$__range/5m/g' -e 's/\$job\b/.*/g' >"$tmp/dashboard.rules.yml"
if left="$(jq -r '.groups[].rules[] | select(.expr | test("\\$")) | "\(.labels.panel): \(.expr)"' "$tmp/dashboard.rules.yml")" && [ -n "$left" ]; then
  echo "promcheck: $dash: a query uses a Grafana variable this script does not replace:" >&2
  echo "$left" >&2
  exit 1
fi
n="$(jq '.groups[].rules | length' "$tmp/dashboard.rules.yml")"
[ "$n" -gt 0 ] || { echo "promcheck: $dash: no query found" >&2; exit 1; }
promtool check rules "$tmp/dashboard.rules.yml" >/dev/null || {
  promtool check rules "$tmp/dashboard.rules.yml" >&2 || true
  echo "promcheck: $dash: a query does not parse (above; the generated file is $tmp/dashboard.rules.yml)" >&2
  trap - EXIT
  exit 1
}
echo "$dash: $n queries parse"
