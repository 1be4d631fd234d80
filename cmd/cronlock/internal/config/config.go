package config

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// Defaults of the optional keys.
const (
	DefaultPrefix      = "cronlock"
	DefaultBootKey     = redlock.DefaultBootKey
	DefaultMaxTTL      = redlock.DefaultMaxTTL
	DefaultKillGrace   = 10 * time.Second
	DefaultServiceName = "cronlock"
)

// Config is a parsed and validated config file. Defaults are applied: every field holds the
// value the daemon uses, except Replica and HTTP, which are empty when not given (the daemon
// then uses hostname-pid, and serves no HTTP).
type Config struct {
	// File is the name the config was read from, as given to Parse; messages start with it.
	File string
	// Nodes are the independent Redis nodes that locks are taken on.
	Nodes []Node
	// AllowEvenNodes accepts an even number of nodes (allow_even_nodes: true).
	AllowEvenNodes bool
	// Prefix starts every lock key. Default "cronlock".
	Prefix string
	// Replica names this replica ("" when not given).
	Replica string
	// HTTP is the address of the HTTP server ("" when not given: no server). An address
	// without a host (":9464") is on 127.0.0.1: give 0.0.0.0:9464 to listen everywhere.
	HTTP string
	// HTTPTokenEnv names the environment variable holding the bearer token of the HTTP
	// control endpoints (POST /jobs/{name}/pause|resume|trigger); "" when not given: they are
	// off (403).
	HTTPTokenEnv string
	// Tracing holds the tracing settings.
	Tracing Tracing
	// KillGrace is how long a job's process group has between SIGTERM and SIGKILL. Default 10s.
	KillGrace time.Duration
	// BootKey is the key of each node's boot marker (quarantine). Default "cronlock:boot".
	BootKey string
	// MaxTTL is the longest lock TTL, and each node's quarantine after it lost its memory.
	// Default 1m.
	MaxTTL time.Duration
	// Jobs are the jobs, in file order.
	Jobs []Job
}

// Quorum returns how many nodes must agree: a majority.
func (c *Config) Quorum() int { return len(c.Nodes)/2 + 1 }

// Tracing holds the tracing: keys: where the daemon exports its spans over OTLP/HTTP.
type Tracing struct {
	// OTLPEndpoint is the OTLP/HTTP endpoint, e.g. http://127.0.0.1:4318 ("": no export). A
	// URL without a path is a base URL, as in OTEL_EXPORTER_OTLP_ENDPOINT: /v1/traces is
	// appended.
	OTLPEndpoint string
	// ServiceName is the service.name of the spans. Default "cronlock".
	ServiceName string
	// UIURL is a trace URL template with {trace_id}, e.g. Jaeger's
	// http://127.0.0.1:16686/trace/{trace_id}, for links on the status page ("": no links).
	UIURL string
}

// Node is one lock node.
type Node struct {
	// Addr is host:port.
	Addr string
	// Username is the ACL user ("" for the default user).
	Username string
	// PasswordEnv names the environment variable that holds the password ("" for none).
	PasswordEnv string
	// TLS connects with TLS, verifying the server's certificate for the host of Addr.
	TLS bool
	// DB is the database number.
	DB int
	// Line is where the node is in the file.
	Line int

	file            string
	passwordEnvLine int
	index           int
}

// Password returns the node's password, read from the environment variable PasswordEnv with
// lookup (os.LookupEnv when nil). It returns "" when the node has no PasswordEnv, and an error
// naming the file, line and variable when the variable is not set. The password itself never
// appears in an error.
func (n Node) Password(lookup func(string) (string, bool)) (string, error) {
	if n.PasswordEnv == "" {
		return "", nil
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	pw, ok := lookup(n.PasswordEnv)
	if !ok {
		return "", &Error{File: n.file, Line: n.passwordEnvLine, Field: fmt.Sprintf("nodes[%d].password_env", n.index),
			Problem: fmt.Sprintf("environment variable %s is not set: export it with the password of %s", n.PasswordEnv, n.Addr)}
	}
	return pw, nil
}

// Job is one shell-command job.
type Job struct {
	// Name identifies the job across the cluster.
	Name string
	// Schedule is its cron spec (package scheduler's syntax).
	Schedule string
	// Command is the program and its arguments, run without a shell.
	Command []string
	// Timeout bounds one attempt (0: none).
	Timeout time.Duration
	// LockTTL is the TTL of the tick's lock (0: default 30s).
	LockTTL time.Duration
	// RenewEvery is how often the lock is renewed (0: LockTTL/3).
	RenewEvery time.Duration
	// Overlap is job.Forbid (default) or job.Allow.
	Overlap job.Overlap
	// Retries is how many times a failed run is tried again.
	Retries int
	// CatchUp is how old a missed tick may be and still run at start (0: none).
	CatchUp time.Duration
	// Line is where the job is in the file.
	Line int
}

// Options returns the job's options for job.Job.
func (j Job) Options() job.Options {
	return job.Options{
		Timeout:    j.Timeout,
		LockTTL:    j.LockTTL,
		RenewEvery: j.RenewEvery,
		Overlap:    j.Overlap,
		Retries:    j.Retries,
		CatchUp:    j.CatchUp,
	}
}

// Error is one problem in a config file.
type Error struct {
	// File is the file's name ("" if unknown).
	File string
	// Line is the line of the problem, from 1 (0 if unknown).
	Line int
	// Field is the path of the key, e.g. "jobs[1].timeout" ("" for the file as a whole).
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Problem)
	return b.String()
}
