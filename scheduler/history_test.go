package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// The history has each run once (with replica, token, times, error), each paused tick once
// though every replica skipped it, reads the same with a node down, and Status sums it up.
func TestHistoryAndStatus(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := replicas(t, c, led, 3)
	ctx := ctxT(t)
	led.wait(t, "three runs", func() bool { return len(led.events) >= 3 })
	require.NoError(t, rs[0].Control().Pause(ctx, "ctl", "for the history"))
	paused := time.Now()
	checkPaused(t, led, 3, paused, "for the history")
	stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range rs {
		require.NoError(t, s.Stop(stop))
	}
	_, events := led.snapshot()

	h, err := rs[1].Control().History(ctx, "ctl", 100)
	require.NoError(t, err)
	ran := map[uint64]scheduler.Record{}
	pausedTicks := map[int64]int{}
	for _, r := range h {
		switch r.Outcome {
		case outcome.Ran:
			assert.NotContains(t, ran, r.Token, "run %v recorded once", r)
			ran[r.Token] = r
		case outcome.SkippedPaused:
			pausedTicks[r.Tick.UnixMilli()]++
		default:
			t.Errorf("unexpected record %+v", r)
		}
	}
	require.Len(t, ran, len(events), "every run is in the history")
	for _, e := range events {
		r, ok := ran[e.Token]
		require.True(t, ok, "run %v recorded", e)
		assert.Equal(t, e.Replica, r.Replica)
		assert.True(t, r.Tick.Equal(e.Tick))
		assert.WithinDuration(t, e.Start, r.Start, 50*time.Millisecond)
		assert.Empty(t, r.Error)
	}
	require.GreaterOrEqual(t, len(pausedTicks), 2)
	for tick, k := range pausedTicks {
		assert.Equal(t, 1, k, "paused tick %d recorded once, not once per replica", tick)
	}
	for i := 1; i < len(h); i++ {
		assert.False(t, h[i].Tick.After(h[i-1].Tick), "newest first")
	}

	// One node down: the same history, merged from the other two.
	require.NoError(t, c.Servers[0].Kill())
	h2, err := rs[2].Control().History(ctx, "ctl", 100)
	require.NoError(t, err)
	assert.Equal(t, runsOf(h), runsOf(h2))
	last, err := rs[2].Control().History(ctx, "ctl", 2)
	require.NoError(t, err)
	assert.Equal(t, runsOf(h[:2]), runsOf(last))

	st, err := rs[2].Control().Status(ctx, "ctl")
	require.NoError(t, err)
	require.NotNil(t, st.Paused)
	assert.Equal(t, "for the history", st.Paused.Reason)
	assert.Equal(t, "r0", st.Paused.By)
	require.NotNil(t, st.LastSuccess)
	assert.Equal(t, outcome.Ran, st.LastSuccess.Outcome)
	assert.Equal(t, st.LastRun, st.LastSuccess)
	newest := events[0]
	for _, e := range events {
		if e.Start.After(newest.Start) {
			newest = e
		}
	}
	assert.Equal(t, newest.Token, st.LastSuccess.Token)
	assert.False(t, st.Next.IsZero())
	assert.Equal(t, runsOf(h), runsOf(st.History), "the history Status read, with one node down")
}

