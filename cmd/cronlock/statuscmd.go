package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/job"
)

const statusUsage = `Usage: cronlock status [JOB] --config FILE [flags]

Prints, for every job of the config (or JOB only), one line read from the lock nodes: whether
it is paused — since when, by whom (the --by of cronlock pause, the name signed in to the
console, or the replica asked) and why — and its last run: which run (a manual run or
backfill with who asked for it), its outcome and the replica that ran it. cronlock history
JOB lists the runs. Exit 1 when fewer than a quorum of nodes answered. Flags:
`

// statusCmd runs status.
func statusCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs, cf := cli.FlagSet("status")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	var only string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		only, args = args[0], args[1:]
	}
	if err := cli.ParseFlags(fs, statusUsage, args, stdout); err != nil {
		return err
	}
	cfg, err := cf.Load("status")
	if err != nil {
		return err
	}
	if only != "" && !hasJob(cfg, only) {
		return usageError{Err: fmt.Errorf("status: job %q is not in %s", only, cfg.File)}
	}
	ctl, done, err := controlClient(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPAUSED\tLAST RUN")
	for _, j := range cfg.Jobs {
		if only != "" && j.Name != only {
			continue
		}
		p, err := ctl.Paused(ctx, j.Name)
		if err != nil {
			return err
		}
		paused := "no"
		if p != nil {
			paused = pauseText(*p)
		}
		h, err := ctl.History(ctx, j.Name, 1)
		if err != nil {
			return err
		}
		last := "none recorded"
		if len(h) > 0 {
			last = fmt.Sprintf("%s %s on %s", history.RunName(h[0]), h[0].Outcome, h[0].Replica)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", j.Name, oneLine(paused), last)
	}
	return tw.Flush()
}

// pauseText is how status shows a pause: "since <time> by <who>: <reason>", without the parts
// a pause set by hand (redis-cli) lacks.
func pauseText(p job.Pause) string {
	var b strings.Builder
	if !p.Since.IsZero() {
		b.WriteString("since " + p.Since.UTC().Format("2006-01-02 15:04:05") + " UTC ")
	}
	if p.By != "" {
		b.WriteString("by " + p.By)
	}
	return strings.TrimSpace(b.String()) + ": " + p.Reason
}

// oneLine keeps a reason typed with line breaks on its line.
func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
