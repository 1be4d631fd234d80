package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/limiter"
	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// nodes is a set of real redis-server nodes, optionally each behind a fault proxy.
type nodes struct{ *locktest.Cluster }

func startNodes(t *testing.T, n int, proxied bool) *nodes {
	t.Helper()
	return &nodes{locktest.Start(t, n, proxied)}
}

// client returns a redlock client with its own connections (through the proxies if there
// are), the nodes' quarantine ended.
func (ns *nodes) client(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return ns.Client(t, ns.Proxies != nil, opts...)
}

// count returns on how many nodes key exists, read directly (not through the proxies).
func (ns *nodes) count(t *testing.T, key string) int {
	t.Helper()
	n := 0
	for _, s := range ns.Servers {
		v, err := s.Client().Exists(context.Background(), key).Result()
		require.NoError(t, err)
		n += int(v)
	}
	return n
}

var tick = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func runAs(replica, name string, deadline time.Time) context.Context {
	return job.NewContext(context.Background(), &job.Run{Job: name, Tick: tick, Attempt: 1, Replica: replica, Deadline: deadline})
}

func TestLockRunsOnceAndKeepsTheTickDone(t *testing.T) {
	ns := startNodes(t, 3, false)
	lc := ns.client(t)
	lock := middleware.Lock(lc, middleware.LockConfig{Prefix: "p"})
	var token uint64
	h := lock(func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		token = r.FencingToken
		_, hasDeadline := ctx.Deadline()
		assert.True(t, hasDeadline, "the lease's deadline")
		return nil
	})
	require.NoError(t, h(runAs("r1", "once", time.Time{})))
	assert.NotZero(t, token)
	require.NoError(t, lc.Close()) // waits for the requests still in flight to the last node
	assert.GreaterOrEqual(t, ns.count(t, layout.TickKey("p", "once", tick)), 2, "kept as done on a quorum")
	assert.Zero(t, ns.count(t, layout.RunKey("p", "once")), "run key released")
	assert.GreaterOrEqual(t, ns.count(t, "{p:once}:fence"), 2, "the job's own fence counter (redlock's default for its tag)")

	lc2 := ns.client(t)
	err := middleware.Lock(lc2, middleware.LockConfig{Prefix: "p"})(func(context.Context) error {
		t.Error("a done tick ran again")
		return nil
	})(runAs("r2", "once", time.Time{}))
	se, ok := errors.AsType[*job.SkipError](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, job.SkipDone, se.Reason)
	assert.Equal(t, "r1", se.Holder)
	assert.Equal(t, outcome.SkippedDone, middleware.Outcome(err))
	assert.ErrorIs(t, err, redlock.ErrNotAcquired)
}

