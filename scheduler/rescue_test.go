package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/hashslot"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// A worker killed (SIGKILL) or frozen (SIGSTOP) in the middle of a run leaves its tick in
// flight on the nodes; once its lock is gone, a live replica records the attempt as
// interrupted — once, with the worker's replica, attempt and token — and passes it through its
// middleware with outcome interrupted. The frozen worker, resumed, finds its record written:
// the history keeps the interrupted one.
func TestVanishedRunIsRecordedInterrupted(t *testing.T) {
	bin := buildWorker(t)
	for name, sig := range map[string]syscall.Signal{"killed": syscall.SIGKILL, "frozen": syscall.SIGSTOP} {
		t.Run(name, func(t *testing.T) {
			c, ledger, nodes := processCluster(t)
			now := time.Now()
			offset := now.Truncate(10 * time.Minute).Add(10*time.Minute + time.Second).Sub(now)
			a := startWorker(t, bin, "a", "-nodes", nodes, "-ledger", ledger.Addr(), "-job", "vanish", "-spec", "@every 10m",
				"-offset", offset.String(), "-ttl", "1s", "-node-timeout", "100ms", "-catchup", "1m", "-duration", "1m", "-work", "1m")
			started := waitLedger(t, ledger.Client(), "ledger:started", "a's run to start", func(r record) bool { return r.Replica == "a" })

			// The live replica never fires the job (its clock stands still); it only rescues.
			led := newLedger()
			held := &messages{msg: "cronlock: run in flight, its lock held", seen: make(chan struct{}, 100)}
			live := newScheduler(t, c.client(t, false), scheduler.WithReplica("live"), scheduler.WithClock(clocktest.NewFake(t0)),
				schedseam.WithRescueEvery(50*time.Millisecond).(scheduler.Option), scheduler.WithMiddleware(led.observe()), scheduler.WithLogger(slog.New(held)))
			require.NoError(t, live.Add(job.Job{Name: "vanish", Spec: "@every 10m", Handler: func(context.Context) error { return nil }}))
			require.NoError(t, live.Start())
			// While a renews its lease, the rescuer sees its run in flight and leaves it alone.
			for range 5 {
				select {
				case <-held.seen:
				case <-time.After(waitLimit):
					t.Fatal("the rescuer did not look at a's run in flight")
				}
			}
			outcomes, _ := led.snapshot()
			require.Empty(t, outcomes, "a run whose lease is renewed is not interrupted")
			a.signal(t, sig)

			o := led.waitOutcome(t, "the run interrupted", func(o tickOutcome) bool { return o.Outcome == outcome.Interrupted })
			assert.Equal(t, "a", o.Replica)
			assert.True(t, o.Tick.Equal(started.Tick))
			assert.ErrorIs(t, o.Err, middleware.ErrInterrupted)
			if sig == syscall.SIGSTOP {
				a.signal(t, syscall.SIGCONT)
				waitLedger(t, ledger.Client(), "ledger", "a's run to end", func(r record) bool { return r.Replica == "a" })
				a.signal(t, syscall.SIGTERM)
				a.wait(t) // its own record (lease_lost) was offered before it exited
			}
			h, err := live.Control().History(ctxT(t), "vanish", 10)
			require.NoError(t, err)
			require.Len(t, h, 1, "one record of the attempt: %+v", h)
			r := h[0]
			assert.Equal(t, outcome.Interrupted, r.Outcome)
			assert.Equal(t, "a", r.Replica)
			assert.Equal(t, 1, r.Attempt)
			assert.Equal(t, started.Token, r.Token)
			assert.True(t, r.Tick.Equal(started.Tick))
			assert.Contains(t, r.Error, "replica a (pid ")
			assert.Contains(t, r.Error, "found by live")
			require.NoError(t, live.Stop(ctxT(t)))
			interrupted := 0
			for _, o := range led.outcomes {
				if o.Outcome == outcome.Interrupted {
					interrupted++
				}
			}
			assert.Equal(t, 1, interrupted, "counted once")
		})
	}
}

// messages is a slog handler that signals each record with the message msg.
type messages struct {
	msg  string
	seen chan struct{}
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	if r.Message == m.msg {
		select {
		case m.seen <- struct{}{}:
		default:
		}
	}
	return nil
}

