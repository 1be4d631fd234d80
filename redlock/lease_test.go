package redlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// renewals returns a lease option that reports each renewal on a channel.
func renewals() (redlock.LeaseOption, <-chan redlock.Renewal) {
	ch := make(chan redlock.Renewal, 100)
	return redlock.OnRenew(func(r redlock.Renewal) {
		select {
		case ch <- r:
		default:
		}
	}), ch
}

func TestLeaseKeepsLockPastTTL(t *testing.T) {
	c := newCluster(t, 3, false)
	// A TTL of 1.5s, renewed every 500ms, and a node timeout of 500ms: the property does not
	// depend on short times, and a 300ms TTL with a 200ms node timeout failed an acquisition
	// and a renewal beside a CPU hog (nodes answering too late).
	lc := c.client(t, redlock.WithNodeTimeout(500*time.Millisecond))
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 1500*time.Millisecond)
	require.NoError(t, err)
	onRenew, renewed := renewals()
	lease, err := l.Lease(ctx, onRenew)
	require.NoError(t, err)
	// Five renewals is five TTL/3 periods: more than one TTL.
	for range 5 {
		r := <-renewed
		require.NoError(t, r.Err)
		assert.Greater(t, r.Validity, time.Duration(0))
	}
	require.NoError(t, lease.Err())
	require.NoError(t, lease.Context().Err())
	dl, ok := lease.Context().Deadline()
	assert.True(t, ok)
	assert.Equal(t, l.ValidUntil(), dl)

	_, err = lc.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	require.NoError(t, lease.Close(ctx))
	require.ErrorIs(t, context.Cause(lease.Context()), redlock.ErrLeaseClosed)
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseClosed)
	l2, err := lc.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err, "Close did not release")
	require.NoError(t, l2.Release(ctx))
}

// When every node vanishes (blackholed by the proxies), renewals fail and the lease's context
// is cancelled with ErrLeaseLost while the lock still exists on the nodes — before anyone else
// could take it.
func TestLeaseLostBeforeExpiryWhenNodesVanish(t *testing.T) {
	c := newCluster(t, 3, true)
	// A wide drift allowance makes the margin between the lease's end and the keys' expiry
	// large enough to observe: 20% of 2s.
	lc := c.client(t, redlock.WithDriftFactor(0.2), redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := ctxT(t)
	key := redistest.Key(t)

	// Acquire, not TryAcquire, and the first renewal that succeeded: beside a CPU hog a
	// request can miss the 100ms node timeout (seen: the acquisition refused for two i/o
	// timeouts), which is not what this test is about.
	l, err := lc.Acquire(ctx, key, 2*time.Second)
	require.NoError(t, err)
	onRenew, renewed := renewals()
	lease, err := l.Lease(ctx, onRenew)
	require.NoError(t, err)
	for ok := false; !ok; {
		select {
		case r := <-renewed:
			ok = r.Err == nil
		case <-lease.Context().Done():
			t.Fatalf("the lease was lost before a renewal succeeded: %v", lease.Err())
		}
	}
	for _, p := range c.proxies {
		p.Blackhole(true)
	}
	<-lease.Context().Done()
	lost := time.Now()
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseLost)
	require.ErrorIs(t, context.Cause(lease.Context()), redlock.ErrLeaseLost)
	assert.False(t, lost.Before(l.ValidUntil()), "cancelled before the validity ended")

	// Behind the proxies, the lock is still on a quorum of nodes (the last renewal may have
	// reached only a quorum): nobody could have taken it yet.
	held := 0
	for _, s := range c.servers {
		pttl, err := s.Client().PTTL(ctx, key).Result()
		require.NoError(t, err)
		if pttl > 0 {
			held++
		}
	}
	assert.GreaterOrEqual(t, held, lc.Quorum(), "the lock expired on a quorum before the lease ended")
	var failed int
	for len(renewed) > 0 {
		if (<-renewed).Err != nil {
			failed++
		}
	}
	assert.Positive(t, failed)
	for _, p := range c.proxies {
		p.Blackhole(false)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = lease.Close(cctx)
}

func TestLeaseLostWhenLockTakenOver(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctx, key, 3*time.Second)
	require.NoError(t, err)
	lease, err := l.Lease(ctx, redlock.RenewEvery(50*time.Millisecond))
	require.NoError(t, err)
	defer lease.Close(ctx)
	// Someone deletes the lock behind our back: the next renewal finds it gone.
	for _, s := range c.servers {
		require.NoError(t, s.Client().Del(ctx, key).Err())
	}
	<-lease.Context().Done()
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseLost)
	require.ErrorIs(t, lease.Err(), redlock.ErrLockLost)
}

