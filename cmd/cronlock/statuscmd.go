package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// printStatus prints the status of cfg's jobs (of the job named only, when it is not ""):
// per job, its pause, its newest history record and its runs in flight on any replica, from
// one read of the nodes (Control.Status).
func printStatus(ctx context.Context, ctl *scheduler.Control, cfg *config.Config, only string, stdout io.Writer) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tPAUSED\tLAST RUN\tRUNNING")
	for _, j := range cfg.Jobs {
		if only != "" && j.Name != only {
			continue
		}
		st, err := ctl.Status(ctx, j.Name)
		if err != nil {
			return err
		}
		paused := "no"
		if st.Paused != nil {
			paused = pauseText(*st.Paused)
		}
		last := "none recorded"
		if len(st.History) > 0 { // the newest record, a skipped one too (st.LastRun is not)
			h := st.History[0]
			last = fmt.Sprintf("%s %s on %s", history.RunName(h), h.Outcome, h.Replica)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.Name, oneLine(paused), last, inFlightText(st.Running))
	}
	return tw.Flush()
}

// inFlightText is how status shows a job's runs in flight, as the console does: "on <replica>
// since <start> (attempt <n>[, trigger <id>])", "; " between runs, or "no".
func inFlightText(runs []scheduler.InFlight) string {
	if len(runs) == 0 {
		return "no"
	}
	out := make([]string, len(runs))
	for i, f := range runs {
		out[i] = fmt.Sprintf("on %s since %s UTC (attempt %d", f.Replica, f.Start.UTC().Format(time.DateTime), f.Attempt)
		if f.Trigger != "" {
			out[i] += ", trigger " + f.Trigger
		}
		out[i] += ")"
	}
	return strings.Join(out, "; ")
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
