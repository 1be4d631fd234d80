package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/locktest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// newClusterClient returns a redlock client over the given Cluster nodes, closed at cleanup.
func newClusterClient(t testing.TB, nodes []redlock.Node, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	lc, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Close() })
	return lc
}

// keyOnMember returns a key with a hash tag, named after prefix, whose slot member m of
// cluster c serves.
func keyOnMember(ctx context.Context, t testing.TB, c *redistest.Cluster, m int, prefix string) string {
	t.Helper()
	for n := 0; ; n++ {
		k := fmt.Sprintf("{%s:%d}:lock", prefix, n)
		on, err := c.MemberOf(ctx, k)
		require.NoError(t, err)
		if on == m {
			return k
		}
	}
}

// Three Redis Clusters stand as three lock nodes: locks with every kind of key are taken,
// extended and released with quarantine on, their fencing tokens increase, and a key of
// another slot is refused before any I/O. Until EndQuarantine, a new cluster's slots are in
// quarantine; EndQuarantine ends it for every slot.
func TestClusterNodes(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 3, redistest.Config{})
	ctx := ctxT(t)
	nodes := locktest.ClusterNodes(t, clusters...)
	lc := newClusterClient(t, nodes)
	// Each Cluster client loads its slot map and dials the primaries now: the attempt below is
	// decided as soon as two nodes fail or refuse, and a first request that spends the node
	// timeout on that (on a loaded machine) would count as failed instead of quarantined.
	for _, n := range nodes {
		require.NoError(t, n.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Ping(ctx).Err()
		}))
	}

	// New clusters have no boot markers: the first lock of a slot starts its quarantine.
	_, err := lc.TryAcquire(ctx, redistest.Key(t), 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok)
	assert.Equal(t, 0, ae.OK, "%v", err)
	assert.GreaterOrEqual(t, ae.Quarantined, 2, "%v", err)

	require.NoError(t, lc.EndQuarantine(ctx))
	// Every slot's marker is written: keys on every member of every cluster can be locked (every cluster has the same slot ranges).
	for m := range 3 {
		key := keyOnMember(ctx, t, clusters[0], m, redistest.Key(t))
		l, err := lc.TryAcquire(ctx, key, 5*time.Second)
		require.NoError(t, err, "a key on member %d", m)
		require.NoError(t, l.Release(ctx))
	}

	job := "{" + redistest.Key(t) + "}"
	cases := []struct {
		name string
		key  string
		opts []redlock.AcquireOption
	}{
		{"no hash tag: a fence counter per slot", redistest.Key(t), nil},
		{"a job's keys", job + ":tick:1", []redlock.AcquireOption{redlock.Also(job + ":run"), redlock.RefuseWhile(job + ":paused")}},
		{"a fence key of the same tag", job + ":tick:2", []redlock.AcquireOption{redlock.FenceKey(job + ":fence2")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var last uint64
			for range 2 {
				l, err := lc.TryAcquire(ctx, tc.key, 5*time.Second, tc.opts...)
				require.NoError(t, err)
				assert.Greater(t, l.Token(), last, "tokens increase")
				last = l.Token()
				_, err = l.Extend(ctx)
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
			}
		})
	}

	// A key of another slot is refused before any node sees it (a node would answer CROSSSLOT).
	_, err = lc.TryAcquire(ctx, job+":tick:3", 5*time.Second, redlock.FenceKey("cronlock:fence"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hash slot")

	// Without quarantine no boot marker is given to the script.
	off := newClusterClient(t, nodes, redlock.WithoutQuarantine())
	l, err := off.TryAcquire(ctx, job+":tick:4", 5*time.Second, redlock.Also(job+":run"))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	// Cluster clients wrapped in a Node of one's own are laid out per slot when told so.
	wrapped := make([]redlock.Node, len(nodes))
	for i, n := range nodes {
		wrapped[i] = wrappedNode{n.(*redis.ClusterClient)}
	}
	wc := newClusterClient(t, wrapped, redlock.WithClusterNodes())
	l, err = wc.TryAcquire(ctx, redistest.Key(t), 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	_, err = redlock.New(nodes, redlock.WithBootKey("{cronlock}:boot"))
	require.ErrorContains(t, err, "must not contain")
}

// wrappedNode is a Cluster client that the redlock client cannot recognize by its type.
type wrappedNode struct{ *redis.ClusterClient }

// A primary of one Cluster that restarts empty loses the boot markers of the slots it serves,
// and those slots alone are in quarantine on that lock node: a lock whose slot it serves is
// refused there as quarantined, while a lock of another member's slot is taken, and a quorum
// of lock nodes still takes both.
func TestClusterMemberRestartQuarantinesItsSlots(t *testing.T) {
	clusters := redistest.StartClusters(t, 3, 3, redistest.Config{})
	ctx := ctxT(t)
	lc := newClusterClient(t, locktest.ClusterNodes(t, clusters...))
	require.NoError(t, lc.EndQuarantine(ctx))
	lost := keyOnMember(ctx, t, clusters[0], 1, redistest.Key(t))
	kept := keyOnMember(ctx, t, clusters[0], 2, redistest.Key(t))

	require.NoError(t, clusters[0].Restart(1))

	// Fresh connections: the lock node that restarted a member, alone.
	alone := newClusterClient(t, locktest.ClusterNodes(t, clusters[0]))
	_, err := alone.TryAcquire(ctx, lost, 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrQuorumUnavailable)
	ae, ok := errors.AsType[*redlock.AcquireError](err)
	require.True(t, ok)
	assert.Equal(t, 1, ae.Quarantined, "%v", err)
	assert.Contains(t, err.Error(), "quarantine")
	l, err := alone.TryAcquire(ctx, kept, 5*time.Second)
	require.NoError(t, err, "another member's slots are not in quarantine")
	require.NoError(t, l.Release(ctx))

	all := newClusterClient(t, locktest.ClusterNodes(t, clusters...))
	for _, key := range []string{lost, kept} {
		l, err := all.TryAcquire(ctx, key, 5*time.Second)
		require.NoError(t, err, "the other two lock nodes make a quorum")
		require.NoError(t, l.Release(ctx))
	}
}