func TestLeaseMaxHold(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)

	// MaxHold counts from the acquisition, which starts after this.
	start := time.Now()
	l, err := lc.TryAcquire(ctx, redistest.Key(t), time.Second)
	require.NoError(t, err)
	lease, err := l.Lease(ctx, redlock.MaxHold(400*time.Millisecond), redlock.RenewEvery(100*time.Millisecond))
	require.NoError(t, err)
	<-lease.Context().Done()
	assert.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseLost)
	assert.Contains(t, lease.Err().Error(), "max hold")
	require.NoError(t, lease.Close(ctx))
}

// After a pause (here: the lease's clock simply passing its deadline while renewals are
// blocked), Err reports the loss at once, even before Done is closed.
func TestLeaseContextErrChecksTheClock(t *testing.T) {
	c := newCluster(t, 3, true)
	lc := c.client(t, redlock.WithNodeTimeout(50*time.Millisecond))
	ctx := ctxT(t)

	l, err := lc.TryAcquire(ctx, redistest.Key(t), 600*time.Millisecond)
	require.NoError(t, err)
	lease, err := l.Lease(ctx, redlock.RenewEvery(500*time.Millisecond))
	require.NoError(t, err)
	defer lease.Close(context.Background())
	for _, p := range c.proxies {
		p.Blackhole(true)
	}
	deadline, _ := lease.Context().Deadline()
	time.Sleep(time.Until(deadline)) // the one sleep: standing in for a paused process
	err = lease.Context().Err()
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, context.Cause(lease.Context()), redlock.ErrLeaseLost)
	for _, p := range c.proxies {
		p.Blackhole(false)
	}
}

func TestLeaseParentCancelled(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	key := redistest.Key(t)

	l, err := lc.TryAcquire(ctxT(t), key, time.Second)
	require.NoError(t, err)
	errStop := errors.New("stop")
	parent, cancel := context.WithCancelCause(ctxT(t))
	lease, err := l.Lease(parent)
	require.NoError(t, err)
	cancel(errStop)
	<-lease.Context().Done()
	require.ErrorIs(t, lease.Err(), errStop)
	require.NoError(t, lease.Close(ctxT(t)))
}

