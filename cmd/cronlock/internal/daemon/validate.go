package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/internal/tickmath"
)

// scheduleOf returns how validate shows a job's schedule — the spec with H resolved from the
// job's name, followed by the spec as written when it had H — its next tick after now (with
// the tick's jitter delay), and its jitter ("-" for none).
func scheduleOf(name, spec string, jitter time.Duration, now time.Time) (schedule, next, jit string) {
	schedule, next, jit = spec, "-", "-"
	resolved, s, err := parseSchedule(name, spec)
	if resolved != spec {
		schedule = fmt.Sprintf("%s (%s)", resolved, spec)
	}
	if err == nil {
		tick := s.Next(now)
		next = tick.UTC().Format(time.RFC3339Nano)
		if jitter > 0 {
			next += fmt.Sprintf(" +%v", tickmath.JitterDelay(name, tick, jitter).Round(time.Millisecond))
		}
	}
	if jitter > 0 {
		jit = jitter.String()
	}
	return schedule, next, jit
}

// Validate runs `cronlock validate` on the config file that cf names.
func Validate(cf cli.ConfigFlags, stdout, stderr io.Writer) error {
	cfg, err := cf.Load("validate")
	if err != nil {
		return err
	}
	var addrs []string
	checked := *cfg // what run would check, but without the passwords that are not set here
	checked.Nodes = slices.Clone(cfg.Nodes)
	for i, n := range cfg.Nodes {
		addrs = append(addrs, n.Name())
		if _, err := n.Password(nil); err != nil {
			fmt.Fprintf(stderr, "warning: %v\n", err)
			checked.Nodes[i].PasswordEnv = ""
		}
	}
	if _, err := cfg.HTTPToken(nil); err != nil {
		fmt.Fprintf(stderr, "warning: %v\n", err)
		checked.HTTPTokenEnv = ""
	}
	for _, j := range cfg.Jobs {
		if _, err := j.Environ(nil); err != nil {
			fmt.Fprintf(stderr, "warning: %v\n", err)
		}
	}
	// The checks of the daemon's start, which connect to nothing and start nothing; variables
	// that are not set here (warned about above) are taken as empty.
	d := &daemon{cfg: &checked, log: slog.New(slog.DiscardHandler),
		lookupEnv: func(name string) (string, bool) { v, _ := os.LookupEnv(name); return v, true }}
	p, err := d.prepare()
	d.close()
	if err != nil {
		return err
	}
	if p.spans != nil {
		_ = p.spans.Shutdown(context.Background()) // nothing was exported: returns at once
	}
	fmt.Fprintf(stdout, "%s: ok\n", cfg.File)
	fmt.Fprintf(stdout, "nodes: %d, quorum %d: %s\n", len(cfg.Nodes), cfg.Quorum(), strings.Join(addrs, ", "))
	fmt.Fprintf(stdout, "prefix: %s\n", cfg.Prefix)
	now := time.Now()
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "job\tschedule\tjitter\tnext tick (UTC)\tcommand\n")
	for _, j := range cfg.Jobs {
		schedule, next, jitter := scheduleOf(j.Name, j.Schedule, j.Jitter, now)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%q\n", j.Name, schedule, jitter, next, j.Command)
		for _, err := range hostProblems(j) {
			fmt.Fprintf(stderr, "warning: %s:%d: job %q: %v (on this host)\n", j.File, j.Line, j.Name, err)
		}
	}
	tw.Flush()
	return nil
}
