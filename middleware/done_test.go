package middleware_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// noWait retries at once.
func noWait() backoff.BackOff { return &backoff.ZeroBackOff{} }

// doneOn returns the nodes on which key is a done marker, and the values it holds elsewhere.
func (ns *nodes) doneOn(t *testing.T, key string) (done int, others []string) {
	t.Helper()
	for _, s := range ns.Servers {
		h, err := s.Client().HGetAll(context.Background(), key).Result()
		require.NoError(t, err)
		switch {
		case h["s"] == "done":
			done++
		case h["v"] != "":
			others = append(others, h["v"])
		}
	}
	return done, others
}

// heldEverywhere waits until every node holds key with value: an acquisition returns at the
// quorum, and its requests to the last nodes may land later.
func (ns *nodes) heldEverywhere(t *testing.T, key, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range ns.Servers {
			if v, err := s.Client().HGet(context.Background(), key, "v").Result(); err != nil || v != value {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "%s held by %s on every node", key, value)
}

// expire deletes keys on every node, as their TTL running out would.
func (ns *nodes) expire(t *testing.T, keys ...string) {
	t.Helper()
	for _, s := range ns.Servers {
		require.NoError(t, s.Client().Del(context.Background(), keys...).Err())
	}
}

// A handler that returned nil succeeded, even after its lease was lost: it is not tried
// again, its outcome is ran with a warning, and the tick is marked done on the nodes where
// the lock had expired.
func TestLockASucceededRunIsDoneAfterItsLeaseWasLost(t *testing.T) {
	ns := startNodes(t, 3, false)
	lc := ns.client(t)
	logs := &records{}
	lock := middleware.Lock(lc, middleware.LockConfig{Prefix: "p", TTL: 3 * time.Second, RenewEvery: 20 * time.Millisecond, Logger: slog.New(logs)})
	tickKey := layout.TickKey("p", "lost-ok", tick)
	calls := 0
	h := middleware.Retry(middleware.RetryPolicy{Retries: 2, BackOff: noWait})(lock(func(ctx context.Context) error {
		calls++
		ns.expire(t, tickKey, layout.RunKey("p", "lost-ok")) // the lock expires while the work goes on (a pause, a slow node)
		<-ctx.Done()                                         // the next renewal finds it lost
		require.ErrorIs(t, context.Cause(ctx), redlock.ErrLeaseLost)
		return nil // and the work completes
	}))
	err := h(runAs("r1", "lost-ok", time.Time{}))
	require.NoError(t, err)
	assert.Equal(t, outcome.Ran, middleware.Outcome(err))
	assert.Equal(t, 1, calls, "a run that succeeded is never tried again")
	done, others := ns.doneOn(t, tickKey)
	assert.Equal(t, 3, done, "the tick is marked done where its lock had expired")
	assert.Empty(t, others)
	assert.Len(t, logs.matching("cronlock: tick ran past its lock"), 1)
}

// A run that succeeded after another holder took its tick leaves that holder's lock alone,
// and reports it as a detected duplicate: a Warn log line and an event on the tick's span.
func TestLockASucceededRunReportsANewerHolder(t *testing.T) {
	ns := startNodes(t, 3, false)
	// other's acquisition must reach every node (heldEverywhere): a node timeout that a loaded
	// machine cannot miss, or its request to the last node may fail and never land.
	lc, other := ns.client(t), ns.client(t, redlock.WithNodeTimeout(5*time.Second))
	tm := newTelemetry(t)
	logs := &records{}
	lock := middleware.Lock(lc, middleware.LockConfig{Prefix: "p", TTL: 3 * time.Second, RenewEvery: 20 * time.Millisecond, Logger: slog.New(logs)})
	tickKey := layout.TickKey("p", "dup", tick)
	var second *redlock.Lock
	calls := 0
	h := middleware.Retry(middleware.RetryPolicy{Retries: 2, BackOff: noWait})(tm.wrap(lock)(func(ctx context.Context) error {
		calls++
		ns.expire(t, tickKey, layout.RunKey("p", "dup"))
		var err error // another replica takes the tick, as the scheduler's Lock does
		second, err = other.TryAcquire(context.Background(), tickKey, 10*time.Second, redlock.Label("r2"))
		require.NoError(t, err)
		ns.heldEverywhere(t, tickKey, second.Value()) // else this run's marker may reach a node first
		<-ctx.Done()
		return nil
	}))
	err := h(runAs("r1", "dup", time.Time{}))
	require.NoError(t, err)
	assert.Equal(t, 1, calls)
	done, others := ns.doneOn(t, tickKey)
	assert.Zero(t, done, "a marker never covers a newer holder's run")
	assert.Equal(t, []string{second.Value(), second.Value(), second.Value()}, others)
	dups := logs.matching("cronlock: duplicate run detected")
	require.NotEmpty(t, dups)
	s := tm.tickOf(t, "r1")
	assert.Equal(t, "ran", attr(s.Attributes(), "cronlock.outcome").AsString())
	ev := events(s, "cronlock.duplicate.detected")
	require.Len(t, ev, len(dups))
	assert.Equal(t, "r2", attr(ev[0].Attributes, "cronlock.holder").AsString())
	assert.Greater(t, uint64(attr(ev[0].Attributes, "cronlock.fencing_token").AsInt64()), uint64(0))
}

// A run that succeeded while its replica was cut off from the nodes keeps trying to mark its
// tick done while its lock could still be held: once the nodes answer again, the tick is done
// on every node, and no other replica runs it again when the lock would have expired.
func TestLockASucceededRunMarksItsTickDoneOnceTheNodesAnswer(t *testing.T) {
	ns := startNodes(t, 3, true)
	lc := ns.client(t, redlock.WithNodeTimeout(100*time.Millisecond))
	logs := &records{}
	lock := middleware.Lock(lc, middleware.LockConfig{Prefix: "p", TTL: 10 * time.Second, Logger: slog.New(logs)})
	tickKey := layout.TickKey("p", "cut-off", tick)
	cut := func(on bool) {
		for _, p := range ns.Proxies {
			p.Blackhole(on)
		}
	}
	var heal *time.Timer
	err := lock(func(context.Context) error {
		cut(true)                                                 // the replica loses the nodes as its work ends
		heal = time.AfterFunc(time.Second, func() { cut(false) }) // and finds them again a second later
		return nil
	})(runAs("r1", "cut-off", time.Time{}))
	require.NoError(t, err)
	t.Cleanup(func() { heal.Stop() })
	done, others := ns.doneOn(t, tickKey)
	assert.Equal(t, 3, done, "nodes where the tick is done")
	assert.Empty(t, others)
}
