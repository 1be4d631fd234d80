// Command longjob shows a job that runs longer than its lock's TTL: the lock is renewed while
// it runs, so the other replica is refused the tick; and, when the lock nodes fail (two of
// three start answering every command with an error), the job's context is cancelled with
// redlock.ErrLeaseLost before the lock could expire — the job stops instead of running on
// unprotected.
//
//	go run ./examples/longjob
//
// It runs its own three embedded Redis-protocol nodes (miniredis), because it breaks them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "longjob:", err)
		os.Exit(1)
	}
}

const (
	ttl    = time.Second     // renewed every TTL/3
	period = 4 * time.Second // @every 4s
	work   = 3 * time.Second // three TTLs
)

func run(out io.Writer) error {
	var servers []*miniredis.Miniredis
	defer func() {
		for _, m := range servers {
			m.Close()
		}
	}()
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return err
		}
		m.ClockTTL(true) // keys expire on the real clock
		servers = append(servers, m)
	}

	start := time.Now()
	var outMu sync.Mutex // jobs print from their own goroutines
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "%5.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	var runs atomic.Int32
	lost := make(chan error, 1)
	compact := func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		n := runs.Add(1)
		say("%s: tick %s starts, token %d", r.Replica, r.Tick.Format(time.TimeOnly), r.FencingToken)
		if n == 2 {
			// The second run: make two of the three lock nodes fail every command.
			go func() {
				time.Sleep(500 * time.Millisecond)
				say("two lock nodes start failing")
				servers[0].SetError("ERR node down (example)")
				servers[1].SetError("ERR node down (example)")
			}()
		}
		step := time.NewTicker(500 * time.Millisecond)
		defer step.Stop()
		done := time.After(work)
		for {
			select {
			case <-done:
				say("%s: done after %v, lease still held", r.Replica, work)
				return nil
			case <-step.C:
				dl, _ := ctx.Deadline()
				say("%s: working; lease valid for %v more", r.Replica, time.Until(dl).Round(time.Millisecond))
			case <-ctx.Done():
				cause := context.Cause(ctx)
				say("%s: stopped: %v", r.Replica, cause)
				lost <- cause
				return cause
			}
		}
	}
	report := func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			err := next(ctx)
			r, _ := job.RunFrom(ctx)
			if errors.Is(err, job.ErrSkipped) {
				say("%s: tick %s %s (%v)", r.Replica, r.Tick.Format(time.TimeOnly), middleware.Outcome(err), err)
			}
			return err
		}
	}

	var scheds []*scheduler.Scheduler
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range 2 {
		var nodes []redlock.Node
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			closers = append(closers, func() { _ = rc.Close() })
			nodes = append(nodes, rc)
		}
		// A node timeout of 100ms instead of the default TTL/50 (20ms): the demo's TTL is short.
		locks, err := redlock.New(nodes, redlock.WithNodeTimeout(100*time.Millisecond))
		if err != nil {
			return err
		}
		closers = append(closers, func() { _ = locks.Close() })
		if err := locks.EndQuarantine(context.Background()); err != nil { // new nodes
			return err
		}
		s, err := scheduler.New(locks, scheduler.WithReplica(fmt.Sprint("replica-", i+1)), scheduler.WithMiddleware(report))
		if err != nil {
			return err
		}
		if err := s.Add(job.Job{Name: "compact", Spec: fmt.Sprintf("@every %v", period), Handler: compact,
			Options: job.Options{LockTTL: ttl}}); err != nil {
			return err
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		if err := s.Start(); err != nil {
			return err
		}
	}
	say("two replicas started; job %q every %v, lock TTL %v, work %v", "compact", period, ttl, work)

	cause := <-lost
	say("lease lost as expected: errors.Is(cause, redlock.ErrLeaseLost) = %v", errors.Is(cause, redlock.ErrLeaseLost))
	servers[0].SetError("")
	servers[1].SetError("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range scheds {
		if err := s.Stop(ctx); err != nil {
			return err
		}
	}
	say("stopped")
	return nil
}
