package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

func TestNestedHoldsReleaseAtTheLast(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	other := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	outer, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	ctx1 := redlock.WithHold(ctx, outer)
	mid, err := lc.Acquire(ctx1, key, 10*time.Second)
	require.NoError(t, err)
	inner, err := lc.TryAcquire(redlock.WithHold(ctx1, mid), key, time.Second)
	require.NoError(t, err)
	for i, l := range []*redlock.Lock{outer, mid, inner} {
		assert.Equal(t, i, l.Depth())
		assert.Equal(t, outer.Token(), l.Token(), "nested holds share the fencing token")
		assert.Equal(t, outer.Value(), l.Value())
	}

	// Inner and middle releases leave the lock held; each Lock releases once.
	require.NoError(t, inner.Release(ctx))
	require.ErrorIs(t, inner.Release(ctx), redlock.ErrLockLost)
	require.NoError(t, mid.Release(ctx))
	_, err = other.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a nested release dropped the outer hold")

	require.NoError(t, outer.Release(ctx))
	// Release returns at the quorum: the primary node, which other now asks first (it saw the
	// key contended), may apply it a moment later, so other retries — for less than the
	// lock's TTL, or a lock that was never freed would be taken once it expired.
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l, err := other.Acquire(soon, key, time.Second)
	require.NoError(t, err, "the last release did not free the lock")
	require.NoError(t, l.Release(ctx))
}

// Holds are counted, not ordered: whichever release comes last frees the lock. The outer
// hold's release asks for a done marker while the nested hold is live: the last
// release — the nested one, which asks for nothing — leaves the marker the outer one asked for.
func TestOuterReleasedFirstKeepsNestedHold(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	outer, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	nested, err := lc.TryAcquire(redlock.WithHold(ctx, outer), key, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, outer.ReleaseKeepingDone(ctx, time.Minute))
	_, err = c.client(t).TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	require.NoError(t, nested.Release(ctx))
	require.NoError(t, lc.Close()) // waits for the releases
	_, err = c.client(t).TryAcquire(ctx, key, time.Second, redlock.AskEveryNode())
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok, "the lock was freed, not kept done: %v", err)
	require.NotNil(t, ae.Holder)
	assert.True(t, ae.Holder.Done)
}

// A job's lease context carries its lock: a helper that locks the same key inside the job
// nests instead of deadlocking, and the lease's renewal covers the nested hold.
func TestLeaseContextIsReentrantAndRenewsTheNest(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 300*time.Millisecond)
	require.NoError(t, err)
	onRenew, renewed := renewals()
	lease, err := l.Lease(ctx, onRenew)
	require.NoError(t, err)
	nested, err := lc.Acquire(lease.Context(), key, 300*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 1, nested.Depth())
	for range 4 { // more than a TTL
		require.NoError(t, (<-renewed).Err)
	}
	assert.True(t, time.Now().Before(nested.ValidUntil()))
	_, err = nested.Extend(ctx)
	require.NoError(t, err)
	require.NoError(t, nested.Release(ctx))
	_, err = c.client(t).TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, lease.Close(ctx))
}

// A context carrying a hold whose lock was lost — it expired and another client took the key
// — never reenters: the other holder's lock is not counted up.
func TestLostHoldIsNotReentered(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	other := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 400*time.Millisecond)
	require.NoError(t, err)
	taken, err := other.Acquire(ctx, key, 10*time.Second)
	require.NoError(t, err)

	_, err = lc.TryAcquire(redlock.WithHold(ctx, l), key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	for _, s := range c.servers {
		n, err := s.Client().HGet(ctx, key, "n").Result()
		if err == nil {
			assert.Equal(t, "0", n)
		}
	}
	// The other holder's single release frees the lock: no hold was added to it.
	require.NoError(t, taken.Release(ctx))
	// Retrying for less than taken's TTL: its release returns at the quorum, and the primary
	// node, asked first on a contended key, may apply it a moment later.
	soon, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	l2, err := lc.Acquire(soon, key, time.Second)
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
}

// A hold taken from another Client (another process, in effect) is never reentered.
func TestHoldOfAnotherClientIsNotReentrant(t *testing.T) {
	c := newCluster(t, 3, false)
	a, b := c.client(t), c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := a.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	_, err = b.TryAcquire(redlock.WithHold(ctx, l), key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Release(ctx))
}

func TestWakeOnReleaseHandsOffAtOnce(t *testing.T) {
	c := newCluster(t, 3, false)
	// A backoff so slow that only a wake-up can explain a quick hand-off.
	slow := func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) }
	// A node timeout of 2s: the subscription to the primary node must not fail on a slow
	// machine (the waiter would then listen elsewhere, and wait its minute).
	lc := c.client(t, redlock.WithBackOff(slow), redlock.WithNodeTimeout(2*time.Second))
	ctx := ctxT(t)
	key := redistest.Key(t)

	held, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	attempts := make(chan redlock.Attempt, 10)
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := lc.Acquire(ctx, key, 10*time.Second, redlock.WakeOnRelease(),
			redlock.OnAttempt(func(a redlock.Attempt) { attempts <- a }))
		assert.NoError(t, err)
		got <- l
	}()
	receive(t, attempts, "the first attempt, refused")
	receive(t, attempts, "the attempt after subscribing, refused")
	require.NoError(t, held.Release(ctx))
	l := receive(t, got, "the acquisition")
	require.NotNil(t, l)
	require.NoError(t, l.Release(ctx))
}

// receive returns the next value of ch, or fails the test if none comes within waitLimit: a
// wait that a broken acquisition would make endless (an attempt that never comes).
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("waited %v for %s", waitLimit, what)
	}
	var none T
	return none
}

