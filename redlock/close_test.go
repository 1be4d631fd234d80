package redlock_test

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// bound is how long a test waits for a call that must not wait for a blackholed node, whose
// client waits a minute (locktest.SlowNode): not a timing assertion, the calls return much sooner.
const bound = 10 * time.Second

// blackholedNodes returns two real nodes and a blackholed one at index hole, the servers, and
// the blackhole's accepted connections (see blackhole).
func blackholedNodes(t *testing.T, hole int) ([]redlock.Node, []*redistest.Server, <-chan struct{}) {
	servers := redistest.StartN(t, 2, redistest.Config{})
	var nodes []redlock.Node
	for _, s := range servers {
		nodes = append(nodes, locktest.SlowNode(t, s.Addr()))
	}
	addr, accepted := locktest.Blackhole(t)
	nodes = append(nodes[:hole], append([]redlock.Node{locktest.SlowNode(t, addr)}, nodes[hole:]...)...)
	return nodes, servers, accepted
}

// newClient returns a client over nodes with a 1s node timeout, quarantine off (the nodes are
// new), closed at cleanup. The tests' bounds do not depend on the node timeout: a shorter one
// (it was 100ms) failed a release beside a CPU hog, the real nodes answering too late.
func newClient(t *testing.T, nodes []redlock.Node, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	lc, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithoutQuarantine()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// within runs f and fails the test if it does not return within bound.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("%s waited for the blackholed node", what)
	}
}

// Close does not wait for a node that never answers longer than the Client's own bounds: the
// requests that failed on it asked for a connection in the background, whose handshake go-redis
// would wait for until its minute-long dial timeout, whatever the context's cancellation.
func TestCloseIsBoundedWithABlackholedNode(t *testing.T) {
	nodes, _, accepted := blackholedNodes(t, 0)
	ignore := goleak.IgnoreCurrent()
	lc := newClient(t, nodes)
	ctx := ctxT(t)
	l, err := lc.TryAcquire(ctx, redistest.Key(t), 10*time.Second)
	require.NoError(t, err, "two of three nodes answer")
	require.NoError(t, l.Release(ctx))
	for range 3 { // the acquisition's and the release's, then at least one in the background
		select {
		case <-accepted:
		case <-time.After(bound):
			t.Fatal("no background connection")
		}
	}
	within(t, "Close", func() { require.NoError(t, lc.Close()) })
	goleak.VerifyNone(t, ignore)
}

// Subscribe is bounded by its context: it returns with the subscriptions confirmed by then,
// without waiting for a node that never answers.
func TestSubscribeIsBoundedByItsContext(t *testing.T) {
	nodes, servers, _ := blackholedNodes(t, 1)
	ignore := goleak.IgnoreCurrent()
	lc := newClient(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	channel := redistest.Key(t)
	var n *redlock.Notifications
	within(t, "Subscribe", func() { n = lc.Subscribe(ctx, channel) })
	require.NotNil(t, n, "the two real nodes confirmed")
	require.NoError(t, servers[0].Client().Publish(context.Background(), channel, "hi").Err())
	select {
	case <-n.C():
	case <-time.After(bound):
		t.Fatal("no notification")
	}
	n.Close()
	within(t, "Close", func() { require.NoError(t, lc.Close()) })
	goleak.VerifyNone(t, ignore)
}

// primaryOf mirrors the Client's choice of a key's primary node (FNV-1a of the key, which has
// no hash tag, modulo the nodes).
func primaryOf(key string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// With WakeOnRelease, an acquisition whose key's primary node never answers listens on the
// other nodes: the release wakes it, instead of its minute-long backoff step. Then both
// clients close without waiting for the blackholed node.
func TestWakeOnReleaseWithABlackholedPrimary(t *testing.T) {
	nodes, _, _ := blackholedNodes(t, 0)
	key := redistest.Key(t)
	for i := 0; primaryOf(key, 3) != 0; i++ {
		key = redistest.Key(t)
	}
	holder := newClient(t, nodes)
	ctx := ctxT(t)
	l, err := holder.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	waiter := newClient(t, nodes, redlock.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) }))
	second := make(chan struct{})
	var attempts int
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Acquire(ctx, key, 10*time.Second, redlock.WakeOnRelease(), redlock.OnAttempt(func(redlock.Attempt) {
			if attempts++; attempts == 2 { // the attempt made once subscribed
				close(second)
			}
		}))
		if err == nil {
			err = wl.Release(ctx)
		}
		got <- err
	}()
	select {
	case <-second:
	case <-time.After(bound):
		t.Fatal("the acquisition did not subscribe")
	}
	require.NoError(t, l.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(bound):
		t.Fatal("the release did not wake the acquisition")
	}
	// The requests that failed on the blackholed node asked for connections in the
	// background: Close does not wait for their handshakes past its own bound.
	within(t, "Close", func() {
		require.NoError(t, waiter.Close())
		require.NoError(t, holder.Close())
	})
}

// Close wakes the Acquire calls that wait in their backoff.
func TestCloseWakesAcquire(t *testing.T) {
	c := newCluster(t, 3, false)
	holder := c.client(t)
	waiter := c.client(t, redlock.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) }))
	ctx := ctxT(t)
	key := redistest.Key(t)
	l, err := holder.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	tried := make(chan struct{})
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, key, 10*time.Second, redlock.OnAttempt(func(redlock.Attempt) { close(tried) }))
		got <- err
	}()
	<-tried
	require.NoError(t, waiter.Close())
	select {
	case err := <-got:
		require.ErrorIs(t, err, redlock.ErrClientClosed)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "the last attempt's error is kept")
	case <-time.After(bound):
		t.Fatal("Close did not wake the waiting Acquire")
	}
	require.NoError(t, l.Release(ctx))
}

// Close ends every lease of the Client: its renewal stops, its context is cancelled with cause
// ErrClientClosed, its lock is released; Lease.Close afterwards returns nil.
func TestCloseEndsLeases(t *testing.T) {
	c := newCluster(t, 3, false)
	ignore := goleak.IgnoreCurrent()
	lc := c.client(t)
	ctx := ctxT(t)
	key := redistest.Key(t)
	var leases []*redlock.Lease
	for i := range 3 {
		l, err := lc.TryAcquire(ctx, key+strconv.Itoa(i), 10*time.Second)
		require.NoError(t, err)
		le, err := l.Lease(ctx)
		require.NoError(t, err)
		leases = append(leases, le)
	}
	require.NoError(t, lc.Close())
	goleak.VerifyNone(t, ignore)
	for i, le := range leases {
		select {
		case <-le.Context().Done():
		default:
			t.Fatalf("lease %d still running after Close", i)
		}
		assert.ErrorIs(t, context.Cause(le.Context()), redlock.ErrClientClosed)
		assert.ErrorIs(t, le.Err(), redlock.ErrClientClosed)
		assert.NoError(t, le.Close(ctx), "the lock was released by Close")
		for _, s := range c.servers {
			n, err := s.Client().Exists(ctx, key+strconv.Itoa(i)).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "released on every node")
		}
	}
	_, err := lc.TryAcquire(ctx, key, time.Second)
	assert.True(t, errors.Is(err, redlock.ErrClientClosed), "%v", err)
}