func TestLockSkipsAHeldTickAndAnOverlap(t *testing.T) {
	ns := startNodes(t, 3, false)
	lc := ns.client(t)
	lock := middleware.Lock(lc, middleware.LockConfig{})
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- lock(func(context.Context) error { close(inside); <-release; return nil })(runAs("holder", "busy", time.Time{}))
	}()
	<-inside

	err := lock(func(context.Context) error { t.Error("ran a held tick"); return nil })(runAs("other", "busy", time.Time{}))
	assert.Equal(t, outcome.SkippedHeld, middleware.Outcome(err), "%v", err)

	// The next tick finds the run key held: an overlap.
	next := job.NewContext(context.Background(), &job.Run{Job: "busy", Tick: tick.Add(time.Minute), Attempt: 1, Replica: "other"})
	err = lock(func(context.Context) error { t.Error("overlapped"); return nil })(next)
	assert.Equal(t, outcome.SkippedOverlap, middleware.Outcome(err), "%v", err)
	se, _ := errors.AsType[*job.SkipError](err)
	assert.Equal(t, "holder", se.Holder)
	ae, _ := errors.AsType[*redlock.AcquireError](err)
	assert.Equal(t, layout.RunKey(middleware.DefaultPrefix, "busy"), ae.Holder.Key)
	close(release)
	require.NoError(t, <-done)

	// The skipped tick was kept as skipped: a replica that comes later skips it too.
	err = lock(func(context.Context) error { t.Error("ran a skipped tick late"); return nil })(next)
	assert.Equal(t, outcome.SkippedOverlap, middleware.Outcome(err), "%v", err)
	ae, _ = errors.AsType[*redlock.AcquireError](err)
	assert.True(t, ae.Holder.Done)
	assert.Equal(t, layout.SkippedMarker, ae.Holder.Metadata)

	// With Allow, a tick runs while another runs.
	allow := middleware.Lock(lc, middleware.LockConfig{Overlap: job.Allow})
	inside, release = make(chan struct{}), make(chan struct{})
	go func() {
		done <- allow(func(context.Context) error { close(inside); <-release; return nil })(runAs("a", "many", time.Time{}))
	}()
	<-inside
	ran := false
	later := job.NewContext(context.Background(), &job.Run{Job: "many", Tick: tick.Add(time.Minute), Attempt: 1, Replica: "b"})
	require.NoError(t, allow(func(context.Context) error { ran = true; return nil })(later))
	assert.True(t, ran)
	close(release)
	require.NoError(t, <-done)
}

// A release that missed a node leaves the run key there until its TTL. When that node is the
// lock's primary, a contended attempt, which asks it alone first, is refused; looked at again
// on every node, the run key is free on a quorum and the tick runs.
func TestLockRunsPastARunKeyLeftOnOneNode(t *testing.T) {
	ns := startNodes(t, 5, false)
	lc := ns.client(t)
	lock := middleware.Lock(lc, middleware.LockConfig{Prefix: "p"})
	ctx := context.Background()
	runKey := layout.RunKey("p", "left")
	leave := func(i int) {
		require.NoError(t, ns.Servers[i].Client().HSet(ctx, runKey, "v", "gone-value", "l", "gone").Err())
	}
	unleave := func() {
		for _, s := range ns.Servers {
			require.NoError(t, s.Client().Del(ctx, runKey).Err())
		}
	}
	at := func(n int) context.Context {
		return job.NewContext(ctx, &job.Run{Job: "left", Tick: tick.Add(time.Duration(n) * time.Minute), Attempt: 1, Replica: "r"})
	}
	// A run going on holds the run key on every node: the tick is skipped, and the job's
	// locks are contended from now on.
	for i := range ns.Servers {
		leave(i)
	}
	err := lock(func(context.Context) error { t.Error("overlapped"); return nil })(at(0))
	require.Equal(t, outcome.SkippedOverlap, middleware.Outcome(err), "%v", err)
	unleave()

	for i := range ns.Servers {
		leave(i)
		ran := false
		err := lock(func(context.Context) error { ran = true; return nil })(at(i + 1))
		require.NoError(t, err, "run key left on node %d", i)
		assert.True(t, ran)
		require.Eventually(t, func() bool { return ns.count(t, runKey) == 1 }, 10*time.Second, time.Millisecond,
			"the run released its run key on the other nodes")
		unleave()
	}
}

func TestLockReleasesOnFailureAndPanic(t *testing.T) {
	ns := startNodes(t, 3, false)
	lc := ns.client(t)
	lock := middleware.Lock(lc, middleware.LockConfig{})
	tickKey, runKey := layout.TickKey("cronlock", "f", tick), layout.RunKey("cronlock", "f")
	fail := errors.New("failed")
	assert.Equal(t, fail, lock(func(context.Context) error { return fail })(runAs("r", "f", time.Time{})))
	// A panic goes through Lock (no Recover inside), after the lock was released.
	assert.PanicsWithValue(t, "boom", func() {
		_ = lock(func(context.Context) error { panic("boom") })(runAs("r", "f", time.Time{}))
	})
	require.NoError(t, lc.Close())
	assert.Zero(t, ns.count(t, tickKey))
	assert.Zero(t, ns.count(t, runKey))
}

