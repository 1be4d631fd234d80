package redlock_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// holdHook is a go-redis hook on one node for the nested-hold tests. While fail is set, the
// node's reenter calls fail without being sent. An armed gate holds the next reenter call back,
// before it is sent (or, with after, once it ran and before its reply is handed on), until
// the gate is opened. Every acquire and release call the node answered is reported on
// acquired and released.
type holdHook struct {
	acquire, reenter, release string // the scripts' SHAs
	fail                      atomic.Bool

	mu       sync.Mutex
	gate     chan struct{} // armed: the next reenter call waits for it to be closed
	after    bool          // the gate holds the reply, not the request
	held     chan struct{} // a reenter call reached the gate
	acquired chan struct{}
	released chan struct{}
}

func newHoldHooks(t *testing.T, c *cluster) []*holdHook {
	hooks := make([]*holdHook, len(c.nodes))
	for i, n := range c.nodes {
		hooks[i] = &holdHook{acquire: scriptSHA(t, "acquire.lua"), reenter: scriptSHA(t, "reenter.lua"), release: scriptSHA(t, "release.lua"),
			held: make(chan struct{}, 10), acquired: make(chan struct{}, 100), released: make(chan struct{}, 100)}
		n.(*redis.Client).AddHook(onTrip(hooks[i].trip))
	}
	return hooks
}

// arm makes the next reenter call wait until the returned func is called.
func (h *holdHook) arm(after bool) (open func()) {
	gate := make(chan struct{})
	h.mu.Lock()
	h.gate, h.after = gate, after
	h.mu.Unlock()
	return sync.OnceFunc(func() { close(gate) })
}

// calls counts the calls of the script sha among cmds: a batch (pipeline) may carry several,
// e.g. the releases of two holds to one node.
func calls(cmds []redis.Cmder, sha string) int {
	n := 0
	for _, cmd := range cmds {
		if args := cmd.Args(); cmd.Name() == "evalsha" && len(args) > 1 && args[1] == sha {
			n++
		}
	}
	return n
}

// signal sends n signals on ch.
func signal(ch chan<- struct{}, n int) {
	for range n {
		ch <- struct{}{}
	}
}

func (h *holdHook) trip(cmds []redis.Cmder, send func() error) error {
	switch {
	case calls(cmds, h.acquire) > 0:
		defer signal(h.acquired, calls(cmds, h.acquire))
	case calls(cmds, h.release) > 0:
		defer signal(h.released, calls(cmds, h.release))
	case calls(cmds, h.reenter) == 0:
	case h.fail.Load():
		err := redis.ErrClosed // as a request that never reached the node
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	default:
		h.mu.Lock()
		gate, after := h.gate, h.after
		h.gate = nil
		h.mu.Unlock()
		if gate == nil {
			break
		}
		if after {
			err := send()
			h.held <- struct{}{}
			<-gate
			return err
		}
		h.held <- struct{}{}
		<-gate
	}
	return send()
}

// primeScripts has every node cache the scripts of a nested hold, so that the hooks see
// EVALSHA calls only.
func primeScripts(t *testing.T, lc *redlock.Client) {
	ctx := ctxT(t)
	l, err := lc.TryAcquire(ctx, redistest.Key(t)+":prime", 10*time.Second)
	require.NoError(t, err)
	nested, err := lc.TryAcquire(redlock.WithHold(ctx, l), l.Key(), 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, nested.Release(ctx))
	require.NoError(t, l.Release(ctx))
}

// nestTest is a lock on three new nodes whose hooks (see holdHook) see the scripts of its
// nested holds.
type nestTest struct {
	c     *cluster
	lc    *redlock.Client
	hooks []*holdHook
	ctx   context.Context
	key   string
	outer *redlock.Lock
}

// newNestTest takes a lock of ttl through a client with opts, once the nodes cached the
// scripts and got their hooks, and waits until every node took it.
func newNestTest(t *testing.T, ttl time.Duration, opts ...redlock.Option) *nestTest {
	n := &nestTest{c: newCluster(t, 3, false), ctx: ctxT(t), key: redistest.Key(t)}
	n.lc = n.c.client(t, opts...)
	primeScripts(t, n.lc)
	n.hooks = newHoldHooks(t, n.c)
	var err error
	n.outer, err = n.lc.TryAcquire(n.ctx, n.key, ttl)
	require.NoError(t, err)
	for _, h := range n.hooks {
		receive(t, h.acquired, "the acquisition on each node") // the lock is on every node, not only on the quorum that decided
	}
	return n
}

// requireGone requires that key is on no node. Call it after the Client's Close, which waits
// for the requests still running.
func requireGone(t *testing.T, c *cluster, key string) {
	t.Helper()
	for i, s := range c.servers {
		n, err := s.Client().Exists(context.Background(), key).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the lock is left on node %d", i)
	}
}

