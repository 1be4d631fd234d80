package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait for an event, so that a broken test fails instead of hanging.
// It is not a timing assertion: the events come much sooner.
const waitLimit = 30 * time.Second

// cluster is a set of real redis-server lock nodes for one test, each optionally behind a
// fault proxy.
type cluster struct{ *locktest.Cluster }

func newCluster(t testing.TB, n int, proxied bool) *cluster {
	t.Helper()
	return &cluster{locktest.Start(t, n, proxied)}
}

// client returns a redlock client of its own (own connections, like a separate replica) over
// the nodes, through the proxies if viaProxy; the nodes' quarantine is ended (they are new).
func (c *cluster) client(t testing.TB, viaProxy bool, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return c.Client(t, viaProxy, opts...)
}

// exists counts the nodes on which key exists; a node that cannot be read counts as having it.
// It does not fail the test, so that it can run inside require.Eventually.
func (c *cluster) exists(t testing.TB, key string) int {
	t.Helper()
	n := 0
	for _, s := range c.Servers {
		v, err := s.Client().Exists(context.Background(), key).Result()
		if err != nil {
			t.Logf("EXISTS %s on %s: %v", key, s.Addr(), err)
			v = 1
		}
		n += int(v)
	}
	return n
}

// doneOnQuorum reports whether key is kept as done on a quorum of the nodes, and held live on
// none. (A node whose acquisition arrived after the release has the key deleted by the lock
// client rather than marked done, so the marker is on a quorum, not always on every node.)
func (c *cluster) doneOnQuorum(t testing.TB, key string) bool {
	t.Helper()
	done := 0
	for _, st := range c.states(t, key) {
		switch st {
		case "done":
			done++
		case "<none>":
		default:
			return false
		}
	}
	return done > len(c.Servers)/2
}

// states returns the "s" field of key's hash on each node ("done" for a done marker, "" for
// a live lock, "<none>" when missing). It does not fail the test (see exists).
func (c *cluster) states(t testing.TB, key string) []string {
	t.Helper()
	var out []string
	for _, s := range c.Servers {
		v, err := s.Client().HGet(context.Background(), key, "s").Result()
		switch {
		case errors.Is(err, redis.Nil):
			v = "<none>"
		case err != nil:
			v = "error: " + err.Error()
		}
		out = append(out, v)
	}
	return out
}

// newScheduler returns a scheduler stopped at cleanup.
func newScheduler(t testing.TB, lc *redlock.Client, opts ...scheduler.Option) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(lc, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	return s
}

// tickOutcome is the final result of a tick on one replica, as the outermost middleware saw it.
type tickOutcome struct {
	Replica string
	Job     string
	Tick    time.Time
	Planned time.Time // job.Run.PlannedStart
	Outcome string
	Err     error
}

// event is a run of a handler: what the job itself saw.
type event struct {
	Job, Replica string
	Tick         time.Time
	Planned      time.Time // job.Run.PlannedStart
	Trigger      string
	Attempt      int
	Token        uint64
	Start, End   time.Time // real time
	Deadline     time.Time // the ctx's deadline when the handler returned
	CtxErr       error     // ctx.Err() when the handler returned
	Cause        error     // context.Cause(ctx) when the handler returned
	Err          error     // what the handler returned
}

// ledger records outcomes and handler runs, and lets a test wait for them.
type ledger struct {
	mu       sync.Mutex
	outcomes []tickOutcome
	events   []event
	missed   []missedRun
	changed  chan struct{}
}

func newLedger() *ledger { return &ledger{changed: make(chan struct{})} }

// missedRun is a scheduler's "missed ticks" warning: its loop fell behind and fired only the
// tick Running, never the N ticks of the job before it.
type missedRun struct {
	Replica, Job string
	Running      time.Time
	N            int
}

// logger returns a logger for replica's scheduler that keeps its "missed ticks" warnings in the
// ledger, and passes every line on to slog.Default().
func (l *ledger) logger(replica string) *slog.Logger {
	return slog.New(missedHandler{Handler: slog.Default().Handler(), l: l, replica: replica})
}

// missedHandler is the slog handler of ledger.logger.
type missedHandler struct {
	slog.Handler
	l       *ledger
	replica string
}

func (h missedHandler) Handle(ctx context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "cronlock: missed ticks") {
		return h.Handler.Handle(ctx, r)
	}
	m := missedRun{Replica: h.replica}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "job":
			m.Job = a.Value.String()
		case "missed":
			m.N = int(a.Value.Int64())
		case "running":
			m.Running, _ = a.Value.Any().(time.Time)
		}
		return true
	})
	h.l.mu.Lock()
	h.l.missed = append(h.l.missed, m)
	h.l.mu.Unlock()
	return h.Handler.Handle(ctx, r)
}

