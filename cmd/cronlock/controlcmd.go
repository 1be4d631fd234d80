package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/scheduler"
)

const controlUsage = `Usage: cronlock pause|resume|trigger|history|status|forget JOB --config FILE [flags]

  pause    pause JOB on every replica (its ticks are skipped as skipped_paused) until resume
  resume   end JOB's pause
  trigger  ask for one manual run of JOB, run once by some running replica; prints its id
  history  print JOB's last runs, newest first; with --output, then the output each run
           kept (output_keep)
  status   print, for every job of the config (JOB may be left out) or JOB, one line: whether
           it is paused — since when, by whom (--by of pause, the name signed in to the
           console, or the replica asked) and why —, its newest run: which (a manual run or
           backfill with who asked), its outcome and the replica that ran it —, and its runs
           in flight on any replica: where, since when, which attempt
  forget   remove everything a job that no daemon runs any more left on the lock nodes (fence
           counter, history, pause, done markers, waiting manual runs); refused while JOB is
           in the config file or a run of it holds a lock

The state lives on the lock nodes: no daemon needs to be reached. Flags:
`

// controlCmd runs pause, resume, trigger, history, status or forget.
func controlCmd(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs, cf := cli.FlagSet(cmd)
	reason := fs.String("reason", "paused with cronlock pause", "pause: why (shown with every skipped tick)")
	n := fs.Int("n", 20, "history: how many runs")
	output := fs.Bool("output", false, "history: also print the output each run kept (the job's output_keep)")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	var by *string // who asks: the commands that change something
	if cmd == "pause" || cmd == "resume" || cmd == "trigger" {
		by = cli.OperatorFlag(fs)
	}
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := cli.ParseFlags(fs, controlUsage, args, stdout); err != nil {
		return err
	}
	if name == "" && cmd != "status" {
		return usageError{Err: fmt.Errorf("%s: give the job's name: cronlock %s JOB --config FILE", cmd, cmd)}
	}
	if by != nil {
		if err := schedseam.CheckOperator(*by); err != nil {
			return usageError{Err: fmt.Errorf("%s: --by: %w", cmd, err)}
		}
	}
	cfg, err := cf.Load(cmd)
	if err != nil {
		return err
	}
	switch {
	case cmd == "forget" && hasJob(cfg, name):
		return usageError{Err: fmt.Errorf("forget: job %q is still in %s: remove it there, reload every daemon (SIGHUP), then forget it", name, cfg.File)}
	case cmd != "forget" && name != "" && !hasJob(cfg, name):
		return usageError{Err: fmt.Errorf("%s: job %q is not in %s", cmd, name, cfg.File)}
	}
	ctl, done, err := controlClient(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if by != nil {
		ctx = scheduler.WithOperator(ctx, *by)
	}
	switch cmd {
	case "pause":
		if err := ctl.Pause(ctx, name, *reason); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "paused %s by %s: %s\n", name, *by, *reason)
	case "resume":
		if err := ctl.Resume(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed %s\n", name)
	case "trigger":
		id, err := ctl.Trigger(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
	case "forget":
		if err := ctl.Forget(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "forgot %s\n", name)
	case "status":
		return printStatus(ctx, ctl, cfg, name, stdout)
	case "history":
		read := ctl.History
		if *output {
			read = ctl.HistoryWithOutput
		}
		h, err := read(ctx, name, *n)
		if err != nil && h == nil {
			return err
		}
		history.Print(stdout, h)
		if *output {
			history.PrintOutputs(stdout, h)
		}
		if err != nil {
			fmt.Fprintf(stderr, "warning: %v\n", err)
		}
	}
	return nil
}

// controlClient returns a control client over cfg's nodes, with cfg's prefix. done closes it.
func controlClient(cfg *config.Config) (*scheduler.Control, func(), error) {
	clients, err := nodes.Clients(cfg)
	if err != nil {
		return nil, nil, err
	}
	replica := nodes.DefaultReplica()
	locks, err := nodes.LockClient(cfg, clients, replica)
	if err != nil {
		nodes.Close(clients)
		return nil, nil, usageError{Err: fmt.Errorf("%s: nodes: %w", cfg.File, err)}
	}
	done := func() { _ = locks.Close(); nodes.Close(clients) }
	// A one-shot command says what it did on stdout, and its errors once: no log lines.
	quiet := slog.New(slog.DiscardHandler)
	ctl, err := scheduler.NewControl(locks, scheduler.WithPrefix(cfg.Prefix), scheduler.WithReplica(replica), scheduler.WithLogger(quiet))
	if err != nil {
		done()
		return nil, nil, usageError{Err: fmt.Errorf("%s: %w", cfg.File, err)}
	}
	return ctl, done, nil
}

// hasJob reports whether cfg has a job named name.
func hasJob(cfg *config.Config, name string) bool {
	return slices.ContainsFunc(cfg.Jobs, func(j config.Job) bool { return j.Name == name })
}