func TestLockNeedsARun(t *testing.T) {
	ns := startNodes(t, 1, false)
	err := middleware.Lock(ns.client(t), middleware.LockConfig{})(func(context.Context) error { return nil })(context.Background())
	assert.ErrorIs(t, err, middleware.ErrNoRun)
}

// Racers that ask every node at the same instant can split the vote; Lock settles it, and the
// tick runs once — never zero times, never twice. Each round is a new job, so that its lock is
// calm (the lock client asks every node in parallel; it asks the primary node first only for
// locks it recently saw contended).
func TestLockRacersAtTheTickInstant(t *testing.T) {
	ns := startNodes(t, 3, false)
	const racers, ticks = 5, 100
	var clients []*redlock.Client
	for range racers {
		clients = append(clients, ns.client(t))
	}
	for i := range ticks {
		var ran atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		outcomes := make([]string, racers)
		for r := range racers {
			wg.Go(func() {
				ctx := job.NewContext(context.Background(), &job.Run{Job: fmt.Sprint("race", i), Tick: tick, Attempt: 1, Replica: fmt.Sprint("r", r)})
				<-start
				err := middleware.Lock(clients[r], middleware.LockConfig{})(func(context.Context) error { ran.Add(1); return nil })(ctx)
				outcomes[r] = middleware.Outcome(err)
			})
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, ran.Load(), "tick %d: outcomes %v", i, outcomes)
	}
}

// With the nodes gone, the handler's context is cancelled with ErrLeaseLost, and the run's error
// says so — unless the handler returned nil: its work completed, and is not tried again.
func TestLockLeaseLost(t *testing.T) {
	ns := startNodes(t, 3, true)
	lc := ns.client(t, redlock.WithNodeTimeout(20*time.Millisecond))
	lock := middleware.Lock(lc, middleware.LockConfig{TTL: 500 * time.Millisecond})
	for _, tc := range []struct {
		name    string
		ret     func(ctx context.Context) error
		outcome string
	}{
		{"job returns ctx.Err()", func(ctx context.Context) error { return ctx.Err() }, outcome.LeaseLost},
		{"job completes anyway", func(context.Context) error { return nil }, outcome.Ran},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cause error
			err := lock(func(ctx context.Context) error {
				for _, p := range ns.Proxies {
					p.Blackhole(true)
				}
				<-ctx.Done()
				cause = context.Cause(ctx)
				return tc.ret(ctx)
			})(runAs("r", "lost-"+tc.name, time.Time{}))
			for _, p := range ns.Proxies {
				p.Blackhole(false)
			}
			require.ErrorIs(t, cause, redlock.ErrLeaseLost)
			assert.Equal(t, tc.outcome, middleware.Outcome(err))
		})
	}
}

// With a majority of nodes down, Lock tries again until the tick's deadline.
func TestLockQuorumUnavailable(t *testing.T) {
	ns := startNodes(t, 3, true)
	lc := ns.client(t, redlock.WithNodeTimeout(20*time.Millisecond))
	ns.Proxies[0].Blackhole(true)
	ns.Proxies[1].Blackhole(true)
	err := middleware.Lock(lc, middleware.LockConfig{TTL: time.Second})(func(context.Context) error {
		t.Error("ran without a quorum")
		return nil
	})(job.NewContext(context.Background(), &job.Run{Job: "q", Tick: tick, Replica: "r", Deadline: time.Now().Add(200 * time.Millisecond)}))
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	assert.ErrorContains(t, err, "window closed while the lock nodes were unavailable")
	assert.Equal(t, outcome.QuorumUnavailable, middleware.Outcome(err))

	// A tick whose window already closed is not attempted at all.
	err = middleware.Lock(lc, middleware.LockConfig{})(func(context.Context) error { return nil })(
		job.NewContext(context.Background(), &job.Run{Job: "q", Tick: tick, Deadline: time.Now().Add(-time.Second)}))
	assert.Equal(t, outcome.SkippedLate, middleware.Outcome(err))
	ns.Proxies[0].Blackhole(false)
	ns.Proxies[1].Blackhole(false)
}

