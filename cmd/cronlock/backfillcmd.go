package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/backfill"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/internal/schedseam"
)

const backfillUsage = `Usage: cronlock backfill JOB --from TIME --to TIME --config FILE [flags]

Runs every tick of JOB's schedule from --from to --to (RFC 3339, both included) that has not
run, each once across the cluster, one at a time, oldest first. A running daemon of this
config runs them: the command asks it over its HTTP server (the config's http:, or --url)
with the token of http_token_env, which must be set here too. A tick that ran (its history
says so, or its done marker is still on the nodes) is not run again, nor one skipped because
the job was paused then, unless --include-paused. Progress goes to stderr,
the summary to stdout. The runs are recorded as backfilled by --by. Ctrl-C stops after the tick under way. Exit 1 if a tick failed or the
backfill stopped early. Flags:
`

// backfillCmd runs backfill.
func backfillCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet("backfill")
	fromS := fs.String("from", "", "the range's start, RFC 3339 (e.g. 2026-12-01T00:00:00Z)")
	toS := fs.String("to", "", "the range's end, RFC 3339, not in the future")
	maxTicks := fs.Int("max", scheddefault.BackfillMax, "refuse a range of more ticks than this")
	includePaused := fs.Bool("include-paused", false, "also run the ticks skipped because the job was paused then")
	baseURL := fs.String("url", "", "the daemon's HTTP server (default: the config's http:, on loopback when it has no host)")
	by := cli.OperatorFlag(fs)
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := cli.ParseFlags(fs, backfillUsage, args, stdout); err != nil {
		return err
	}
	var times [2]time.Time
	for i, f := range []struct{ name, value string }{{"from", *fromS}, {"to", *toS}} {
		t, err := time.Parse(time.RFC3339Nano, f.value)
		if err != nil {
			return usageError{Err: fmt.Errorf("backfill: --%s %q: give an RFC 3339 time, e.g. 2026-12-01T00:00:00Z", f.name, f.value)}
		}
		times[i] = t
	}
	switch {
	case name == "":
		return usageError{Err: errors.New("backfill: give the job's name: cronlock backfill JOB --from TIME --to TIME --config FILE")}
	case *maxTicks <= 0:
		return usageError{Err: fmt.Errorf("backfill: --max %d: give a positive number of ticks", *maxTicks)}
	}
	if err := schedseam.CheckOperator(*by); err != nil {
		return usageError{Err: fmt.Errorf("backfill: --by: %w", err)}
	}
	cfg, err := cf.Load("backfill")
	if err != nil {
		return err
	}
	if !hasJob(cfg, name) {
		return usageError{Err: fmt.Errorf("backfill: job %q is not in %s", name, cfg.File)}
	}
	base := *baseURL
	if base == "" {
		if cfg.HTTP == "" {
			return usageError{Err: fmt.Errorf("backfill: %s has no http: address: a daemon serves backfills over HTTP; give its address in http: or --url", cfg.File)}
		}
		base = "http://" + config.ListenAddr(cfg.HTTP)
	}
	token, err := cfg.HTTPToken(nil)
	switch {
	case err != nil:
		return usageError{Err: fmt.Errorf("backfill: the daemon's token: %w", err)}
	case token == "":
		return usageError{Err: fmt.Errorf("backfill: the daemon's token: set http_token_env in %s and export that variable here, with the daemon's token", cfg.File)}
	}
	bar := newProgress(stderr)
	last, err := backfill.Ask(ctx, base, token, name, backfill.Request{From: times[0], To: times[1], Max: *maxTicks, IncludePaused: *includePaused, By: *by}, bar.show)
	bar.end()
	switch {
	case ctx.Err() != nil:
		fmt.Fprintf(stdout, "backfill %s: interrupted; the daemon stops after the tick under way (cronlock history %s shows what ran)\n", name, name)
		return loggedError{Err: ctx.Err()}
	case err != nil:
		return fmt.Errorf("backfill: %w", err)
	}
	fmt.Fprintf(stdout, "backfill %s: %d ticks: ran %d, already done %d, failed %d, run elsewhere %d, skipped while paused %d\n",
		name, last.Ticks, last.Ran, last.Done, last.Failed, last.Elsewhere, last.Paused)
	switch {
	case last.Error != "":
		return fmt.Errorf("backfill: stopped: %s", last.Error)
	case last.Failed > 0:
		return loggedError{Err: fmt.Errorf("backfill: %d ticks failed", last.Failed)}
	}
	return nil
}

// progress shows a backfill's progress: a bar redrawn in place on a terminal, else a line a
// tick.
type progress struct {
	w     io.Writer
	tty   bool
	drawn bool
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	if !ok {
		return &progress{w: w}
	}
	st, err := f.Stat()
	return &progress{w: w, tty: err == nil && st.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) show(l backfill.Line) {
	n := l.Ran + l.Failed + l.Done + l.Elsewhere + l.Paused
	tick := l.Tick.UTC().Format(time.RFC3339)
	if !p.tty {
		fmt.Fprintf(p.w, "%d/%d %s %s\n", n, l.Ticks, tick, l.Outcome)
		return
	}
	const width = 30
	filled := width
	if l.Ticks > 0 {
		filled = width * n / l.Ticks
	}
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d  ran %d  done %d  failed %d  paused %d  %s %s\x1b[K",
		strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, l.Ticks, l.Ran, l.Done, l.Failed, l.Paused, tick, l.Outcome)
	p.drawn = true
}

// end ends the bar's line.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
