package redlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/redlock"
)

// splitVote plants other racers' partial locks of key on nodes 0–2 of a 5-node cluster, as a
// split vote leaves them: two replicas holding some nodes each, no one a quorum. The caller's
// attempt then takes nodes 3 and 4 only. The returned func removes the racers' locks, as their
// releases would.
func splitVote(t *testing.T, c *cluster, key string) (release func()) {
	t.Helper()
	ctx := ctxT(t)
	for i, label := range []string{"racer-a", "racer-a", "racer-b"} {
		require.NoError(t, c.servers[i].Client().HSet(ctx, key, "v", label+"-value", "l", label).Err())
	}
	return func() {
		for i := range 3 {
			require.NoError(t, c.servers[i].Client().Del(ctx, key).Err())
		}
	}
}

func TestResolveSplitsTriesAgainAfterASplitVote(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := t.Name()
	release := splitVote(t, c, key)
	var attempts []redlock.Attempt
	l, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.ResolveSplits(3), redlock.OnAttempt(func(a redlock.Attempt) {
		attempts = append(attempts, a)
		if len(attempts) == 1 {
			release() // the racers' failed attempts are released after the first round
		}
	}))
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Release(ctx)) }()
	require.Len(t, attempts, 2)
	assert.Equal(t, 3, attempts[0].Refused, "the racers' nodes refused the first attempt")
	assert.ErrorIs(t, attempts[0].Err, redlock.ErrNotAcquired)
	assert.NoError(t, attempts[1].Err)
}

func TestTryAcquireWithoutResolveSplitsMakesOneAttempt(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := t.Name()
	release := splitVote(t, c, key)
	attempts := 0
	_, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.OnAttempt(func(redlock.Attempt) {
		attempts++
		release()
	}))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Equal(t, 1, attempts)
}

func TestResolveSplitsTakesAHeldLockAsFinal(t *testing.T) {
	c := newCluster(t, 5, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := t.Name()
	holder, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("holder"))
	require.NoError(t, err)
	defer func() { require.NoError(t, holder.Release(ctx)) }()
	// The holder's acquisition returned at the quorum; its requests to the last nodes could
	// still land after the other's, which would then see a split vote, not a held lock.
	c.waitHeldEverywhere(t, key)
	var attempts []redlock.Attempt
	_, err = lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("other"), redlock.ResolveSplits(3),
		redlock.OnAttempt(func(a redlock.Attempt) { attempts = append(attempts, a) }))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// A parallel attempt decided by the first refusals cannot tell a held lock from a split
	// vote; the primary node's refusal, asked alone once the key is known contended, can.
	switch last := attempts[len(attempts)-1]; len(attempts) {
	case 1:
		assert.Equal(t, 5, last.Refused, "one attempt is final only when every node refused")
	case 2:
		assert.True(t, last.PrimaryFirst, "the attempt made again asked the primary node alone")
	default:
		t.Fatalf("%d attempts on a lock held on every node, want at most 2", len(attempts))
	}
}

func TestResolveSplitsStopsAtStartBefore(t *testing.T) {
	c := newCluster(t, 5, false)
	// A short constant backoff: attempts follow each other closely, so the window below holds
	// many of them however long the first one takes on a loaded machine.
	lc := c.client(t, redlock.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(5 * time.Millisecond) }))
	ctx := ctxT(t)
	key := t.Name()
	splitVote(t, c, key) // never released: every attempt is refused the same way
	attempts := 0
	// What is tested is that attempts go on until StartBefore and none starts after it, which
	// does not depend on the window's length; it is long enough for the first attempt and the
	// wait after it (each within the node timeout) on a loaded machine.
	before := time.Now().Add(time.Second)
	// AskEveryNode: every attempt asks every node, so every refusal may be a split vote and
	// only StartBefore ends the acquisition. (A contended attempt would ask the primary
	// node alone, and a refusal by one of the racers' nodes would be final.)
	_, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.ResolveSplits(1000), redlock.StartBefore(before), redlock.AskEveryNode(),
		redlock.OnAttempt(func(a redlock.Attempt) {
			attempts++
			assert.True(t, time.Now().Add(-a.Elapsed).Before(before), "attempt %d started after StartBefore", attempts)
		}))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Greater(t, attempts, 1, "the split vote was tried again until StartBefore")
}

