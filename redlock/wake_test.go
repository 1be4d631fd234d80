package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// wakeRace is a lock whose holder reaches the lock's primary node (node 0) directly and the
// other two nodes through proxies, and a waiter (WakeOnRelease, a minute of backoff) that
// reaches every node directly and has been refused twice: once before it subscribed, once
// after. Both clients' node timeout is timeout.
type wakeRace struct {
	c        *cluster
	proxies  []*faultproxy.Proxy // the holder's links to nodes 1 and 2
	waiter   *redlock.Client
	key      string
	held     *redlock.Lock
	attempts chan redlock.Attempt // the waiter's
	ctx      context.Context
}

func newWakeRace(t *testing.T, timeout time.Duration) *wakeRace {
	w := &wakeRace{c: newCluster(t, 3, false), key: redistest.Key(t), attempts: make(chan redlock.Attempt, 10), ctx: ctxT(t)}
	for primaryNode(w.key, 3) != 0 {
		w.key = redistest.Key(t)
	}
	slow := func() backoff.BackOff { return backoff.NewConstantBackOff(time.Minute) }
	w.waiter = w.c.client(t, redlock.WithBackOff(slow), redlock.WithNodeTimeout(timeout))
	nodes := []redlock.Node{nodeClient(t, w.c.servers[0].Addr())}
	for _, s := range w.c.servers[1:] {
		p := faultproxy.Start(t, s.Addr())
		w.proxies = append(w.proxies, p)
		nodes = append(nodes, nodeClient(t, p.Addr()))
	}
	holder := newClient(t, nodes, redlock.WithNodeTimeout(timeout))
	primeScripts(t, holder)
	hooks := newHoldHooks(t, &cluster{nodes: nodes})
	var err error
	w.held, err = holder.TryAcquire(w.ctx, w.key, 10*time.Second)
	require.NoError(t, err)
	for _, h := range hooks {
		receive(t, h.acquired, "the holder's acquisition on each node") // not only on the quorum that decided
	}

	wctx, cancel := context.WithCancel(w.ctx)
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, _ := w.waiter.Acquire(wctx, w.key, 10*time.Second, redlock.WakeOnRelease(),
			redlock.OnAttempt(func(a redlock.Attempt) { w.attempts <- a }))
		got <- l
	}()
	t.Cleanup(func() {
		cancel() // a waiter still waiting for its backoff step
		if l := <-got; l != nil {
			assert.NoError(t, l.Release(context.Background()))
		}
	})
	receive(t, w.attempts, "the first attempt, refused")
	receive(t, w.attempts, "the attempt after subscribing, refused")
	return w
}

// The release that wakes a waiter frees the lock's primary node before the other nodes: the
// holder's Release goes to every node at once, and the waiter, woken by the primary node,
// gets its yes and asks the others while the release is still on its way there. Here the
// holder's release reaches nodes 1 and 2 latency late. The woken attempt, refused by them for
// the holder whose release woke it, asks them again until the release has landed (within
// the waiter's node timeout, ten latencies) instead of failing and waiting its minute of
// backoff: it takes the lock.
func TestWokenAttemptWaitsForTheReleaseOnTheOtherNodes(t *testing.T) {
	const latency = 200 * time.Millisecond
	w := newWakeRace(t, 10*latency)
	for _, p := range w.proxies {
		p.SetLatency(latency)
	}
	require.NoError(t, w.held.Release(w.ctx))
	woken := receive(t, w.attempts, "the attempt woken by the release")
	require.NoError(t, woken.Err, "the woken attempt gave up before the release reached the other nodes")
	assert.Equal(t, 3, woken.Number)
	assert.True(t, woken.PrimaryFirst)
	assert.Greater(t, woken.Token, w.held.Token())
}

// A holder whose release reaches the primary node only (its links to the other nodes are
// cut) leaves its lock there until its TTL. The woken attempt waits for that release no
// longer than its node timeout, asking again less and less often (not in a loop one round
// trip apart: a few dozen requests at most, where a loop would make thousands), then fails
// and releases the primary node it took.
func TestWokenAttemptGivesUpOnAReleaseThatReachedOnlyThePrimary(t *testing.T) {
	const timeout = time.Second
	w := newWakeRace(t, timeout)
	asked := func() int { // acquire-script calls node 1 answered
		stats, err := w.c.servers[1].Client().InfoMap(w.ctx, "commandstats").Result()
		require.NoError(t, err)
		var calls int
		_, err = fmt.Sscanf(stats["Commandstats"]["cmdstat_evalsha"], "calls=%d", &calls)
		require.NoError(t, err)
		return calls
	}
	for _, p := range w.proxies {
		p.Blackhole(true)
	}
	before := asked()
	require.ErrorIs(t, w.held.Release(w.ctx), redlock.ErrQuorumUnavailable)
	woken := receive(t, w.attempts, "the attempt woken by the release")
	require.ErrorIs(t, woken.Err, redlock.ErrNotAcquired)
	assert.Equal(t, 1, woken.OK)
	assert.Equal(t, 2, woken.Refused)
	assert.LessOrEqual(t, asked()-before, 40, "requests of the woken attempt to node 1")

	require.NoError(t, w.waiter.Close()) // waits for the failed attempt's release
	n, err := w.c.servers[0].Client().Exists(w.ctx, w.key).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the failed attempt left its lock on the primary node")
}
