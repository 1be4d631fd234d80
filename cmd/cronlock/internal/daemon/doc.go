// Package daemon is `cronlock run` and `cronlock validate`: the run loop of the config's
// shell-command jobs, from its parsed command line (Flags, which main parses as it does every
// command's) to the drain on SIGTERM.
//
// It owns the daemon's life: the logger (text or JSON, every line
// counted by logWriter), the scheduler and its middleware (the gate that lets no run start
// after "stopping", OpenTelemetry traces and metrics), each job's definition and handler (a
// supervised command, package supervise), the reload on SIGHUP (checked whole before it is
// applied; the definitions keep a renamed or changed job's runs from overlapping its old
// ones), the drain and the close. It wires the node clients and readiness of package nodes and
// the HTTP server of package web. validate makes the checks of the daemon's start (prepare)
// alone: without a scheduler, and without connecting to a node.
package daemon