// decisions returns, for each tick of job (every period) that some replica did not run, what
// each replica did with it, and whether every one of replicas decided not to run it: skipped
// it as late, found no quorum within its window (nodes that did not answer within the node
// timeout, seen beside a CPU hog), found the run of an earlier tick still going on (the jobs
// forbid overlap; seen in the cluster test, a run's lock waiting on the restarted member), or
// its loop fell behind and missed it. Such a tick may
// rightly not run at all: a decision not to run neither breaks nor proves exactly-once.
func (l *ledger) decisions(job string, period time.Duration, replicas ...string) map[int64]decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	did := map[int64]map[string]string{}
	note := func(replica string, tick time.Time, what string) {
		ms := tick.UnixMilli()
		if did[ms] == nil {
			did[ms] = map[string]string{}
		}
		did[ms][replica] = what
	}
	for _, o := range l.outcomes {
		if o.Job == job && o.Outcome != outcome.Ran {
			note(o.Replica, o.Tick, fmt.Sprintf("%s (%v)", o.Outcome, o.Err))
		}
	}
	for _, m := range l.missed {
		for k := 1; m.Job == job && k <= m.N; k++ {
			note(m.Replica, m.Running.Add(-time.Duration(k)*period), "missed")
		}
	}
	out := map[int64]decision{}
	for tick, by := range did {
		d := decision{NotRun: true}
		for _, r := range replicas {
			what, ok := by[r]
			if !ok {
				what = "no outcome"
			}
			d.What = append(d.What, r+": "+what)
			d.NotRun = d.NotRun && (what == "missed" || strings.HasPrefix(what, outcome.SkippedLate+" ") ||
				strings.HasPrefix(what, outcome.QuorumUnavailable+" ") || strings.HasPrefix(what, outcome.SkippedOverlap+" "))
		}
		out[tick] = d
	}
	return out
}

// decision is what the replicas did with a tick that one of them did not run.
type decision struct {
	NotRun bool     // every replica decided not to run it
	What   []string // "replica: outcome (error)", "replica: missed" or "replica: no outcome"
}

func (l *ledger) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// observe returns a middleware that records the outcome of every tick on a replica.
func (l *ledger) observe() middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			err := next(ctx)
			r, _ := job.RunFrom(ctx)
			l.mu.Lock()
			l.outcomes = append(l.outcomes, tickOutcome{Replica: r.Replica, Job: r.Job, Tick: r.Tick, Planned: r.PlannedStart, Outcome: middleware.Outcome(err), Err: err})
			l.notifyLocked()
			l.mu.Unlock()
			return err
		}
	}
}

// handler returns a job handler that runs work and records the run.
func (l *ledger) handler(work func(ctx context.Context) error) job.Handler {
	return func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		ev := event{Job: r.Job, Replica: r.Replica, Tick: r.Tick, Planned: r.PlannedStart, Trigger: r.Trigger, Attempt: r.Attempt, Token: r.FencingToken, Start: time.Now()}
		err := work(ctx)
		ev.End, ev.CtxErr, ev.Cause, ev.Err = time.Now(), ctx.Err(), context.Cause(ctx), err
		ev.Deadline, _ = ctx.Deadline()
		l.mu.Lock()
		l.events = append(l.events, ev)
		l.notifyLocked()
		l.mu.Unlock()
		return err
	}
}

// waitOutcome waits until an outcome matches pred, and returns it.
func (l *ledger) waitOutcome(t testing.TB, what string, pred func(tickOutcome) bool) tickOutcome {
	t.Helper()
	var found tickOutcome
	l.wait(t, what, func() bool {
		for _, o := range l.outcomes {
			if pred(o) {
				found = o
				return true
			}
		}
		return false
	})
	return found
}

// waitEvent waits until a handler run matches pred, and returns it.
func (l *ledger) waitEvent(t testing.TB, what string, pred func(event) bool) event {
	t.Helper()
	var found event
	l.wait(t, what, func() bool {
		for _, e := range l.events {
			if pred(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// wait waits until cond (called with l.mu held) is true.
func (l *ledger) wait(t testing.TB, what string, cond func() bool) {
	t.Helper()
	timeout := time.NewTimer(waitLimit)
	defer timeout.Stop()
	for {
		l.mu.Lock()
		ok, ch := cond(), l.changed
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("waited %v for %s; outcomes: %v; events: %v", waitLimit, what, l.outcomes, l.events)
		}
	}
}

func (l *ledger) snapshot() ([]tickOutcome, []event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.outcomes), slices.Clone(l.events)
}

func (o tickOutcome) String() string {
	return fmt.Sprintf("{%s %s %s %s %v}", o.Replica, o.Job, o.Tick.Format("15:04:05.000"), o.Outcome, o.Err)
}

func (e event) String() string {
	return fmt.Sprintf("{%s %s %s attempt=%d token=%d err=%v}", e.Replica, e.Job, e.Tick.Format("15:04:05.000"), e.Attempt, e.Token, e.Err)
}

// ctxT returns a context bounded by waitLimit.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

// sleepCtx waits d or until ctx ends, and returns ctx's cause if it ended.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