// A nested hold counts on the nodes that confirmed it, and its release frees only what it
// counted. Outer hold on every node; h1 not counted on node 1, h2 not on node 0. Once outer
// and h1 are released, h2 still holds the lock on nodes 1 and 2 — a quorum — so no one else
// can take it; h2's release then frees it everywhere.
func TestNestedHoldsCountWhereTheyWereTaken(t *testing.T) {
	n := newNestTest(t, 10*time.Second)
	c, lc, hooks, ctx, key, outer := n.c, n.lc, n.hooks, n.ctx, n.key, n.outer
	nested := func(failOn int) *redlock.Lock {
		hooks[failOn].fail.Store(true)
		defer hooks[failOn].fail.Store(false)
		l, err := lc.TryAcquire(redlock.WithHold(ctx, outer), key, 10*time.Second)
		require.NoError(t, err)
		return l
	}
	h1, h2 := nested(1), nested(0)
	require.NoError(t, outer.Release(ctx))
	require.NoError(t, h1.Release(ctx))
	for _, h := range hooks {
		receive(t, h.released, "each hold's release on each node")
		receive(t, h.released, "each hold's release on each node")
	}

	other := c.client(t)
	_, err := other.TryAcquire(ctx, key, time.Second, redlock.AskEveryNode())
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "another client took the lock while h2 is valid")
	require.True(t, time.Now().Before(h2.ValidUntil()))

	require.NoError(t, h2.Release(ctx))
	require.NoError(t, lc.Close())
	requireGone(t, c, key)
}

// A nested hold's release may reach a node before the hold's own reenter, which travels on
// another connection: the node then never counts the hold, and the release does not free the
// lock there while another hold is live. h1's reenter to node 2 and h2's to node 1 are held
// back until both holds were released everywhere; the outer hold keeps the lock on every node
// meanwhile and after, and its release frees it.
func TestNestedReleaseOvertakingItsReenter(t *testing.T) {
	// Held-back requests must still be sent after the releases: a long node timeout.
	n := newNestTest(t, 20*time.Second, redlock.WithNodeTimeout(5*time.Second))
	c, lc, hooks, ctx, key, outer := n.c, n.lc, n.hooks, n.ctx, n.key, n.outer
	nested := func(slow int) (*redlock.Lock, func()) {
		open := hooks[slow].arm(false)
		t.Cleanup(open)
		l, err := lc.TryAcquire(redlock.WithHold(ctx, outer), key, 20*time.Second)
		require.NoError(t, err)
		receive(t, hooks[slow].held, "the held-back reenter")
		return l, open
	}
	h1, open1 := nested(2)
	h2, open2 := nested(1)
	require.NoError(t, h1.Release(ctx))
	require.NoError(t, h2.Release(ctx))
	for _, h := range hooks {
		receive(t, h.released, "each hold's release on each node")
		receive(t, h.released, "each hold's release on each node")
	}
	open1()
	open2()

	other := c.client(t)
	_, err := other.TryAcquire(ctx, key, time.Second, redlock.AskEveryNode())
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "the nested releases freed the outer hold's lock")

	require.NoError(t, outer.Release(ctx))
	require.NoError(t, lc.Close()) // waits for the held-back reenters
	requireGone(t, c, key)
}

// A nested hold taken on a lease's context while the lease is closed: the nested acquisition
// fails (its context ended before a quorum answered) although two nodes counted it, and
// nothing is left on the nodes once the lease's release and the failed hold's are in.
func TestNestedHoldFailingAsItsLeaseClosesLeavesNothing(t *testing.T) {
	n := newNestTest(t, 20*time.Second, redlock.WithNodeTimeout(5*time.Second))
	c, lc, hooks, ctx, key := n.c, n.lc, n.hooks, n.ctx, n.key
	lease, err := n.outer.Lease(ctx)
	require.NoError(t, err)
	var opens []func()
	for _, h := range hooks[1:] {
		opens = append(opens, h.arm(true))
		t.Cleanup(opens[len(opens)-1])
	}
	failed := make(chan error, 1)
	go func() {
		_, err := lc.Acquire(lease.Context(), key, 20*time.Second)
		failed <- err
	}()
	for _, h := range hooks[1:] {
		receive(t, h.held, "the held-back reenter") // counted on the node, its reply held back
	}
	require.NoError(t, lease.Close(ctx))
	require.ErrorIs(t, <-failed, context.Canceled)
	for _, open := range opens {
		open()
	}
	require.NoError(t, lc.Close()) // waits for the held replies and the releases
	requireGone(t, c, key)
}
