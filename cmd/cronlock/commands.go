package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/check"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/lockkeys"
)

const checkUsage = `Usage: cronlock check (--config FILE | --nodes HOST:PORT,...) [--end-quarantine]

Checks every node of the config (which needs no jobs), or the standalone Redis servers given
with --nodes (no password or TLS; the defaults of boot_key and max_ttl): whether it answers and how fast (PING), its Redis version,
its persistence settings, its maxmemory-policy, its connected replicas (against
wait_for_replicas), its boot marker (quarantine), and the offset of its clock from this
host's. Each problem found comes with a warning that says how to fix
it. A node that is a Redis Cluster answers when its cluster_state is ok and every primary
answers; each member is checked as a server, with its role and the slots it serves, and each
primary's boot markers (one per hash slot) are summed up: how many of its slots are out of
quarantine, in quarantine and until when, and which have no marker.

--end-quarantine first ends the quarantine of every node by setting its boot marker to 0 (on
a Cluster, the marker of every hash slot).
New nodes have no marker, so they look like nodes that lost their memory and refuse locks
for max_ttl after the first attempt. Use it only when no lock can have been forgotten: on first
deployment, or when every cronlock has been stopped for longer than max_ttl.

Exit codes: 0 a quorum of nodes answers (warnings may remain), 1 fewer nodes than a quorum
answer, 2 bad config or usage.

Flags:
`

// checkCmd runs check.
func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet("check")
	endQuarantine := fs.Bool("end-quarantine", false, "end every node's quarantine first (first deployment only; see above)")
	timeout := fs.Duration("timeout", 5*time.Second, "how long each node may take to answer")
	nodeList := fs.String("nodes", "", "comma-separated `host:port` of the nodes, instead of --config (standalone servers without password or TLS)")
	if err := cli.ParseFlags(fs, checkUsage, args, stdout); err != nil {
		return err
	}
	var cfg *config.Config
	var err error
	source := "--config " + cf.Path
	switch {
	case *nodeList != "" && cf.Path != "":
		return usageError{Err: errors.New("check: give --config FILE or --nodes, not both")}
	case *nodeList != "":
		source = "--nodes " + *nodeList
		if cfg, err = config.FromNodes("--nodes", strings.Split(*nodeList, ",")); err != nil {
			return usageError{Err: err}
		}
	case cf.Path == "":
		return usageError{Err: errors.New("check: give the config file with --config FILE, or the nodes with --nodes HOST:PORT,HOST:PORT,HOST:PORT")}
	default:
		if cfg, err = cf.Load("check", config.NodesOnly()); err != nil {
			return err
		}
	}
	return check.Check(ctx, cfg, source, *endQuarantine, *timeout, stdout, stderr)
}

const locksUsage = `Usage: cronlock locks --config FILE [--job NAME]

Shows the lock keys of the jobs on every node: the tick keys (held by a running tick, or kept
as done after a run succeeded), each tick's count of attempts across the cluster, the run key (held while a run of a job with overlap: forbid is
running) and the fencing counter; for each, per node, the holder's label (its replica name),
the fencing token, the state (held, done, skipped) and the time left. The lock value, which
identifies a holder to the nodes, is shown as a short prefix only. Also each job's pause (with
who paused it and why) and run history (its number of records); the history's deduplication
markers are counted, not listed. Each key is read by its type. Keys are found with SCAN, never
KEYS; on a node that is a Redis Cluster, on each of its primaries, and NODE is the primary the
key is on.

Exit codes: 0 shown (a minority of nodes may not have answered), 1 fewer nodes than a quorum
answered, 2 bad config or usage.

Flags:
`

// locksCmd runs locks.
func locksCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet("locks")
	jobName := fs.String("job", "", "show only this job's keys")
	timeout := fs.Duration("timeout", 5*time.Second, "how long each node may take to answer")
	if err := cli.ParseFlags(fs, locksUsage, args, stdout); err != nil {
		return err
	}
	cfg, err := cf.Load("locks")
	if err != nil {
		return err
	}
	if *jobName != "" && !hasJob(cfg, *jobName) {
		fmt.Fprintf(stderr, "warning: job %q is not in %s; showing its keys anyway\n", *jobName, cfg.File)
	}
	return lockkeys.Locks(ctx, cfg, *jobName, *timeout, stdout)
}

const importCrontabUsage = `Usage: cronlock import-crontab CRONTAB

Prints the YAML jobs: that are equivalent to the crontab file CRONTAB, the jobs that a config's
crontab: CRONTAB gives: put them in the config in place of its crontab: key. Each job is the
line's schedule, its command run by its SHELL (default /bin/sh) with -c, the NAME=value lines
above it as env:, and the keys of its # cronlock: comment; a line without a name= is given the
name the daemon derives for it, so the jobs keep their names, lock keys and history. The jobs
are checked as in a config with the default max_ttl and min_interval. See docs/cli.md.

Exit codes: 0 printed, 2 a crontab with problems (each printed as CRONTAB:LINE: …), or bad usage.
`

// importCrontabCmd runs import-crontab.
func importCrontabCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("import-crontab", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, importCrontabUsage)
		return err
	case err != nil:
		return usageError{Err: fmt.Errorf("import-crontab: %w (see 'cronlock import-crontab --help')", err)}
	case fs.NArg() != 1:
		return usageError{Err: fmt.Errorf("import-crontab takes one crontab file, got %d arguments (see 'cronlock import-crontab --help')", fs.NArg())}
	}
	path := fs.Arg(0)
	data, err := os.ReadFile(path)
	if err != nil {
		return usageError{Err: err}
	}
	out, err := config.ImportCrontab(path, data)
	if err != nil {
		return usageError{Err: err}
	}
	_, err = stdout.Write(out)
	return err
}
