// Command cronlock runs cluster-singleton cron jobs and shows how they work.
//
//	cronlock run --config FILE       the daemon: the file's shell-command jobs, one run per tick cluster-wide
//	cronlock validate --config FILE  check the config file
//	cronlock locks --config FILE     the lock keys on every node
//	cronlock check --config FILE     the health of every node, with fixes
//	cronlock import-crontab CRONTAB  the YAML jobs: of a crontab file
//	cronlock pause|resume|trigger|history|forget JOB --config FILE   control a job cluster-wide
//	cronlock status [JOB] --config FILE   each job's pause, last run, runs in flight
//	cronlock backfill JOB --from T --to T --config FILE   run a job's past ticks that did not run
//	cronlock replicas --config FILE  the replicas of the cluster: alive or missing, configuration drift
//	cronlock demo [flags]            three replicas, one job, a live table of who ran each tick
//	cronlock version                 the build's version
//
// Exit codes: 0 success, 1 runtime failure, 2 bad config or usage. docs/cli.md documents every
// command, flag and config key.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/demo"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/supervise"
)

// usageError is a mistake in the command line: exit code 2.
type usageError = exitcode.Usage

// loggedError is an error that was logged already: exit code 1, and nothing more printed.
type loggedError = exitcode.Logged

const usage = `cronlock runs cron jobs once per tick across a cluster, guarded by a Redlock.

Usage:
  cronlock run --config FILE       run the file's jobs; run it on every host with the same file,
                                   and each tick of each job runs on one host only
  cronlock validate --config FILE  check the config file, without connecting to anything
  cronlock locks --config FILE     show the lock keys on every node: holders, tokens, done ticks
  cronlock check --config FILE     check every node: reachable, version, persistence, eviction,
                                   quarantine, clock offset; warnings say how to fix each
  cronlock import-crontab CRONTAB  print the YAML jobs: equivalent to a crontab file
  cronlock pause|resume JOB --config FILE  pause a job on every replica (--reason, --by), or
                                           resume it
  cronlock trigger JOB --config FILE       ask for one manual run of a job, run once cluster-wide
                                           (--by: who asks, default user@host)
  cronlock history JOB --config FILE       the job's last runs (-n), from the lock nodes
  cronlock status [JOB] --config FILE      each job's pause (since, by whom, why), last run, runs in flight
  cronlock forget JOB --config FILE        remove what a job no daemon runs left on the nodes
  cronlock backfill JOB --from T --to T --config FILE
                                   run the job's past ticks in a range that did not run, once
                                   each across the cluster, through a running daemon
  cronlock replicas --config FILE  list the replicas from their heartbeats: alive or missing
                                   since when, version, jobs, configuration hash (drift marked)
  cronlock demo [flags]            run three replicas of one job on three lock nodes (embedded, or
                                   --nodes) and show who runs each tick
  cronlock version                 print the version
  cronlock help [COMMAND]          print this help, or a command's ('cronlock COMMAND --help')

Exit codes: 0 success, 1 runtime failure, 2 bad config or usage.
`

func main() {
	if code, ran := runAsPID1(); ran {
		os.Exit(code)
	}
	// go-redis's own log lines (a node that refuses connections) would stray into the output
	// of the one-shot commands, which report node errors themselves; the daemon sends them to
	// its log.
	nodes.LogRedisTo(nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(loggedError)) && errors.As(err, new(usageError)):
		return 2
	case errors.As(err, new(loggedError)):
		return 1
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "cronlock: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "cronlock: %v\n", err)
		return 1
	}
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{Err: errors.New("no command given")}
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "validate":
		return validateCmd(args[1:], stdout, stderr)
	case "locks":
		return locksCmd(ctx, args[1:], stdout, stderr)
	case "check":
		return checkCmd(ctx, args[1:], stdout, stderr)
	case "import-crontab":
		return importCrontabCmd(args[1:], stdout)
	case "demo":
		cfg, err := parseDemo(args[1:], stderr)
		switch {
		case errors.Is(err, flag.ErrHelp):
			return err
		case err != nil:
			return usageError{Err: err}
		}
		return demo.Run(ctx, cfg, stdout, stderr)
	case supervise.Mode:
		s, err := supervise.Parse(args[1:])
		if err != nil {
			return usageError{Err: err}
		}
		return s.Run()
	case "backfill":
		return backfillCmd(ctx, args[1:], stdout, stderr)
	case "replicas":
		return replicasCmd(ctx, args[1:], stdout, stderr)
	case "pause", "resume", "trigger", "history", "status", "forget":
		return controlCmd(ctx, args[0], args[1:], stdout, stderr)
	case "version", "--version":
		return versionCmd(args[1:], stdout)
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" && args[1] != "help" {
			return dispatch(ctx, []string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{Err: fmt.Errorf("unknown command %q", args[0])}
}