// inFlightRun is a run in flight that a rescue test writes on the nodes.
type inFlightRun struct {
	job         string
	n           int    // its tick (a second apart) and token
	record      []int  // the nodes with its in-flight record
	lock        []int  // the nodes with its lock, held for it unless by is set
	by          string // the value of its lock: another attempt's
	done        bool   // its lock is kept as a done marker
	notHash     bool   // its lock key holds a string, not a lock
	interrupted bool   // the rescuer must record it interrupted
}

// put writes r on the nodes of c and returns its tick and the field of its record.
func (r inFlightRun) put(t *testing.T, c *cluster) (time.Time, string) {
	t.Helper()
	tick := time.UnixMilli(1700000000000 + int64(r.n)*1000)
	lock, value := layout.TickKey(middleware.DefaultPrefix, r.job, tick), fmt.Sprint("value-", r.n)
	field := putInFlight(t, c.nodes(r.record...), r.job, tick, uint64(r.n), "gone", lock, value)
	if r.by != "" {
		value = r.by
	}
	switch {
	case r.notHash:
		for _, n := range c.nodes(r.lock...) {
			require.NoError(t, n.Set(ctxT(t), lock, value, 0).Err())
		}
	case r.lock != nil:
		putLock(t, c.nodes(r.lock...), lock, value, r.done)
	}
	return tick, field
}

// The rescuer reads the runs in flight of many jobs a batch at a time (here 4 jobs, then 4
// locks, per script). Among runs in the middle of batches, it interrupts exactly those whose
// lock a quorum of the nodes says is not theirs — missing everywhere, held on one node only,
// taken by another attempt — at its second look that finds them, and leaves alone a run whose
// lock is missing on one node only, kept as done, held everywhere, or not a lock (a string), and
// the runs of a job it does not have; a job whose hash of runs in flight is not a hash has none,
// and the other jobs of its batch are read. A run whose record is on one node only is recorded
// interrupted there, but by fewer than a quorum of nodes, so its middleware does not see it.
func TestRescueInterruptsExactlyTheVanishedRunsAcrossBatches(t *testing.T) {
	scheduler.SetRescueBatch(t, 4)
	c := newCluster(t, 3, false)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithReplica("live"), scheduler.WithMiddleware(led.observe()))
	for i := range 11 { // batches j00–j03, j04–j07, j08–j10
		require.NoError(t, s.Add(job.Job{Name: fmt.Sprintf("j%02d", i), Spec: "@every 10m", Handler: func(context.Context) error { return nil }}))
	}
	all := []int{0, 1, 2}
	runs := []inFlightRun{
		{job: "j01", n: 1, record: all, lock: all},
		{job: "j02", n: 2, record: all, interrupted: true},
		{job: "j05", n: 5, record: all, lock: []int{1, 2}},
		{job: "j06", n: 6, record: all, lock: []int{0}, interrupted: true},
		{job: "j06", n: 16, record: all, lock: all},
		{job: "j07", n: 7, record: all, lock: all, done: true},
		{job: "j08", n: 8, record: all, lock: all, notHash: true},
		{job: "j09", n: 9, record: all, lock: all, by: "another attempt's", interrupted: true},
		{job: "j10", n: 10, record: []int{2}},
		{job: "unknown", n: 3, record: all},
	}
	want, fields := map[string]bool{}, make([]string, len(runs))
	for i, r := range runs {
		var tick time.Time
		if tick, fields[i] = r.put(t, c); r.interrupted {
			want[fmt.Sprint(r.job, " ", tick.UnixMilli())] = true
		}
	}

	for _, n := range c.nodes() {
		require.NoError(t, n.Set(ctxT(t), layout.RunningKey(middleware.DefaultPrefix, "j04"), "not a hash", 0).Err())
	}

	suspects := scheduler.Rescue(ctxT(t), s, nil)
	assert.Len(t, suspects, len(want)+1, "j02, j06, j09 and j10: %v", suspects)
	outcomes, _ := led.snapshot()
	require.Empty(t, outcomes, "a run found suspect once is not interrupted")
	scheduler.Rescue(ctxT(t), s, suspects)
	outcomes, _ = led.snapshot()
	got := map[string]bool{}
	for _, o := range outcomes {
		assert.Equal(t, outcome.Interrupted, o.Outcome)
		assert.Equal(t, "gone", o.Replica)
		got[fmt.Sprint(o.Job, " ", o.Tick.UnixMilli())] = true
	}
	assert.Equal(t, want, got)
	assert.Len(t, outcomes, len(want), "each once")

	for i, r := range runs {
		kept := 0
		for _, n := range c.nodes() {
			has, err := n.HExists(ctxT(t), layout.RunningKey(middleware.DefaultPrefix, r.job), fields[i]).Result()
			require.NoError(t, err)
			if has {
				kept++
			}
		}
		if r.interrupted || r.job == "j10" {
			assert.Zero(t, kept, "%s %s: the record is removed", r.job, fields[i])
		} else {
			assert.Equal(t, len(r.record), kept, "%s %s: the record is left", r.job, fields[i])
		}
	}
}