// A run's record is written when the run ends, after the records of later ticks that ended
// first; the last n records are still the n newest ticks, not the n written last.
func TestHistoryLastRecordsAreTheNewestTicks(t *testing.T) {
	c := newCluster(t, 3, false)
	clock := clocktest.NewFake(t0)
	led := newLedger()
	s := newScheduler(t, c.client(t, false), scheduler.WithClock(clock), scheduler.WithMiddleware(led.observe()))
	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	require.NoError(t, s.Add(job.Job{Name: "slow", Spec: "@every 1m", Options: job.Options{Overlap: job.Allow},
		Handler: led.handler(func(ctx context.Context) error {
			if runs.Add(1) > 1 {
				return nil
			}
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	first := advance(t, clock, 1)
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the first tick did not start")
	}
	second := advance(t, clock, 1)
	led.waitOutcome(t, "the second tick ran", func(o tickOutcome) bool { return o.Tick.Equal(second) })
	close(release)
	led.waitOutcome(t, "the first tick ran", func(o tickOutcome) bool { return o.Tick.Equal(first) })
	require.Eventually(t, func() bool {
		h, err := s.Control().History(ctx, "slow", 10)
		return err == nil && len(h) == 2
	}, waitLimit, time.Millisecond, "both runs recorded")

	last, err := s.Control().History(ctx, "slow", 1)
	require.NoError(t, err)
	require.Len(t, last, 1)
	assert.True(t, last[0].Tick.Equal(second), "the newest tick %v, not the record written last (%v)", second, last[0].Tick)
}

// The history keeps at most its size on every node.
func TestHistoryIsCapped(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	rs := replicas(t, c, led, 2, scheduler.WithHistorySize(5))
	ctx := ctxT(t)
	led.wait(t, "ten runs", func() bool { return len(led.events) >= 10 })
	for _, s := range rs {
		require.NoError(t, s.Stop(ctx))
	}
	for _, s := range c.Servers {
		n, err := s.Client().XLen(ctx, layout.HistoryKey("cronlock", "ctl")).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(5), n, "records on %s", s.Addr())
	}
	h, err := rs[0].Control().History(ctx, "ctl", 100)
	require.NoError(t, err)
	assert.Len(t, h, 5)
	_, events := led.snapshot()
	var newest uint64
	for _, e := range events {
		newest = max(newest, e.Token)
	}
	assert.Equal(t, newest, h[0].Token, "the newest are kept")
}

// A failed manual run is in the history with its error and trigger id.
func TestHistoryRecordsFailedTrigger(t *testing.T) {
	c := newCluster(t, 3, false)
	s := newScheduler(t, c.client(t, false))
	require.NoError(t, s.Add(job.Job{Name: "j", Spec: onlyManual, Handler: func(context.Context) error { return fmt.Errorf("disk full") }}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	id, err := s.Control().Trigger(ctx, "j")
	require.NoError(t, err)
	var h []scheduler.Record
	require.Eventually(t, func() bool {
		h, err = s.Control().History(ctx, "j", 10)
		return err == nil && len(h) == 1
	}, waitLimit, 10*time.Millisecond)
	assert.Equal(t, id, h[0].Trigger)
	assert.Equal(t, outcome.Failed, h[0].Outcome)
	assert.Contains(t, h[0].Error, "disk full")
	assert.NotZero(t, h[0].Token)
	st, err := s.Control().Status(ctx, "j")
	require.NoError(t, err)
	assert.Nil(t, st.LastSuccess)
	assert.Nil(t, st.Paused)
	require.NotNil(t, st.LastRun)
	assert.Equal(t, id, st.LastRun.Trigger)
	_, err = s.Control().History(ctx, "j", 0)
	require.ErrorContains(t, err, "at least 1")
}

// runsOf returns what identifies each record: a paused tick's record may come from any of
// the replicas that skipped it, depending on the nodes read.
func runsOf(h []scheduler.Record) []string {
	var out []string
	for _, r := range h {
		id := fmt.Sprintf("%d %s %d", r.Tick.UnixMilli(), r.Outcome, r.Token)
		if r.Outcome == outcome.Ran {
			id += " " + r.Replica
		}
		out = append(out, id)
	}
	return out
}

// A run's output, kept with KeepOutput, is read back by HistoryWithOutput (its last MaxOutput
// bytes, from a whole character; the last call of a run counts), not by History; the outputs
// are capped like the records.
func TestHistoryKeepsOutput(t *testing.T) {
	c := newCluster(t, 3, false)
	long := "é" + strings.Repeat("a", scheddefault.MaxOutput-4) + "END" // one byte too many, cut inside é
	outputs := map[int]func(context.Context){
		1: func(ctx context.Context) { scheduler.KeepOutput(ctx, long) },
		2: func(context.Context) {},
		3: func(ctx context.Context) { scheduler.KeepOutput(ctx, "first"); scheduler.KeepOutput(ctx, "second\n") },
	}
	var n atomic.Int32
	s := newScheduler(t, c.client(t, false), scheduler.WithHistorySize(2))
	require.NoError(t, s.Add(job.Job{Name: "j", Spec: onlyManual, Handler: func(ctx context.Context) error {
		outputs[int(n.Add(1))](ctx)
		return nil
	}}))
	require.NoError(t, s.Start())
	ctx := ctxT(t)
	scheduler.KeepOutput(ctx, "outside a run: nothing happens")

	id, err := s.Control().Trigger(ctx, "j")
	require.NoError(t, err)
	h := waitHistory(t, s, "j", func(h []scheduler.Record) bool { return len(h) == 1 })
	assert.Equal(t, id, h[0].Trigger)
	assert.Empty(t, h[0].Output, "History leaves the outputs out")
	h, err = s.Control().HistoryWithOutput(ctx, "j", 10)
	require.NoError(t, err)
	require.Len(t, h, 1)
	assert.Equal(t, strings.Repeat("a", scheddefault.MaxOutput-4)+"END", h[0].Output, "the last bytes, from a whole character")

	for range 2 {
		_, err = s.Control().Trigger(ctx, "j")
		require.NoError(t, err)
	}
	waitHistory(t, s, "j", func(h []scheduler.Record) bool { return len(h) == 2 && h[0].Trigger != id && h[1].Trigger != id })
	h, err = s.Control().HistoryWithOutput(ctx, "j", 10)
	require.NoError(t, err)
	require.Len(t, h, 2)
	got := []string{h[0].Output, h[1].Output}
	assert.ElementsMatch(t, []string{"", "second\n"}, got, "a run that kept nothing, and the last call of a run")
	for _, srv := range c.Servers {
		assert.Equal(t, int64(1), srv.Client().XLen(ctx, layout.HistoryKey("cronlock", "j")+":output").Val(), "outputs capped with the records on %s", srv.Addr())
	}
}

// waitHistory polls the job's history until ok accepts it.
func waitHistory(t *testing.T, s *scheduler.Scheduler, name string, ok func([]scheduler.Record) bool) []scheduler.Record {
	t.Helper()
	var h []scheduler.Record
	require.Eventually(t, func() bool {
		var err error
		h, err = s.Control().History(context.Background(), name, 10)
		return err == nil && ok(h)
	}, waitLimit, 10*time.Millisecond, "the history of %s", name)
	return h
}

// Each attempt at a tick is its own record: a tick failing under Retries 1 on two replicas
// (each fires it in turn, then retries it) has two records, attempts 1 and 2, each with its
// own replica, token and error; the retries that found the attempts used up or the tick done
// did not run and are not recorded. Status counts the tick as one failure.
func TestHistoryRecordsEachAttempt(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	names := []string{"r1", "r2"}
	clocks := make([]*clocktest.Fake, len(names))
	var rs []*scheduler.Scheduler
	for i, name := range names {
		clocks[i] = clocktest.NewFake(t0)
		s := newScheduler(t, c.client(t, false), scheduler.WithClock(clocks[i]), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(job.Job{Name: "disk", Spec: "@every 1m",
			Options: job.Options{Retries: 1, RetryBackOff: func() backoff.BackOff { return backoff.NewConstantBackOff(time.Second) }},
			Handler: led.handler(func(ctx context.Context) error {
				run, _ := job.RunFrom(ctx)
				return fmt.Errorf("disk full on %s, attempt %d", run.Replica, run.Attempt)
			})}))
		require.NoError(t, s.Start())
		rs = append(rs, s)
	}
	var tick time.Time
	for i, clock := range clocks {
		tick = advance(t, clock, 1)
		led.wait(t, "the run of "+names[i], func() bool { return len(led.events) >= i+1 })
		require.NoError(t, clock.BlockUntil(ctxT(t), 2))
	}
	for i, clock := range clocks {
		advance(t, clock, 2)
		led.wait(t, "the outcome of "+names[i], func() bool { return len(led.outcomes) >= i+1 })
	}
	_, events := led.snapshot()
	require.Len(t, events, 2)

	h, err := rs[1].Control().History(ctxT(t), "disk", 10)
	require.NoError(t, err)
	require.Len(t, h, 2, "one record per attempt that ran, and nothing else: %+v", h)
	for i, r := range h {
		e := events[len(events)-1-i] // newest first
		assert.Equal(t, len(h)-i, r.Attempt)
		assert.True(t, r.Tick.Equal(tick))
		assert.Equal(t, outcome.Failed, r.Outcome)
		assert.Equal(t, e.Replica, r.Replica)
		assert.Equal(t, e.Token, r.Token)
		assert.WithinDuration(t, e.Start, r.Start, 50*time.Millisecond)
		assert.Equal(t, fmt.Sprintf("disk full on %s, attempt %d", e.Replica, r.Attempt), r.Error)
	}
	st, err := rs[0].Control().Status(ctxT(t), "disk")
	require.NoError(t, err)
	require.NotNil(t, st.LastRun)
	assert.Equal(t, 2, st.LastRun.Attempt, "the last attempt is the last run")
	assert.Nil(t, st.LastSuccess)
	assert.Equal(t, 1, st.Failures, "one tick failed, whatever its attempts")
}

// Status lists the runs in flight on any replica, read from the nodes (still with one node
// down), and no longer once they ended.
func TestStatusListsRunsInFlight(t *testing.T) {
	c := newCluster(t, 3, false)
	started, release := make(chan *job.Run, 1), make(chan struct{})
	runner := newScheduler(t, c.client(t, false), scheduler.WithReplica("runner"))
	require.NoError(t, runner.Add(job.Job{Name: "long", Spec: onlyManual, Handler: func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		started <- r
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}))
	require.NoError(t, runner.Start())
	// The reader has the job but never runs it: it is not started.
	readerLocks := c.client(t, false)
	reader := newScheduler(t, readerLocks, scheduler.WithReplica("reader"))
	require.NoError(t, reader.Add(job.Job{Name: "long", Spec: onlyManual, Handler: func(context.Context) error { return nil }}))
	ctl, err := scheduler.NewControl(readerLocks) // a control client over the same nodes
	require.NoError(t, err)
	ctx := ctxT(t)
	st, err := reader.Control().Status(ctx, "long")
	require.NoError(t, err)
	assert.Empty(t, st.Running, "nothing runs yet")

	id, err := runner.Control().Trigger(ctx, "long")
	require.NoError(t, err)
	var run *job.Run
	select {
	case run = <-started:
	case <-time.After(waitLimit):
		t.Fatal("the manual run did not start")
	}
	require.Eventually(t, func() bool { // its in-flight record is written as it starts
		st, err = reader.Control().Status(ctx, "long")
		return err == nil && len(st.Running) == 1
	}, waitLimit, 10*time.Millisecond)
	f := st.Running[0]
	assert.Equal(t, "runner", f.Replica)
	assert.Equal(t, id, f.Trigger)
	assert.Equal(t, 1, f.Attempt)
	assert.Equal(t, run.FencingToken, f.Token)
	assert.True(t, f.Tick.Equal(run.Tick.Truncate(time.Millisecond)), "tick %v, run's %v", f.Tick, run.Tick)
	assert.WithinDuration(t, time.Now(), f.Start, waitLimit)

	require.NoError(t, c.Servers[0].Kill())
	st, err = reader.Control().Status(ctx, "long")
	require.NoError(t, err)
	require.Len(t, st.Running, 1, "listed by the quorum left")
	assert.Equal(t, run.FencingToken, st.Running[0].Token)
	ctlSt, err := ctl.Status(ctx, "long")
	require.NoError(t, err)
	assert.Equal(t, st.Running, ctlSt.Running, "a control client lists the same")
	assert.Equal(t, scheduler.Entry{Name: "long"}, ctlSt.Entry, "a control client knows no entries")

	close(release)
	require.Eventually(t, func() bool {
		st, err = reader.Control().Status(ctx, "long")
		return err == nil && len(st.Running) == 0 && st.LastRun != nil
	}, waitLimit, 10*time.Millisecond)
	assert.Equal(t, run.FencingToken, st.LastRun.Token)
	ctlSt, err = ctl.Status(ctx, "long")
	require.NoError(t, err)
	assert.Empty(t, ctlSt.Running)
}
