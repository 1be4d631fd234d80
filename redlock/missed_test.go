package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// A release that a node misses (here its primary node, which Release used to wait for, is
// blackholed) returns on the quorum of the others, and is retried in the background: the lock
// leaves that node as soon as it is reachable again, long before its TTL.
func TestReleaseMissedByANodeIsRetried(t *testing.T) {
	c := newCluster(t, 3, true)
	// A node timeout longer than the test could wait: Release must not wait for the node.
	const nodeTimeout = 20 * time.Second
	lc := c.client(t, redlock.WithNodeTimeout(nodeTimeout), redlock.WithMaxTTL(time.Hour))
	ctx := ctxT(t)
	key := redistest.Key(t)
	slow := primaryNode(key, len(c.nodes))
	l, err := lc.TryAcquire(ctx, key, time.Hour)
	require.NoError(t, err)
	c.waitHeldEverywhere(t, key)

	c.proxies[slow].Blackhole(true)
	start := time.Now()
	require.NoError(t, l.Release(ctx))
	require.Less(t, time.Since(start), nodeTimeout, "Release waited for the blackholed node")
	direct := c.servers[slow].Client()
	n, err := direct.Exists(ctx, key).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the blackholed node lost the lock before it was reachable")

	// Turning the blackhole off resets its connections: the release's request fails, and its
	// retry reaches the node.
	c.proxies[slow].Blackhole(false)
	require.Eventually(t, func() bool {
		n, err := direct.Exists(ctx, key).Result()
		return err == nil && n == 0
	}, 20*time.Second, 10*time.Millisecond, "the lock stayed on the node that missed its release")
	ttl, err := direct.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Less(t, ttl, time.Duration(0)) // gone, not expired by its TTL of an hour
}

// Close stops the retries of a release that a node keeps missing, and returns without waiting
// for the lock's TTL; goleak (TestMain) checks that nothing is left running.
func TestCloseStopsRetriedReleases(t *testing.T) {
	c := newCluster(t, 3, true)
	lc := c.client(t, redlock.WithNodeTimeout(200*time.Millisecond), redlock.WithMaxTTL(time.Hour))
	ctx := ctxT(t)
	key := redistest.Key(t)
	l, err := lc.TryAcquire(ctx, key, time.Hour)
	require.NoError(t, err)
	c.waitHeldEverywhere(t, key)
	c.proxies[0].Blackhole(true)
	t.Cleanup(func() { c.proxies[0].Blackhole(false) })
	require.NoError(t, l.Release(ctx))
	// Past the node timeout the release's request to the blackholed node has failed, and
	// its retries are running.
	time.Sleep(3 * 200 * time.Millisecond)

	closed := make(chan error, 1)
	go func() { closed <- lc.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for the retries of a release until the lock's TTL")
	}
}

// After a request fails, go-redis opens a new connection and sends its handshake (HELLO,
// CLIENT SETINFO) within the next request's deadline. With round trips of 60% of the node
// timeout, the handshake and the request cannot fit in it, so without help every request
// after the first failure would fail too. The Client's background work after the failure —
// the failed attempt's release, retried, and a connection opened, both with the handshake
// deadline — leaves connections ready, and the next request succeeds on one.
//
// The test waits for that work to end (every connection idle, no release on its way) before
// the request: one that comes while the background holds the connections dials one of its
// own and fails like the first, and a loop of attempts would depend on the machine's speed
// to fall between them (it took over 20 s beside a CPU hog). The node timeout is long for the
// same reason: the round trip that must fit in it has 400 ms to spare.
func TestSlowLinkRecoversAfterAFailure(t *testing.T) {
	c := newCluster(t, 1, true)
	const nodeTimeout = time.Second
	lc := c.client(t, redlock.WithNodeTimeout(nodeTimeout))
	ctx := ctxT(t)
	base := redistest.Key(t)
	l, err := lc.TryAcquire(ctx, base+":load", 10*time.Second) // the node loads the scripts
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	setRoundTripDelay(c.proxies[0], nodeTimeout*6/10)
	l, err = lc.TryAcquire(ctx, base+":before", 10*time.Second)
	require.NoError(t, err, "a round trip fits in the node timeout")
	require.NoError(t, l.Release(ctx))

	c.proxies[0].ResetAll() // every connection fails
	_, err = lc.TryAcquire(ctx, base+":reset", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable, "a request on a new connection fits in the node timeout")

	rc := c.nodes[0].(*redis.Client)
	require.Eventually(t, func() bool {
		s := rc.PoolStats()
		return s.IdleConns > 0 && s.IdleConns == s.TotalConns && !lc.Releasing()
	}, waitLimit, 10*time.Millisecond, "the background work left no connection")
	l, err = lc.TryAcquire(ctx, base+":after", 10*time.Second)
	require.NoError(t, err, "no request succeeded after the connection failed")
	require.NoError(t, l.Release(ctx))
}

// waitHeldEverywhere waits until every node holds key: an acquisition returns at the quorum,
// and a release that reached a node before the acquisition would find the lock not ours
// there.
func (c *cluster) waitHeldEverywhere(t *testing.T, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if n, err := s.Client().Exists(context.Background(), key).Result(); err != nil || n == 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
}

// waitReleased waits until no node holds key but under value: a release returns at the
// quorum, and reaches the last nodes later.
func (c *cluster) waitReleased(t *testing.T, key, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range c.servers {
			if v, err := s.Client().HGet(context.Background(), key, "v").Result(); err == nil && v != value {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond)
}