// leftoverHook makes a claim's first attempt fail after taking nodes 0 and 1, and keeps its
// leftovers there: node 2 fails its acquisition, every node its fencing write-back (the
// counters differ), and the releases fail until the claim made more attempts than one
// TryAcquire's split votes allow.
type leftoverHook struct {
	first    atomic.Bool  // the first attempt is under way
	hold     atomic.Bool  // releases fail
	acquires atomic.Int32 // acquisitions sent to node 0
	node     int
}

func (h *leftoverHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *leftoverHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *leftoverHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if (cmd.Name() != "evalsha" && cmd.Name() != "eval") || len(args) < 4 {
			return next(ctx, cmd)
		}
		fail := func() error { cmd.SetErr(redis.ErrClosed); return redis.ErrClosed }
		switch key, _ := args[3].(string); {
		case key == "cronlock:boot": // an acquisition
			if h.node == 0 {
				h.acquires.Add(1)
			}
			if h.node == 2 && h.first.Load() {
				return fail()
			}
		case strings.HasSuffix(key, ":fence"): // a write-back
			if h.first.Load() {
				return fail()
			}
		case slices.Contains(args, any(":released")): // a release
			h.first.Store(false)
			if h.hold.Load() {
				return fail()
			}
		}
		return next(ctx, cmd)
	}
}

// A claim whose failed attempt left its keys on a quorum (their releases had not landed) is
// refused by its own leftover: it waits for the releases and runs the tick, where it used to
// skip the tick as held — by no one. Seen beside a CPU hog with one scheduler and 2000 jobs.
func TestLockRunsPastItsOwnLeftover(t *testing.T) {
	ns := startNodes(t, 3, false)
	ctx := context.Background()
	for i, n := range []int{1000, 500, 500} {
		require.NoError(t, ns.Servers[i].Client().Set(ctx, "{p:own}:fence", n, 0).Err())
	}
	var list []redlock.Node
	hooks := make([]*leftoverHook, len(ns.Servers))
	for i, s := range ns.Servers {
		hooks[i] = &leftoverHook{node: i}
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		rc.AddHook(hooks[i])
		t.Cleanup(func() { _ = rc.Close() })
		list = append(list, rc)
	}
	lc, err := redlock.New(list, redlock.WithNodeTimeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	require.NoError(t, lc.EndQuarantine(ctx))
	for _, h := range hooks {
		h.first.Store(true)
		h.hold.Store(true)
	}
	// The releases land once the claim made more attempts than its first two TryAcquires
	// can (1, then 1 + maxSplitRetries).
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Go(func() {
		for hooks[0].acquires.Load() < 9 {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		for _, h := range hooks {
			h.hold.Store(false)
		}
	})
	t.Cleanup(func() { close(stop); watcher.Wait() })

	ran := false
	err = middleware.Lock(lc, middleware.LockConfig{Prefix: "p", TTL: 10 * time.Second})(func(context.Context) error {
		ran = true
		return nil
	})(job.NewContext(ctx, &job.Run{Job: "own", Tick: tick, Attempt: 1, Replica: "r", Deadline: time.Now().Add(30 * time.Second)}))
	require.NoError(t, err, "outcome %s", middleware.Outcome(err))
	assert.True(t, ran)
}

func TestKeys(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	assert.Equal(t, "{cronlock:report}:tick:1700000000123", layout.TickKey("cronlock", "report", at))
	assert.Equal(t, "{cronlock:report}:run", layout.RunKey("cronlock", "report"))
}

// inFlight counts the acquire scripts the nodes ran, alone or in pipelines (the acquire
// script's first key is the boot marker, as is the boot script's; a NOSCRIPT reply, before the
// script is sent whole, is not counted), the ones in flight and the most seen at once.
// Once paired is set, the first acquisition waits at the node's door until a second one is in
// flight with it, so that two slots are seen in use whatever the scheduling.
type inFlight struct {
	now, most, total atomic.Int32
	paired           chan struct{}
	pairOnce         sync.Once
	waited           atomic.Bool
}

// pair resets the counts (set-up requests are not counted) and arms the wait for a pair.
func (f *inFlight) pair() {
	f.now.Store(0)
	f.most.Store(0)
	f.total.Store(0)
	f.paired = make(chan struct{})
}

func (f *inFlight) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *inFlight) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f.count(ctx, cmds, func() ([]error, error) {
			err := next(ctx, cmds)
			errs := make([]error, len(cmds))
			for i, cmd := range cmds {
				errs[i] = cmd.Err()
			}
			return errs, err
		})
	}
}

