package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/scheduler"
)

const replicasUsage = `Usage: cronlock replicas --config FILE [flags]

Lists the replicas of the cluster — every cronlock run daemon and library scheduler under the
config's prefix — from the heartbeats they write to the lock nodes (cronlock run --heartbeat,
default every 10s), merged from every node that answers: name, state, version, when it
started, when it was last seen, its jobs, a hash of its configuration and its runs in flight.

A replica is alive while its last heartbeat is at most 3 of its heartbeat intervals (plus 1s
of clock skew) old, and missing since its last heartbeat after that. A replica that stopped
cleanly removes itself; a missing one is listed for an hour after it was last seen. The
configuration hash of an alive replica that differs from the one most alive replicas report
is marked with "*" (a reload done on some replicas only); with no majority, every one is.

Exit codes: 0 listed (a minority of nodes may not have answered), 1 fewer nodes than a quorum
answered, 2 bad config or usage.

Flags:
`

// replicasCmd runs replicas.
func replicasCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet("replicas")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	if err := cli.ParseFlags(fs, replicasUsage, args, stdout); err != nil {
		return err
	}
	cfg, err := cf.Load("replicas", config.NodesOnly())
	if err != nil {
		return err
	}
	ctl, done, err := controlClient(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rs, err := ctl.Replicas(ctx)
	if err != nil && rs == nil {
		return err
	}
	printReplicas(stdout, rs, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "warning: %v\n", err)
	}
	return nil
}

// printReplicas writes rs as a table, one replica a line, with ages as of now.
func printReplicas(w io.Writer, rs []scheduler.Replica, now time.Time) {
	if len(rs) == 0 {
		fmt.Fprintln(w, "no replica has written a heartbeat in the last hour")
		return
	}
	const stamp = "2006-01-02 15:04:05"
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tVERSION\tSTARTED (UTC)\tLAST SEEN (UTC)\tJOBS\tCONFIG\tRUNNING")
	differs := false
	for _, r := range rs {
		state := "alive"
		if !r.Alive {
			state = "missing since " + r.LastSeen.UTC().Format("15:04:05")
		}
		hash := r.ConfigHash
		if r.ConfigDiffers {
			hash, differs = hash+" *", true
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s (%s ago)\t%d\t%s\t%d\n", r.Name, state, r.Version, r.Started.UTC().Format(stamp),
			r.LastSeen.UTC().Format(stamp), now.Sub(r.LastSeen).Round(time.Second), len(r.Jobs), hash, r.Running)
	}
	_ = tw.Flush()
	if differs {
		fmt.Fprintln(w, "* configuration differs from the majority of alive replicas: reload (SIGHUP) or restart them with the same file")
	}
}