func TestLeaseBadOptions(t *testing.T) {
	c := newCluster(t, 1, false)
	lc := c.client(t)
	ctx := ctxT(t)
	l, err := lc.TryAcquire(ctx, redistest.Key(t), time.Second)
	require.NoError(t, err)
	defer l.Release(ctx)
	for _, tc := range []struct {
		opt  redlock.LeaseOption
		want string
	}{
		{redlock.RenewEvery(time.Second), "RenewEvery 1s must be shorter than the TTL 1s"},
		{redlock.RenewEvery(0), "RenewEvery 0s: must be positive"},
		{redlock.MaxHold(-1), "MaxHold -1ns: must not be negative"},
	} {
		_, err := l.Lease(ctx, tc.opt)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

type derivedKey struct{}

// LeaseFrom finds the lease under a context derived from its own, and the lease's Deadline is
// the lock's validity (or MaxHold) even where a timeout shortens the derived context's.
func TestLeaseFromDerivedContext(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)

	_, ok := redlock.LeaseFrom(ctx)
	assert.False(t, ok, "no lease under a plain context")
	l, err := lc.TryAcquire(ctx, redistest.Key(t), 10*time.Second)
	require.NoError(t, err)
	lease, err := l.Lease(ctx, redlock.MaxHold(5*time.Second))
	require.NoError(t, err)
	defer func() { require.NoError(t, lease.Close(ctx)) }()
	short, cancel := context.WithTimeout(context.WithValue(lease.Context(), derivedKey{}, 1), time.Millisecond)
	defer cancel()
	got, ok := redlock.LeaseFrom(short)
	require.True(t, ok)
	assert.Same(t, lease, got)
	assert.True(t, got.Deadline().Before(l.ValidUntil()), "MaxHold comes before the validity")
	assert.False(t, got.Deadline().After(time.Now().Add(5*time.Second)))
	dl, _ := short.Deadline()
	assert.True(t, dl.Before(got.Deadline()))
}

// A lease keeps a lock that is ours: one released (by Release, or by closing a lease on it) or
// kept by a lease already is refused at once with ErrLockLost, not discovered at the first
// renewal.
func TestLeaseRefusesReleasedOrLeasedLock(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	other := c.client(t)
	ctx := ctxT(t)

	t.Run("released", func(t *testing.T) {
		key := redistest.Key(t)
		l, err := lc.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		taken, err := other.Acquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		defer func() { require.NoError(t, taken.Release(ctx)) }()
		lease, err := l.Lease(ctx)
		require.ErrorIs(t, err, redlock.ErrLockLost)
		assert.Contains(t, err.Error(), "was released")
		assert.Nil(t, lease)
	})
	t.Run("leased, then closed", func(t *testing.T) {
		l, err := lc.TryAcquire(ctx, redistest.Key(t), 10*time.Second)
		require.NoError(t, err)
		first, err := l.Lease(ctx)
		require.NoError(t, err)
		_, err = l.Lease(ctx)
		require.ErrorIs(t, err, redlock.ErrLockLost)
		assert.Contains(t, err.Error(), "another lease")
		require.NoError(t, first.Err(), "the refusal ended the first lease")
		require.NoError(t, first.Close(ctx))
		_, err = l.Lease(ctx)
		require.ErrorIs(t, err, redlock.ErrLockLost)
	})
}

// When every node fails at once (connections reset, new ones refused), a lease does not spin
// in its last moments: its failed renewals are at least a node timeout apart, so from the
// first failure to the end of the validity there are at most TTL/NodeTimeout + 1 of them.
func TestLeaseRetriesNoFasterThanNodeTimeout(t *testing.T) {
	c := newCluster(t, 3, true)
	const ttl, nodeTimeout = time.Second, 250 * time.Millisecond
	lc := c.client(t, redlock.WithNodeTimeout(nodeTimeout))
	ctx := ctxT(t)

	l, err := lc.TryAcquire(ctx, redistest.Key(t), ttl)
	require.NoError(t, err)
	onRenew, renewed := renewals()
	lease, err := l.Lease(ctx, onRenew)
	require.NoError(t, err)
	require.NoError(t, (<-renewed).Err)
	for _, p := range c.proxies {
		p.RefuseNew(true)
		p.ResetAll()
	}
	<-lease.Context().Done()
	require.ErrorIs(t, lease.Err(), redlock.ErrLeaseLost)
	_ = lease.Close(ctx) // waits for the lease's goroutine (no more renewals); the nodes refuse the release
	failed := 0
	for len(renewed) > 0 {
		if (<-renewed).Err != nil {
			failed++
		}
	}
	assert.Positive(t, failed)
	assert.LessOrEqual(t, failed, int(ttl/nodeTimeout)+1, "renewal attempts closer than the node timeout")
}