// A look of the rescuer sends each node one script per batch of jobs and one per batch of runs
// in flight: 13 jobs in batches of 4 and 6 runs, at most ⌈13/4⌉ + ⌈6/4⌉ = 6 scripts per node.
func TestRescueSendsOneScriptPerBatch(t *testing.T) {
	scheduler.SetRescueBatch(t, 4)
	c := newCluster(t, 3, false)
	counter := newRoundTrips(t)
	s := newScheduler(t, countedClient(t, c, counter))
	for i := range 13 {
		require.NoError(t, s.Add(job.Job{Name: fmt.Sprintf("j%02d", i), Spec: "@every 10m", Handler: func(context.Context) error { return nil }}))
	}
	all := []int{0, 1, 2}
	for _, r := range []inFlightRun{
		{job: "j00", n: 1, record: all, lock: all}, {job: "j03", n: 2, record: all}, {job: "j03", n: 3, record: all, lock: all},
		{job: "j07", n: 4, record: all}, {job: "j11", n: 5, record: all, lock: all}, {job: "j12", n: 6, record: all},
	} {
		r.put(t, c)
	}
	scheduler.Rescue(ctxT(t), s, nil) // loads the scripts on the nodes
	before := counter.snapshot()
	assert.Len(t, scheduler.Rescue(ctxT(t), s, nil), 3, "the look found the runs whose locks are gone")
	after := counter.snapshot()
	perNode := (after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]) / int64(len(c.Servers))
	assert.LessOrEqual(t, perNode, int64(4+2))
}

// Where the lock nodes are Redis Clusters, a script reads keys of one hash slot only: the
// rescuer batches the jobs of each slot apart (here five jobs of one slot, in batches of 4,
// beside jobs of other slots) and interrupts exactly the runs whose locks are gone.
func TestRescueOnClusterNodes(t *testing.T) {
	scheduler.SetRescueBatch(t, 4)
	clusters := redistest.StartClusters(t, 1, 3, redistest.Config{})
	lc, err := redlock.New(locktest.ClusterNodes(t, clusters...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	led := newLedger()
	s := newScheduler(t, lc, scheduler.WithReplica("live"), scheduler.WithMiddleware(led.observe()))
	slotOf := func(name string) int { return hashslot.Of(layout.RunningKey(middleware.DefaultPrefix, name)) }
	var mates, others []string // jobs of the slot of s0, and of other slots
	for n := 0; len(mates) < 5 || len(others) < 5; n++ {
		name := fmt.Sprint("s", n)
		if slotOf(name) == slotOf("s0") {
			mates = append(mates, name)
		} else if len(others) < 5 {
			others = append(others, name)
		}
	}
	for _, name := range append(slices.Clone(mates), others...) {
		require.NoError(t, s.Add(job.Job{Name: name, Spec: "@every 10m", Handler: func(context.Context) error { return nil }}))
	}
	node := []redis.Cmdable{clusters[0].Client()}
	want := map[string]bool{}
	for i, name := range []string{mates[1], mates[2], mates[4], others[1], others[2]} {
		tick := time.UnixMilli(1700000000000 + int64(i)*1000)
		lock, value := layout.TickKey(middleware.DefaultPrefix, name, tick), fmt.Sprint("value-", i)
		putInFlight(t, node, name, tick, uint64(i+1), "gone", lock, value)
		if i%2 == 0 {
			want[name] = true // its lock is gone
		} else {
			putLock(t, node, lock, value, false)
		}
	}

	suspects := scheduler.Rescue(ctxT(t), s, nil)
	assert.Len(t, suspects, len(want), "%v", suspects)
	scheduler.Rescue(ctxT(t), s, suspects)
	outcomes, _ := led.snapshot()
	got := map[string]bool{}
	for _, o := range outcomes {
		assert.Equal(t, outcome.Interrupted, o.Outcome)
		got[o.Job] = true
	}
	assert.Equal(t, want, got)
	assert.Len(t, outcomes, len(want), "each once")
}
