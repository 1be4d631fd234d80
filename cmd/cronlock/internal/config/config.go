package config

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// Defaults of the optional keys.
const (
	DefaultPrefix      = middleware.DefaultPrefix
	DefaultBootKey     = layout.BootKey
	DefaultMaxTTL      = lockseam.DefaultMaxTTL
	DefaultKillGrace   = 10 * time.Second
	DefaultMinInterval = time.Second
	DefaultOutputLimit = 64 << 10
	DefaultOutputKeep  = 4 << 10
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
	// off (403). HTTPToken reads it.
	HTTPTokenEnv string
	// Tracing holds the tracing settings.
	Tracing Tracing
	// KillGrace is the kill_grace: given, or DefaultKillGrace. Each job's own is Job.KillGrace.
	KillGrace time.Duration
	// KillGraceGiven says whether kill_grace: was given.
	KillGraceGiven bool
	// BootKey is the key of each node's boot marker (quarantine). Default "cronlock:boot".
	BootKey string
	// MaxTTL is the longest lock TTL, and each node's quarantine after it lost its memory.
	// Default 1m.
	MaxTTL time.Duration
	// WaitForReplicas is how many replicas of each node must acknowledge a lock (and each
	// renewal) before the node's yes counts (redlock.WithWaitForReplicas), on the nodes that do
	// not give their own (Node.WaitForReplicas). Default 0: do not wait.
	WaitForReplicas int
	// MinInterval is the shortest time allowed between two ticks of a job. Default 1s.
	MinInterval time.Duration
	// Jobs are the jobs, in file order: those of jobs:, then those of the crontab.
	Jobs []Job
	// Crontab is the path of the crontab file whose lines are jobs too (crontab:), relative
	// paths made relative to the config file's directory; "" when none is given.
	Crontab string

	httpTokenEnvLine int
}

// HTTPToken returns the bearer token of the HTTP server, read from the environment variable
// HTTPTokenEnv with lookup (os.LookupEnv when nil). It returns "" when there is no
// HTTPTokenEnv, and an *Error naming the file, line, field and variable when the variable is
// not set or empty. The token itself never appears in an error.
func (c *Config) HTTPToken(lookup func(string) (string, bool)) (string, error) {
	token, missing := fromEnv(lookup, c.HTTPTokenEnv, false)
	if missing != "" {
		return "", &Error{File: c.File, Line: c.httpTokenEnvLine, Field: "http_token_env",
			Problem: fmt.Sprintf("environment variable %s is %s: export it with the bearer token of the daemons' HTTP servers (a long random string), or remove http_token_env to turn their control endpoints off", c.HTTPTokenEnv, missing)}
	}
	return token, nil
}

