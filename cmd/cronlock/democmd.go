package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/demo"
)

const demoUsage = `Usage: cronlock demo [flags]

Runs three replicas of one job ("report", every second by default) on three lock nodes and
prints, for each tick, which replica ran it, which skipped it and why, the run's fencing token
and how late it started. Halfway through, the replica running the current tick is cut off
from every node (as a long pause or a partition would): its lease runs out, its job's context
is cancelled with redlock.ErrLeaseLost, and the other replicas take the next ticks with higher
tokens. At the end, through replicas that were never cut off, one replica pauses the job
(every replica skips its ticks), another resumes it, one asks for a manual run, and the run
history is read from the nodes. It
ends with a summary and exits 0 when no tick ran twice.

Without --nodes it starts three embedded Redis-protocol nodes (miniredis) in this process, so
it needs no Redis installed.

The output is the demo's table and its notes. The scheduler's own log lines (lost leases,
failed renewals, skipped ticks) go to a file named at the end, or with -v to stderr.

Flags:
`

// parseDemo reads the demo's command line; its errors, but flag.ErrHelp (after the help is
// written to stderr), are mistakes in the command line.
func parseDemo(args []string, stderr io.Writer) (demo.Config, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, demoUsage); fs.PrintDefaults() }
	var c demo.Config
	nodes := fs.String("nodes", "", "comma-separated host:port of real Redis nodes (default: three embedded nodes)")
	fs.IntVar(&c.Replicas, "replicas", 3, "replicas to run (2 to 9)")
	fs.DurationVar(&c.Duration, "duration", 12*time.Second, "how long to run")
	fs.DurationVar(&c.Every, "every", time.Second, "the job's period (@every, aligned to the Unix epoch)")
	fs.DurationVar(&c.Work, "work", 100*time.Millisecond, "how long one run works")
	fs.DurationVar(&c.TTL, "ttl", time.Second, "the tick lock's TTL (renewed every TTL/3 while the job runs)")
	fs.BoolVar(&c.Verbose, "v", false, "write the scheduler's log lines to stderr (default: to a file named at the end)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("demo takes no arguments, got %q", fs.Args())
	}
	if *nodes != "" {
		c.Nodes = strings.Split(*nodes, ",")
		for _, a := range c.Nodes {
			host, port, err := net.SplitHostPort(a)
			if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
				return c, fmt.Errorf("--nodes: %q is not host:port (e.g. 10.0.0.1:6379)", a)
			}
		}
	}
	switch {
	case c.Replicas < 2 || c.Replicas > 9:
		return c, fmt.Errorf("--replicas %d: use 2 to 9", c.Replicas)
	case c.Every < 10*time.Millisecond:
		return c, fmt.Errorf("--every %v: use at least 10ms", c.Every)
	case c.Work <= 0 || c.Work >= c.Every:
		return c, fmt.Errorf("--work %v: must be positive and shorter than --every %v", c.Work, c.Every)
	case c.TTL < 100*time.Millisecond:
		return c, fmt.Errorf("--ttl %v: use at least 100ms", c.TTL)
	case c.Duration < 3*c.Every:
		return c, fmt.Errorf("--duration %v: use at least three periods (3 × --every = %v)", c.Duration, 3*c.Every)
	}
	return c, nil
}