// A release that no one waits for publishes nothing (a PUBLISH is written to the AOF and sent
// to replicas even when no one listens), even with a subscriber that was never refused; one
// that a subscribed waiter was refused by does, on the node that refused it.
func TestReleasePublishesOnlyToWaiters(t *testing.T) {
	c := newCluster(t, 3, false)
	// Node timeouts of 2s, for the holder as for the waiter below: on a loaded machine a
	// request that timed out is retried in the background, and the holder's release would
	// reach the nodes other than the primary later than the waiter waits for it.
	lc := c.client(t, redlock.WithNodeTimeout(2*time.Second))
	ctx := ctxT(t)
	publishes := func() int {
		total := 0
		for _, s := range c.servers {
			stats, err := s.Client().InfoMap(ctx, "commandstats").Result()
			require.NoError(t, err)
			var calls int
			if v, ok := stats["Commandstats"]["cmdstat_publish"]; ok {
				_, err := fmt.Sscanf(v, "calls=%d", &calls)
				require.NoError(t, err)
			}
			total += calls
		}
		return total
	}
	for range 10 {
		l, err := lc.TryAcquire(ctx, redistest.Key(t), 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.Zero(t, publishes(), "releases that no one waited for published")

	key := redistest.Key(t)
	held, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	sub := c.servers[0].Client().Subscribe(ctx, key+":released")
	defer func() { _ = sub.Close() }()
	_, err = sub.Receive(ctx) // the subscription's confirmation
	require.NoError(t, err)
	require.NoError(t, held.Release(ctx))
	require.Zero(t, publishes(), "a release that no waiter was refused by published")

	// A waiter refused once before it subscribed, then once after: only that refusal marks
	// the lock (on the primary node, asked alone once the lock is contended). The lock is on
	// every node before the waiter starts: a waiter that took a node from the holder's
	// acquisition still on its way there would find the primary node free and the lock on
	// the others, and wait for a release that no node it listens to announces.
	hooks := newHoldHooks(t, c)
	held, err = lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	for _, h := range hooks {
		receive(t, h.acquired, "the acquisition on each node")
	}
	slow := func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) }
	// The subscription to the primary node must not fail on a slow machine (the waiter would
	// then listen elsewhere, and wait its minute); the woken attempt waits up to its node
	// timeout for held's release to reach the other nodes.
	waiter := c.client(t, redlock.WithBackOff(slow), redlock.WithNodeTimeout(2*time.Second))
	attempts := make(chan redlock.Attempt, 10)
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, 10*time.Second, redlock.WakeOnRelease(),
			redlock.OnAttempt(func(a redlock.Attempt) { attempts <- a }))
		assert.NoError(t, err)
		got <- l
	}()
	receive(t, attempts, "the first attempt, refused")
	receive(t, attempts, "the attempt after subscribing, refused")
	require.NoError(t, held.Release(ctx))
	l := receive(t, got, "the acquisition")
	require.NotNil(t, l)
	require.NoError(t, l.Release(ctx))
	// The release the waiter was refused by publishes. The woken attempt may also be refused
	// by a node where held's release, returned at a quorum, is still on its way: that refusal
	// marks the node too, and the release landing there publishes once more (a hint that
	// wakes no one). At most once per node.
	n := publishes()
	require.GreaterOrEqual(t, n, 1, "the release the waiter was refused by")
	require.LessOrEqual(t, n, len(c.servers), "at most one publish per node for the waiter's refusals")
}

// scriptOnly hides a node's Subscribe: a node that cannot deliver release notifications.
type scriptOnly struct{ redis.Scripter }

// Nodes that drop notifications do not break the waiter: with one node of three notifying, a
// release still wakes it; with none, the backoff alone brings it the lock.
func TestWakeOnReleaseWithSilentNodes(t *testing.T) {
	c := newCluster(t, 3, false)
	for _, notifying := range []int{1, 0} {
		t.Run(fmt.Sprintf("%d notifying", notifying), func(t *testing.T) {
			nodes := make([]redlock.Node, len(c.nodes))
			for i, n := range c.nodes {
				if i < notifying {
					nodes[i] = n
				} else {
					nodes[i] = scriptOnly{n}
				}
			}
			lc, err := redlock.New(nodes, redlock.WithoutQuarantine(),
				redlock.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(20 * time.Millisecond) }))
			require.NoError(t, err)
			defer lc.Close()
			ctx := ctxT(t)
			key := redistest.Key(t)

			held, err := lc.TryAcquire(ctx, key, 10*time.Second)
			require.NoError(t, err)
			attempts := make(chan redlock.Attempt, 1000)
			got := make(chan *redlock.Lock, 1)
			go func() {
				l, err := lc.Acquire(ctx, key, 10*time.Second, redlock.WakeOnRelease(),
					redlock.OnAttempt(func(a redlock.Attempt) { attempts <- a }))
				assert.NoError(t, err)
				got <- l
			}()
			<-attempts
			<-attempts
			require.NoError(t, held.Release(ctx))
			l := <-got
			require.NotNil(t, l)
			assert.Greater(t, l.Token(), held.Token())
			require.NoError(t, l.Release(ctx))
		})
	}
}

// WithHold of a nil lock adds no hold: acquisitions with the context acquire as with ctx.
func TestWithHoldOfNilLockIsCtx(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	held := redlock.WithHold(ctx, nil)
	require.Equal(t, ctx, held)
	l, err := lc.TryAcquire(held, key, 10*time.Second)
	require.NoError(t, err)
	assert.Zero(t, l.Depth())
	_, err = lc.TryAcquire(held, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Release(ctx))
}