// fromEnv returns the secret in the environment variable env, read with lookup (os.LookupEnv
// when nil), or what is wrong with the variable: "not set", or "empty" when it is and emptyOK
// is false. It returns two empty strings when env is "" (no variable named).
func fromEnv(lookup func(string) (string, bool), env string, emptyOK bool) (v, missing string) {
	if env == "" {
		return "", ""
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	v, ok := lookup(env)
	switch {
	case !ok:
		return "", "not set"
	case v == "" && !emptyOK:
		return "", "empty"
	}
	return v, ""
}

// ListenAddr returns the address the HTTP server listens on for addr, the http: key's or the
// --http flag's: an address without a host (":9464") is on 127.0.0.1, not every interface.
func ListenAddr(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "127.0.0.1" + addr
	}
	return addr
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

// Node is one lock node: a standalone Redis server (Addr), or a Redis Cluster (Cluster). The
// nodes of a config are all of one kind.
type Node struct {
	// Addr is host:port of a standalone server ("" for a Cluster).
	Addr string
	// Cluster are the host:port of some members of a Redis Cluster (the client learns the
	// others from them); nil for a standalone server.
	Cluster []string
	// Username is the ACL user ("" for the default user).
	Username string
	// PasswordEnv names the environment variable that holds the password ("" for none).
	PasswordEnv string
	// TLS connects with TLS, verifying the server's certificate for the host of Addr.
	TLS bool
	// DB is the database number (always 0 for a Cluster).
	DB int
	// WaitForReplicas is how many of this node's replicas must acknowledge a lock before its
	// yes counts: the node's own wait_for_replicas, else the top level's (Config.WaitForReplicas).
	WaitForReplicas int
	// Line is where the node is in the file.
	Line int

	file            string
	passwordEnvLine int
	index           int
}

// Name names the node in messages: its address, or for a Cluster "cluster(" and the addresses
// given + ")".
func (n Node) Name() string {
	if n.Cluster != nil {
		return "cluster(" + strings.Join(n.Cluster, ", ") + ")"
	}
	return n.Addr
}

// Password returns the node's password, read from the environment variable PasswordEnv with
// lookup (os.LookupEnv when nil). It returns "" when the node has no PasswordEnv, and an error
// naming the file, line and variable when the variable is not set. The password itself never
// appears in an error.
func (n Node) Password(lookup func(string) (string, bool)) (string, error) {
	pw, missing := fromEnv(lookup, n.PasswordEnv, true)
	if missing != "" {
		return "", &Error{File: n.file, Line: n.passwordEnvLine, Field: fmt.Sprintf("nodes[%d].password_env", n.index),
			Problem: fmt.Sprintf("environment variable %s is %s: export it with the password of %s", n.PasswordEnv, missing, n.Name())}
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
	// Overlap is job.Forbid (default), job.Replace or job.Allow.
	Overlap job.Overlap
	// Retries is how many times a failed run is tried again.
	Retries int
	// CatchUp is how old a missed tick may be and still run at start (0: none).
	CatchUp time.Duration
	// Jitter spreads the starts of the job's ticks: each starts up to this much after its
	// instant, by a delay hashed from the job's name and the tick (0: none).
	Jitter time.Duration
	// OutputLevel is the level at which the command's output lines are logged. Default info.
	OutputLevel slog.Level
	// OutputLimit is how many bytes of output one run logs; the rest is counted, not logged
	// (0: none logged). Default 64 KiB.
	OutputLimit int64
	// OutputKeep is how many bytes of a run's output, its last, are kept with its history
	// record on the nodes (scheduler.KeepOutput; 0: none). Default 4 KiB, at most
	// scheddefault.MaxOutput.
	OutputKeep int64
	// Env are the variables added to the command's environment (env:).
	Env []EnvVar
	// WorkingDir is the directory the command runs in ("": the daemon's).
	WorkingDir string
	// KillGrace is how long before its lease's deadline a run's process group gets SIGTERM
	// (SIGKILL comes at the deadline), and how long it has between the two when the run is
	// stopped earlier: KillGraceFor of the config's kill_grace.
	KillGrace time.Duration
	// File is the file the job is defined in: the config file, or its crontab.
	File string
	// Line is where the job is in File.
	Line int

	fromCrontab bool // a line of the crontab, whose problems name no jobs[i]
}

// EnvVar is one variable of a job's env:.
type EnvVar struct {
	// Name is the variable's name.
	Name string
	// Value is its value, or with NAME_env: the name of the daemon's variable it is taken from.
	Value string

	fromEnv bool
	file    string
	line    int
	path    string
}

// Environ returns the job's env: as NAME=value strings, with the NAME_env: references looked
// up with lookup (os.LookupEnv when nil). A variable referred to that is not set is an *Error
// naming its key and line.
func (j Job) Environ(lookup func(string) (string, bool)) ([]string, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	out := make([]string, 0, len(j.Env))
	for _, v := range j.Env {
		value := v.Value
		if v.fromEnv {
			var ok bool
			if value, ok = lookup(v.Value); !ok {
				return nil, &Error{File: v.file, Line: v.line, Field: v.path,
					Problem: fmt.Sprintf("environment variable %s is not set: export it in the daemon's environment, with the value of %s", v.Value, v.Name)}
			}
		}
		out = append(out, v.Name+"="+value)
	}
	return out, nil
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
		Jitter:     j.Jitter,
	}
}

// KillGraceFor returns the kill grace of the job's runs under the daemon-wide grace (given says
// whether one was given, as kill_grace: or --kill-grace). The supervisor of a run sends SIGTERM
// grace before the lease's deadline, so a grace given must be shorter than the least validity a
// renewed lease has left, lock_ttl − renew_every; without one the grace is DefaultKillGrace,
// lowered to half that validity.
func (j Job) KillGraceFor(grace time.Duration, given bool) (time.Duration, error) {
	o := jobseam.WithDefaults(j.Options())
	left := o.LockTTL - o.RenewEvery
	switch {
	case !given:
		return min(DefaultKillGrace, left/2), nil
	case grace >= left:
		return 0, fmt.Errorf("%v is not shorter than lock_ttl %v − renew_every %v = %v of job %q, the least validity its lease has left after a renewal: SIGTERM comes kill_grace before the lease's deadline, so it would come before every renewal; lower kill_grace, or raise the job's lock_ttl",
			grace, o.LockTTL, o.RenewEvery, left, j.Name)
	}
	return grace, nil
}

// JobError returns err, an error that job.Job.Validate or the scheduler gave for jobs[i], as
// an *Error that names the job's YAML key (lock_ttl, not Options.LockTTL).
func (c *Config) JobError(i int, err error) error {
	j := c.Jobs[i]
	file, path := cmp.Or(j.File, c.File), fmt.Sprintf("jobs[%d]", i)
	if j.fromCrontab {
		path = ""
	}
	if ie, ok := errors.AsType[*job.InvalidError](err); ok {
		if key, known := fieldKeys[ie.Field]; known {
			return &Error{File: file, Line: j.Line, Field: join(path, key), Problem: goNames.Replace(ie.Problem)}
		}
	}
	return &Error{File: file, Line: j.Line, Field: path, Problem: err.Error()}
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
