package redlock_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// replicated is three lock nodes, each a primary with one replica, and clients whose node 0
// follows a failover: failover0 kills primary 0 and promotes its replica, as Sentinel would.
type replicated struct {
	primaries, replicas []*redistest.Server
	addr0               atomic.Value // the address node 0's clients dial
	answers             answers      // of every client's node clients
}

func newReplicated(t testing.TB) *replicated {
	t.Helper()
	// Sync a new replica at once, not after the default 5 s wait for more replicas.
	r := &replicated{primaries: redistest.StartN(t, 3, redistest.Config{Args: []string{"--repl-diskless-sync-delay", "0"}})}
	for _, p := range r.primaries {
		_, port, _ := net.SplitHostPort(p.Addr())
		r.replicas = append(r.replicas, redistest.Start(t, redistest.Config{Args: []string{"--replicaof", "127.0.0.1", port}}))
	}
	ctx := context.Background()
	for i, p := range r.primaries {
		// Ready when the primary counts its replica's acknowledgements, as WithWaitForReplicas does.
		require.Eventually(t, func() bool {
			n, _ := p.Client().Do(ctx, "wait", 1, 100).Int()
			return n == 1
		}, 10*time.Second, 10*time.Millisecond, "replica %d never acknowledged", i)
	}
	r.addr0.Store(r.primaries[0].Addr())
	return r
}

// client returns a lock client over the three primaries; node 0 follows failover0.
func (r *replicated) client(t *testing.T, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	var nodes []redlock.Node
	for i, p := range r.primaries {
		opts := &redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1}
		if i == 0 {
			opts.Dialer = func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, r.addr0.Load().(string))
			}
		}
		rc := redis.NewClient(opts)
		t.Cleanup(func() { _ = rc.Close() })
		r.answers.watch(rc)
		nodes = append(nodes, rc)
	}
	// WAIT's timeout is noticed on Redis's server cron, up to 100ms late, and replicas of a
	// loaded machine running -race acknowledge late: a node timeout with room for both.
	lc, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	require.NoError(t, lc.EndQuarantine(ctxT(t)))
	for _, p := range r.primaries { // the boot markers reach the replicas before anything fails
		require.NoError(t, p.Client().Do(ctxT(t), "wait", 1, 5000).Err())
	}
	return lc
}

// detach0 stops replica 0 from replicating: from now on it misses every write to primary 0,
// as a replica that fell behind would.
func (r *replicated) detach0(t *testing.T) {
	t.Helper()
	require.NoError(t, r.replicas[0].Client().Do(ctxT(t), "replicaof", "no", "one").Err())
}

// failover0 kills primary 0 and promotes its replica; node 0's clients then reach the replica.
func (r *replicated) failover0(t *testing.T) {
	t.Helper()
	require.NoError(t, r.primaries[0].Kill())
	require.NoError(t, r.replicas[0].Client().Do(ctxT(t), "replicaof", "no", "one").Err())
	r.addr0.Store(r.replicas[0].Addr())
}

// A failover to a replica that missed the lock forgets it: without WithWaitForReplicas a second
// client takes a lock the first still holds; with it, the first acquisition is not counted on a
// node whose replica did not acknowledge it, and a lock that was acknowledged survives the
// failover.
func TestWaitForReplicasSurvivesFailover(t *testing.T) {
	key := "replicated"
	for _, tc := range []struct {
		name string
		opts []redlock.Option
	}{{"without", nil}, {"with", []redlock.Option{redlock.WithWaitForReplicas(1)}}} {
		t.Run(tc.name+" WithWaitForReplicas, replica 0 behind", func(t *testing.T) {
			r := newReplicated(t)
			a, b := r.client(t, tc.opts...), r.client(t, tc.opts...)
			ctx := ctxT(t)
			// Node 2 is held by someone else, and replica 0 falls behind: the lock can only be
			// taken on nodes 0 and 1, and replica 0 misses it.
			other := r.primaries[2].Client()
			require.NoError(t, other.HSet(ctx, key, "v", "other", "l", "other").Err())
			r.detach0(t)
			la, errA := a.TryAcquire(ctx, key, 10*time.Second)
			// Its request to node 2 may still be on its way, to take the key once other's is
			// deleted below (and so refuse b there), and a failed attempt's releases too.
			r.answers.settled(t, a)
			r.failover0(t)
			require.NoError(t, other.Del(ctx, key).Err())
			lb, errB := b.TryAcquire(ctx, key, 10*time.Second)
			if tc.opts == nil {
				// The risk the docs describe: two holders at once.
				require.NoError(t, errA)
				require.NoError(t, errB, "the promoted replica forgot a's lock")
				assert.Greater(t, lb.Token(), uint64(0))
				return
			}
			require.ErrorIs(t, errA, redlock.ErrNotReplicated, "node 0's yes was not replicated, so it did not count")
			require.Nil(t, la)
			require.NoError(t, errB, "nobody holds the lock")
			require.NoError(t, lb.Release(ctx))
		})
	}
	t.Run("with WithWaitForReplicas, replicas up", func(t *testing.T) {
		r := newReplicated(t)
		a, b := r.client(t, redlock.WithWaitForReplicas(1)), r.client(t, redlock.WithWaitForReplicas(1))
		ctx := ctxT(t)
		other := r.primaries[2].Client()
		require.NoError(t, other.HSet(ctx, key, "v", "other", "l", "other").Err())
		la, err := a.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		_, err = la.Extend(ctx) // extensions wait for the replicas too
		require.NoError(t, err)
		r.failover0(t)
		require.NoError(t, other.Del(ctx, key).Err())
		_, err = b.TryAcquire(ctx, key, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "the promoted replica kept a's lock")
	})
}