func TestStartBeforeInThePastFailsAtOnce(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	attempts := 0
	hook := redlock.OnAttempt(func(redlock.Attempt) { attempts++ })
	past := redlock.StartBefore(time.Now().Add(-time.Millisecond))
	_, err := lc.TryAcquire(ctx, t.Name(), 10*time.Second, past, hook)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = lc.Acquire(ctx, t.Name(), 10*time.Second, past, hook)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Zero(t, attempts)
}

func TestAcquireGivesUpAtStartBefore(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := t.Name()
	holder, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	defer func() { require.NoError(t, holder.Release(ctx)) }()
	before := time.Now().Add(100 * time.Millisecond)
	var last time.Time
	_, err = lc.Acquire(ctx, key, 10*time.Second, redlock.StartBefore(before),
		redlock.OnAttempt(func(redlock.Attempt) { last = time.Now() }))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "ctx did not end: %v", err)
	assert.True(t, last.Before(before.Add(time.Second)), "an attempt ended long after StartBefore")
	assert.Contains(t, err.Error(), "StartBefore")
}

// A tick-style lock kept as done on a quorum, and missing on one node (its release reached
// the node before the acquisition): an attempt that takes that node and is refused by the
// done markers elsewhere is final — a done marker is left only by a holder that had a quorum
// — so ResolveSplits does not make it again.
func TestResolveSplitsTakesADoneMarkerAsFinal(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := t.Name()
	holder, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("holder"))
	require.NoError(t, err)
	require.NoError(t, holder.ReleaseKeepingDone(ctx, time.Minute))
	// Release returns at a quorum: until the last node has its done marker, it refuses as
	// held, a refusal that is not final.
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if s.Client().HGet(ctx, key, layout.FieldState).Val() != layout.StateDone {
				return false
			}
		}
		return true
	}, waitLimit, time.Millisecond, "the done marker reaches every node")
	require.NoError(t, c.servers[0].Client().Del(ctx, key).Err())
	var attempts []redlock.Attempt
	_, err = lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("other"), redlock.ResolveSplits(3),
		redlock.OnAttempt(func(a redlock.Attempt) { attempts = append(attempts, a) }))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Len(t, attempts, 1, "a refusal by done markers was tried again")
	var ae *redlock.AcquireError
	require.ErrorAs(t, err, &ae)
	require.NotNil(t, ae.Holder)
	assert.True(t, ae.Holder.Done)
}

// A release that missed the lock's primary node leaves the lock there until its TTL. Contended
// attempts ask the primary node alone first and take its refusal as final; with AskEveryNode
// the other nodes, a quorum, grant the lock.
func TestAskEveryNodeLooksPastALeftoverOnThePrimary(t *testing.T) {
	c := newCluster(t, 5, false)
	ctx := ctxT(t)
	key := t.Name()
	leave := func(nodes ...int) {
		for _, i := range nodes {
			require.NoError(t, c.servers[i].Client().HSet(ctx, key, "v", "gone-value", "l", "gone").Err())
		}
	}
	unleave := func() {
		for _, s := range c.servers {
			require.NoError(t, s.Client().Del(ctx, key).Err())
		}
	}
	try := func(lc *redlock.Client, opts ...redlock.AcquireOption) (redlock.Attempt, error) {
		var a redlock.Attempt
		l, err := lc.TryAcquire(ctx, key, 10*time.Second, append(opts, redlock.OnAttempt(func(at redlock.Attempt) { a = at }))...)
		if err == nil {
			require.NoError(t, l.Release(ctx))
			c.waitReleased(t, key, "gone-value")
		}
		return a, err
	}

	settled := c.settledClients(t)

	primaries := 0
	for i := range c.servers {
		// A client of its own for each node, whose key is contended (refused on every node)
		// and which has no release on its way to the primary node: either would make its
		// attempts ask every node at once. The refused attempt returns at a quorum of
		// refusals; its requests still in flight (and their releases) are awaited while the
		// lock is still left everywhere, or one landing after unleave would take the lock
		// there, and its release make the client ask every node. A node that
		// misses a short node timeout on a loaded machine counts as failed, as if the primary
		// had refused: the property does not depend on the timeout, so requests get time.
		lc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
		leave(0, 1, 2, 3, 4)
		_, err := try(lc)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		settled(lc)
		unleave()

		leave(i)
		a, err := try(lc)
		if err != nil {
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			assert.True(t, a.PrimaryFirst)
			assert.Equal(t, 1, a.Refused, "node %d, the primary, refused alone", i)
			primaries++
			a, err = try(lc, redlock.AskEveryNode())
			require.NoError(t, err, "AskEveryNode with the lock left on node %d", i)
			assert.False(t, a.PrimaryFirst)
		} else {
			assert.True(t, a.PrimaryFirst, "the key is contended")
		}
		unleave()
	}
	assert.Equal(t, 1, primaries, "the lock left on the primary node refused the contended attempts")
}

