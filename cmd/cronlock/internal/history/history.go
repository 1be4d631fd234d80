// Package history writes the run history of a job (scheduler.Record) for people: the table of
// `cronlock history` and of the demo, and the name of a run on the status page.
package history

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronlock/cronlock/scheduler"
)

// Print writes the records h to w as a table, one attempt a line.
func Print(w io.Writer, h []scheduler.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "START (UTC)\tRUN\tATTEMPT\tOUTCOME\tREPLICA\tDURATION\tTOKEN\tTRACE\tERROR")
	for _, r := range h {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%v\t%d\t%s\t%s\n", r.Start.UTC().Format("2006-01-02 15:04:05.000"), RunName(r), r.Attempt,
			r.Outcome, r.Replica, r.Duration.Round(time.Millisecond), r.Token, r.TraceID, oneLine(r.Error))
	}
	_ = tw.Flush()
}

// PrintOutputs writes, for each record of h that kept output (scheduler.KeepOutput), a blank
// line, a heading naming the run, and the output, each line indented by two spaces.
func PrintOutputs(w io.Writer, h []scheduler.Record) {
	for _, r := range h {
		if r.Output == "" {
			continue
		}
		fmt.Fprintf(w, "\noutput of %s, token %d on %s (%d bytes):\n", RunName(r), r.Token, r.Replica, len(r.Output))
		for line := range strings.Lines(r.Output) {
			fmt.Fprintf(w, "  %s\n", strings.TrimRight(line, "\r\n"))
		}
	}
}

// RunName is a record's tick, "trigger <id>", or "backfill <date and time of the tick>", the
// last two followed by who asked: "trigger <id> by alice@host". A tick delayed by the job's
// jitter has its delay after it: "tick 05:37:00.000 +7.25s".
func RunName(r scheduler.Record) string {
	by := ""
	if r.By != "" {
		by = " by " + r.By
	}
	switch {
	case r.Trigger != "":
		return "trigger " + r.Trigger + by
	case r.Backfill:
		return "backfill " + r.Tick.UTC().Format("2006-01-02 15:04:05.000") + by
	}
	name := "tick " + r.Tick.UTC().Format("15:04:05.000")
	if d := r.PlannedStart.Sub(r.Tick); d > 0 {
		name += " +" + d.Round(time.Millisecond).String()
	}
	return name
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
