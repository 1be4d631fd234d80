package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/daemon"
	"github.com/cronlock/cronlock/internal/scheddefault"
)

const runUsage = `Usage: cronlock run --config FILE [flags]

Runs the config's jobs as cluster-singleton cron jobs: run it with the same file on every
host, and each tick of each job runs on one host only, guarded by a Redlock over the config's
nodes. Each run starts the job's command in a process group of its own, under a supervisor
process, with CRONLOCK_JOB, CRONLOCK_TICK (RFC 3339, UTC), CRONLOCK_TICK_UNIX_MS,
CRONLOCK_FENCING_TOKEN, CRONLOCK_REPLICA and CRONLOCK_ATTEMPT in its environment; its output
is logged line by line. The process group gets SIGTERM --kill-grace before the run's lease
ends unless renewed, and SIGKILL when it ends, or when this daemon dies; when the run's
timeout passes or its lease is lost, SIGTERM at once and SIGKILL --kill-grace later (or at
the lease's end).

On SIGINT or SIGTERM it takes no new ticks, gives up the ticks that only wait for lock nodes,
waits up to --drain for running jobs (a second signal stops waiting), stops what is left
and waits up to --kill-grace and 5s for it to end, releases its locks and exits 0; a run
still under way then keeps its locks until they expire. On SIGHUP it reloads the config file's jobs, and the crontab
it names (a file with errors is refused, and the running config kept). A config file (or crontab) that group or
others can write, or that another user than root or this one owns, is refused at start and at
reload (see docs/security.md).

Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad config or usage.

Flags:
`

// parseRun parses the command line of run (after "run").
func parseRun(args []string, stdout io.Writer) (daemon.Flags, error) {
	fs, cf := cli.FlagSet("run")
	var f daemon.Flags
	fs.StringVar(&f.Replica, "replica", "", "this replica's `name`, shown as the holder of its locks (default: the config's replica:, else hostname-pid)")
	fs.StringVar(&f.HTTP, "http", "", "`address` of the HTTP server for /healthz, /readyz, /jobs and /metrics, e.g. 127.0.0.1:9464 (default: the config's http:; \"off\" for none)")
	fs.DurationVar(&f.ReadTimeout, "http-read-timeout", 10*time.Second, "how long a client of the HTTP server may take to send a request, body included")
	fs.DurationVar(&f.IdleTimeout, "http-idle-timeout", 30*time.Second, "how long the HTTP server keeps an idle connection open between requests")
	fs.IntVar(&f.MaxConns, "http-max-conns", 128, "how many connections the HTTP server serves at once; more wait to be accepted")
	fs.Var((*optionalDuration)(&f.KillGrace), "kill-grace", "`duration` from SIGTERM to SIGKILL of a run's process group, which gets SIGKILL when its lease ends (default: the config's kill_grace:, else 10s or half of lock_ttl − renew_every)")
	fs.DurationVar(&f.Drain, "drain", 30*time.Second, "on SIGINT/SIGTERM, how long running jobs may finish before they are stopped")
	fs.TextVar(&f.LogLevel, "log-level", slog.LevelInfo, "least `level` logged: debug (every tick's outcome), info, warn or error")
	fs.DurationVar(&f.Heartbeat, "heartbeat", scheddefault.Heartbeat, "how often this replica writes its heartbeat to the lock nodes (cronlock replicas); it shows as missing after 3 of them plus 1s")
	fs.DurationVar(&f.RescueEvery, "rescue-every", scheddefault.RescueEvery, "how often this replica looks for runs whose replica vanished, to record them interrupted (within the lock's TTL plus two of these); each look is one request per node per job")
	fs.StringVar(&f.LogFormat, "log-format", "text", "`format` of the log on stderr: text (logfmt) or json (one object per line)")
	if err := cli.ParseFlags(fs, runUsage, args, stdout); err != nil {
		return f, err
	}
	f.Config = *cf
	f.Set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.Set[fl.Name] = true })
	switch {
	case f.KillGrace < 0:
		return f, usageError{Err: fmt.Errorf("--kill-grace %v: must not be negative", f.KillGrace)}
	case f.Drain < 0:
		return f, usageError{Err: fmt.Errorf("--drain %v: must not be negative", f.Drain)}
	case f.ReadTimeout <= 0 || f.IdleTimeout <= 0:
		return f, usageError{Err: fmt.Errorf("--http-read-timeout %v, --http-idle-timeout %v: give positive durations", f.ReadTimeout, f.IdleTimeout)}
	case f.Heartbeat <= 0:
		return f, usageError{Err: fmt.Errorf("--heartbeat %v: give a positive interval, e.g. %v", f.Heartbeat, scheddefault.Heartbeat)}
	case f.RescueEvery <= 0:
		return f, usageError{Err: fmt.Errorf("--rescue-every %v: give a positive interval, e.g. %v", f.RescueEvery, scheddefault.RescueEvery)}
	case f.MaxConns <= 0:
		return f, usageError{Err: fmt.Errorf("--http-max-conns %d: give a positive number of connections", f.MaxConns)}
	case f.Set["replica"] && f.Replica == "":
		return f, usageError{Err: errors.New("--replica is empty: give a name, or leave the flag out")}
	case f.LogFormat != "text" && f.LogFormat != "json":
		return f, usageError{Err: fmt.Errorf("--log-format %q: use text or json", f.LogFormat)}
	}
	return f, nil
}

// optionalDuration is a duration flag whose default is not printed: it is the config's.
type optionalDuration time.Duration

func (d *optionalDuration) String() string {
	if d == nil || *d == 0 {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *optionalDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	*d = optionalDuration(v)
	return err
}

// runCmd runs run.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRun(args, stdout)
	if err != nil {
		return err
	}
	return daemon.Run(ctx, f, stderr)
}

const validateUsage = `Usage: cronlock validate --config FILE

Checks the config file without connecting to any node or running any command — every check
that 'cronlock run' makes before it starts — and prints the nodes and the jobs with their next
tick. A schedule with H is shown resolved, followed by the spec as written; a job with a
jitter has its next tick's delay after the tick. Problems are printed one per line as
FILE:LINE: FIELD: what is wrong and how to fix it. It also warns (without failing) about
password and token variables that are not set (or a token variable that is empty) and programs
not found on this host.

Exit codes: 0 valid, 2 invalid (or bad usage).

Flags:
`

// validateCmd runs validate.
func validateCmd(args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet("validate")
	if err := cli.ParseFlags(fs, validateUsage, args, stdout); err != nil {
		return err
	}
	return daemon.Validate(*cf, stdout, stderr)
}
