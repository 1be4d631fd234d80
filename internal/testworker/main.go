// Command testworker is one replica of a cronlock worker, for the multi-process tests of
// package scheduler: it runs one job with a scheduler whose clock may be offset, and records
// every run in a ledger list on a separate Redis node.
//
// Each run RPUSHes to the list -ledger-key:
//
//	job|tick|replica|token|start|end|ctxCancelled|deadline|cause
//
// with tick in Unix milliseconds, start, end and deadline (the run's context deadline when the
// job returned) in Unix nanoseconds of the real clock, ctxCancelled 0 or 1, and cause the
// context's cause (empty if not cancelled). When a run starts, it also RPUSHes
// job|tick|replica|token|start to -ledger-key + ":started".
//
// The job sleeps -work, or until its context ends. The worker stops gracefully after
// -duration, or on SIGTERM or SIGINT, with a -grace period for running jobs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		nodes     = flag.String("nodes", "", "comma-separated addresses of the lock nodes")
		ledger    = flag.String("ledger", "", "address of the ledger node")
		ledgerKey = flag.String("ledger-key", "ledger", "ledger list key")
		name      = flag.String("job", "job", "job name")
		spec      = flag.String("spec", "@every 1s", "job spec")
		replica   = flag.String("replica", "", "replica name (default hostname-pid)")
		offset    = flag.Duration("offset", 0, "offset of this replica's clock")
		work      = flag.Duration("work", 5*time.Millisecond, "how long each run works")
		ttl       = flag.Duration("ttl", 0, "lock TTL (default 30s)")
		catchUp   = flag.Duration("catchup", 0, "catch-up window")
		nodeTO    = flag.Duration("node-timeout", 0, "per-node request timeout (default: the lock client's, TTL/50)")
		duration  = flag.Duration("duration", 10*time.Second, "how long to run before stopping")
		grace     = flag.Duration("grace", 5*time.Second, "how long Stop lets running jobs finish")
		verbose   = flag.Bool("v", false, "log at debug level to stderr")
	)
	flag.Parse()
	if *nodes == "" || *ledger == "" {
		return errors.New("-nodes and -ledger are required")
	}

	var lockNodes []redlock.Node
	for _, addr := range strings.Split(*nodes, ",") {
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rc.Close()
		lockNodes = append(lockNodes, rc)
	}
	var lockOpts []redlock.Option
	if *nodeTO > 0 {
		lockOpts = append(lockOpts, redlock.WithNodeTimeout(*nodeTO))
	}
	locks, err := redlock.New(lockNodes, lockOpts...)
	if err != nil {
		return err
	}
	defer locks.Close()
	led := redis.NewClient(&redis.Options{Addr: *ledger})
	defer led.Close()

	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts := []scheduler.Option{scheduler.WithClock(clocktest.Offset(*offset)), scheduler.WithLogger(logger)}
	if *replica != "" {
		opts = append(opts, scheduler.WithReplica(*replica))
	}
	s, err := scheduler.New(locks, opts...)
	if err != nil {
		return err
	}
	handler := func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		start := time.Now()
		head := fmt.Sprintf("%s|%d|%s|%d", r.Job, r.Tick.UnixMilli(), r.Replica, r.FencingToken)
		if err := led.RPush(context.WithoutCancel(ctx), *ledgerKey+":started", fmt.Sprintf("%s|%d", head, start.UnixNano())).Err(); err != nil {
			return err
		}
		t := time.NewTimer(*work)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		end := time.Now()
		deadline, _ := ctx.Deadline()
		cancelled, cause := 0, ""
		if ctx.Err() != nil {
			cancelled, cause = 1, context.Cause(ctx).Error()
		}
		rec := fmt.Sprintf("%s|%d|%d|%d|%d|%s", head, start.UnixNano(), end.UnixNano(), cancelled, deadline.UnixNano(), strings.ReplaceAll(cause, "|", "/"))
		if err := led.RPush(context.WithoutCancel(ctx), *ledgerKey, rec).Err(); err != nil {
			return err
		}
		if cancelled == 1 {
			return context.Cause(ctx)
		}
		return nil
	}
	j := job.Job{Name: *name, Spec: *spec, Handler: handler, Options: job.Options{LockTTL: *ttl, CatchUp: *catchUp}}
	if err := s.Add(j); err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	t := time.NewTimer(*duration)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	return s.Stop(sctx)
}
