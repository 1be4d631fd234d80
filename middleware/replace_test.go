package middleware_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// Without a scheduler nobody listens to the announcement: the old run is stopped by its own
// lease, whose renewal is refused once the newer tick revoked the run key. The newer tick
// starts only after the old run returned and released; the old run's tick is done.
func TestLockReplaceStopsTheOldRunThroughItsLease(t *testing.T) {
	ns := startNodes(t, 3, false)
	cfg := middleware.LockConfig{Prefix: "p", Overlap: job.Replace, TTL: 3 * time.Second, RenewEvery: 300 * time.Millisecond}
	oldLock, newLock := middleware.Lock(ns.client(t), cfg), middleware.Lock(ns.client(t), cfg)

	var running atomic.Int32
	started := make(chan struct{})
	var oldCause error
	oldDone := make(chan error, 1)
	go func() {
		oldDone <- oldLock(func(ctx context.Context) error {
			running.Add(1)
			defer running.Add(-1)
			close(started)
			<-ctx.Done()
			oldCause = context.Cause(ctx)
			return ctx.Err()
		})(runAs("r1", "rep", time.Now().Add(time.Minute)))
	}()
	<-started

	second := job.NewContext(context.Background(), &job.Run{Job: "rep", Tick: tick.Add(5 * time.Second), Attempt: 1, Replica: "r2",
		Deadline: time.Now().Add(30 * time.Second)})
	ran := false
	err := newLock(func(ctx context.Context) error {
		ran = true
		assert.Zero(t, running.Load(), "the newer tick started while the old run was running")
		return nil
	})(second)
	require.NoError(t, err)
	require.True(t, ran)

	oerr := <-oldDone
	require.ErrorIs(t, oldCause, job.ErrReplaced, "the old run's context cause")
	require.ErrorIs(t, oerr, job.ErrReplaced)
	require.Equal(t, outcome.Replaced, middleware.Outcome(oerr))
	require.GreaterOrEqual(t, ns.count(t, layout.TickKey("p", "rep", tick)), 2, "the replaced tick is kept as done")
}

// A tick older than the run under way (a replica whose clock is behind) does not replace it:
// it is skipped, and the newer run goes on.
func TestLockReplaceNeverStopsANewerTick(t *testing.T) {
	ns := startNodes(t, 3, false)
	cfg := middleware.LockConfig{Prefix: "p", Overlap: job.Replace, TTL: 3 * time.Second, RenewEvery: 300 * time.Millisecond}
	newer := job.NewContext(context.Background(), &job.Run{Job: "rep", Tick: tick.Add(5 * time.Second), Attempt: 1, Replica: "r1",
		Deadline: time.Now().Add(time.Minute)})
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- middleware.Lock(ns.client(t), cfg)(func(ctx context.Context) error {
			close(started)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})(newer)
	}()
	<-started
	err := middleware.Lock(ns.client(t), cfg)(func(context.Context) error {
		t.Error("the older tick ran")
		return nil
	})(runAs("r2", "rep", time.Now().Add(time.Minute)))
	require.Equal(t, outcome.SkippedOverlap, middleware.Outcome(err), "%v", err)
	for _, srv := range ns.Servers { // no revoke.lua mark: the older tick would have set it before it returned
		revoked, err := srv.Client().HExists(context.Background(), layout.RunKey("p", "rep"), "x").Result()
		require.NoError(t, err)
		require.False(t, revoked, "the newer run's lock was revoked")
	}
	close(release)
	require.NoError(t, <-done, "the newer run was stopped")
}
