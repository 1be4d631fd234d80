// Package web is the HTTP server of `cronlock run`: /healthz, /readyz, /jobs, /metrics, the
// control endpoints (POST /jobs/{name}/pause|resume|trigger, GET /jobs/{name}/history) and the
// status page at /.
//
// It owns what a client of the server can take of the daemon (Limits: timeouts, connections,
// body sizes), who may do what (reads without the bearer token show no command line, node
// address or error text; the control endpoints need the token), the page's template, and
// JobStatus, the record of each job's last tick on this replica that /jobs shows. It reads the
// jobs' shared state through package scheduler, and the nodes' readiness (a nodes.Status)
// through the Readiness function the daemon gives it; it knows nothing of the run loop or of
// the nodes' clients. The lines of the backfill endpoint's answer are package backfill's, whose
// client `cronlock backfill` uses.
//
// docs/cli.md documents the endpoints; docs/security.md what they expose.
package web