func (f *inFlight) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f.count(ctx, []redis.Cmder{cmd}, func() ([]error, error) {
			// go-redis sets a single command's error after the hooks return.
			err := next(ctx, cmd)
			return []error{err}, err
		})
	}
}

// count counts the acquire scripts among cmds — one command or one pipeline, sent by send,
// which returns each command's error — in flight while send runs, and those that succeeded.
func (f *inFlight) count(ctx context.Context, cmds []redis.Cmder, send func() ([]error, error)) error {
	var acquires []int
	for i, cmd := range cmds {
		if args := cmd.Args(); len(args) >= 4 && args[3] == "cronlock:boot" {
			acquires = append(acquires, i)
		}
	}
	if len(acquires) == 0 {
		_, err := send()
		return err
	}
	n := f.now.Add(int32(len(acquires)))
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	defer f.now.Add(-int32(len(acquires)))
	if f.paired != nil {
		if n >= 2 {
			f.pairOnce.Do(func() { close(f.paired) })
		}
		if f.waited.CompareAndSwap(false, true) {
			select {
			case <-f.paired:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	errs, err := send()
	for _, i := range acquires {
		if errs[i] == nil {
			f.total.Add(1)
		}
	}
	return err
}

// A Limiter bounds the acquisitions in flight across the Locks that share it; the jobs
// themselves run without a slot. (One node: an acquisition is decided by its only request, so
// no request outlives it and the bound on requests is exact; with more nodes, requests to the
// nodes that did not decide an acquisition finish after it, owned by the lock client.)
func TestLockLimiter(t *testing.T) {
	ns := startNodes(t, 1, false)
	flight := &inFlight{}
	var list []redlock.Node
	for _, s := range ns.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		rc.AddHook(flight)
		t.Cleanup(func() { _ = rc.Close() })
		list = append(list, rc)
	}
	lc, err := redlock.New(list)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	require.NoError(t, lc.EndQuarantine(context.Background()))
	flight.pair()

	lim, err := limiter.New(2)
	require.NoError(t, err)
	var running, mostRunning atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 40 {
		wg.Go(func() {
			ctx := job.NewContext(context.Background(), &job.Run{Job: fmt.Sprint("lim", i), Tick: tick, Replica: "r"})
			<-start
			err := middleware.Lock(lc, middleware.LockConfig{Limiter: lim})(func(context.Context) error {
				n := running.Add(1)
				for m := mostRunning.Load(); n > m && !mostRunning.CompareAndSwap(m, n); m = mostRunning.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
				return nil
			})(ctx)
			assert.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int32(2), flight.most.Load(), "acquisitions in flight at most")
	assert.Equal(t, int32(40), flight.total.Load(), "one acquisition per job")
	assert.Greater(t, mostRunning.Load(), int32(2), "runs are not limited")
}