// Standalone nodes have no replica to acknowledge: every node fails, and says why.
func TestWaitForReplicasOnStandaloneNodesFails(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithNodeTimeout(time.Second), redlock.WithWaitForReplicas(1))
	_, err := lc.TryAcquire(ctxT(t), "k", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	require.ErrorIs(t, err, redlock.ErrNotReplicated)
	assert.Contains(t, err.Error(), fmt.Sprintf("0 of %d replicas acknowledged", 1))
}

// BenchmarkWaitForReplicas measures what waiting for each node's replica costs an
// acquire+release pair, on three primaries with one replica each:
//
//	go test -run '^$' -bench WaitForReplicas -benchmem ./redlock/
func BenchmarkWaitForReplicas(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts []redlock.Option
	}{{"off", nil}, {"replicas=1", []redlock.Option{redlock.WithWaitForReplicas(1)}}} {
		b.Run(tc.name, func(b *testing.B) {
			r := newReplicated(b)
			var nodes []redlock.Node
			for _, p := range r.primaries {
				nodes = append(nodes, nodeClient(b, p.Addr()))
			}
			lc, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, tc.opts...)...)
			require.NoError(b, err)
			b.Cleanup(func() { _ = lc.Close() })
			ctx := context.Background()
			require.NoError(b, lc.EndQuarantine(ctx))
			b.ResetTimer()
			for i := range b.N {
				l, err := lc.TryAcquire(ctx, fmt.Sprintf("bench:%d", i), 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// WithNodeReplicas waits for replicas only on the node that has them: on three primaries
// where only node 1 has a replica, node 1's yes counts while its replica acknowledges and not
// once the replica stops replicating, and the standalone nodes count without waiting.
func TestWithNodeReplicas(t *testing.T) {
	primaries := redistest.StartN(t, 3, redistest.Config{Args: []string{"--repl-diskless-sync-delay", "0"}})
	_, port, _ := net.SplitHostPort(primaries[1].Addr())
	replica := redistest.Start(t, redistest.Config{Args: []string{"--replicaof", "127.0.0.1", port}})
	ctx := ctxT(t)
	require.Eventually(t, func() bool {
		n, _ := primaries[1].Client().Do(ctx, "wait", 1, 100).Int()
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, "the replica never acknowledged")
	var nodes []redlock.Node
	var answers answers
	for _, p := range primaries {
		rc := nodeClient(t, p.Addr())
		answers.watch(rc)
		nodes = append(nodes, rc)
	}
	lc, err := redlock.New(nodes, redlock.WithNodeTimeout(2*time.Second), redlock.WithNodeReplicas(1, 1))
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	require.NoError(t, lc.EndQuarantine(ctx))

	// Node 0 is held by someone else: the lock needs nodes 1 and 2.
	key := "per-node"
	require.NoError(t, primaries[0].Client().HSet(ctx, key, "v", "other", "l", "other").Err())
	l, err := lc.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err, "node 1's replica acknowledged, and nodes 0 and 2 do not wait")
	_, err = l.Extend(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	// Each acquisition below finds the nodes free: the last one's releases have all landed.
	answers.settled(t, lc)

	require.NoError(t, replica.Client().Do(ctx, "replicaof", "no", "one").Err())
	_, err = lc.TryAcquire(ctx, key, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotReplicated, "node 1's yes was not replicated, so it did not count")
	assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged")
	answers.settled(t, lc) // the failed attempt's releases

	// Without node 0's holder, nodes 0 and 2 make a quorum without node 1.
	require.NoError(t, primaries[0].Client().Del(ctx, key).Err())
	l, err = lc.TryAcquire(ctx, key, 10*time.Second, redlock.AskEveryNode())
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}