// Plain Acquire looks past a lock left on the primary node alone: its contended attempts ask
// the primary first and take its refusal as final, but after three refusals in a row by the
// same holder the next attempt asks every node.
func TestAcquireLooksPastALeftoverOnThePrimary(t *testing.T) {
	c := newCluster(t, 5, false)
	// Eight attempts at most, at once: without the sweep, all are refused by the primary.
	lc := c.client(t, redlock.WithBackOff(func() backoff.BackOff { return backoff.WithMaxRetries(&backoff.ZeroBackOff{}, 7) }))
	ctx := ctxT(t)
	key := t.Name()
	leave := func(nodes ...int) {
		for _, i := range nodes {
			require.NoError(t, c.servers[i].Client().HSet(ctx, key, "v", "gone-value", "l", "gone").Err())
		}
	}
	settled := c.settledClients(t)
	// Held on every node: refused, and the key is contended from now on.
	leave(0, 1, 2, 3, 4)
	_, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	settled(lc)
	for _, s := range c.servers {
		require.NoError(t, s.Client().Del(ctx, key).Err())
	}
	// The primary is the node whose leftover alone refuses a contended attempt.
	primary := -1
	for i := range c.servers {
		leave(i)
		var a redlock.Attempt
		l, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.OnAttempt(func(at redlock.Attempt) { a = at }))
		if err == nil {
			require.NoError(t, l.Release(ctx))
			c.waitReleased(t, key, "gone-value")
			settled(lc)
		} else if a.PrimaryFirst && a.Refused == 1 {
			primary = i
		}
		require.NoError(t, c.servers[i].Client().Del(ctx, key).Err())
	}
	require.GreaterOrEqual(t, primary, 0)
	leave(primary)
	var attempts []redlock.Attempt
	l, err := lc.Acquire(ctx, key, 10*time.Second, redlock.OnAttempt(func(a redlock.Attempt) { attempts = append(attempts, a) }))
	require.NoError(t, err, "attempts: %+v", attempts)
	require.NoError(t, l.Release(ctx))
	require.Len(t, attempts, 4)
	for _, a := range attempts[:3] {
		assert.True(t, a.PrimaryFirst)
		assert.Equal(t, 1, a.Refused, "the primary refused alone")
	}
	assert.False(t, attempts[3].PrimaryFirst, "the fourth attempt asks every node")
	assert.GreaterOrEqual(t, attempts[3].OK, attempts[3].Quorum)
}

// settledClients counts the scripts sent to the cluster's nodes and answered, and returns a
// func that waits until every one was answered and lc has no release on its way to a primary
// node (answers.settled).
func (c *cluster) settledClients(t *testing.T) func(lc *redlock.Client) {
	var a answers
	for _, n := range c.nodes {
		a.watch(n.(*redis.Client))
	}
	return func(lc *redlock.Client) {
		t.Helper()
		a.settled(t, lc)
	}
}

// answers counts the scripts sent to the node clients it watches, and those answered.
type answers struct{ sent, answered atomic.Int32 }

func (a *answers) watch(rc *redis.Client) {
	rc.AddHook(onTrip(func(cmds []redis.Cmder, send func() error) error {
		a.sent.Add(int32(len(cmds)))
		defer a.answered.Add(int32(len(cmds)))
		return send()
	}))
}

// settled waits until every script sent was answered and lc has no release on its way to a
// primary node. An attempt returns at a quorum: its requests to the other nodes, and the
// releases of a failed one, go on after it; a test that changes the nodes' keys next, or
// needs lc's next contended attempt to ask the primary node first, waits for them.
func (a *answers) settled(t *testing.T, lc *redlock.Client) {
	t.Helper()
	require.Eventually(t, func() bool { return a.answered.Load() == a.sent.Load() && !lc.Releasing() }, waitLimit, time.Millisecond,
		"requests answered (%d of %d sent), releases on their way to a primary node: %v", a.answered.Load(), a.sent.Load(), lc.Releasing())
}
