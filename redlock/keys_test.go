package redlock_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/hashslot"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// The client's own keys — boot markers and fence counters, per node or, on Cluster nodes, per
// hash slot — are refused as lock keys before any node is asked, with ErrInvalidKey and a
// message that names the key and the fix. (The nodes are unreachable: nothing is sent.)
func TestOwnKeysAreRefusedAsLockKeys(t *testing.T) {
	nodes := make([]redlock.Node, 3)
	for i := range nodes {
		rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", i+1), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rc.Close() })
		nodes[i] = rc
	}
	slotFence := hashslot.Key(layout.FenceKey, hashslot.Of("job"))
	for _, tc := range []struct {
		name    string
		cluster bool
		key     string
		opts    []redlock.AcquireOption
		want    string
	}{
		{"default fence counter", false, layout.FenceKey, nil, `lock key "cronlock:fence" is a default fence counter`},
		{"tag's fence counter", false, "{t}:fence", nil, `lock key "{t}:fence" is a default fence counter`},
		{"another tag's fence counter", false, "{u}:fence", []redlock.AcquireOption{redlock.FenceKey("{u}:mine")}, `"{u}:fence" is a default fence counter`},
		{"Also a fence counter", false, "{t}:a", []redlock.AcquireOption{redlock.Also("{t}:fence")}, `lock key "{t}:fence"`},
		{"boot marker", false, layout.BootKey, nil, `lock key "cronlock:boot" is the nodes' boot marker`},
		{"own fence key", false, "a", []redlock.AcquireOption{redlock.FenceKey("a")}, `lock key "a" is the lock's fence counter`},
		{"fence key on the boot marker", false, "a", []redlock.AcquireOption{redlock.FenceKey(layout.BootKey)}, `fence key "cronlock:boot" is the nodes' boot marker`},
		{"slot's boot marker", true, hashslot.Key(layout.BootKey, 7), nil, "is the nodes' boot marker"},
		{"slot's fence counter", true, slotFence, nil, "is a default fence counter"},
		{"default fence counter on Clusters", true, layout.FenceKey, nil, "is a default fence counter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []redlock.Option
			if tc.cluster {
				opts = append(opts, redlock.WithClusterNodes())
			}
			lc, err := redlock.New(nodes, opts...)
			require.NoError(t, err)
			defer lc.Close()
			_, err = lc.TryAcquire(ctxT(t), tc.key, time.Second, tc.opts...)
			require.ErrorIs(t, err, redlock.ErrInvalidKey)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "give the")
		})
	}
	// Keys that merely look alike are locks like any other.
	lc, err := redlock.New(nodes)
	require.NoError(t, err)
	defer lc.Close()
	for _, key := range []string{"{t}:fence:x", "x:{t}:fence", "cronlock:boot:x", slotFence} {
		_, err := lc.TryAcquire(ctxT(t), key, time.Second)
		require.NotErrorIs(t, err, redlock.ErrInvalidKey, key)
	}
}

// A key that holds a value of another kind on the nodes (WRONGTYPE) fails the acquisition
// with ErrInvalidKey at the first attempt, however long Acquire may wait — not as unavailable
// nodes — and an extension of a lock whose key was overwritten finds it lost.
func TestWrongTypeIsAnInvalidKey(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithMaxWait(time.Minute))
	ctx := ctxT(t)
	key := redistest.Key(t)

	for _, s := range c.servers {
		require.NoError(t, s.Client().Set(ctx, key+":string", "user data", 0).Err())
	}
	attempts := 0
	count := redlock.OnAttempt(func(redlock.Attempt) { attempts++ })
	_, err := lc.Acquire(ctx, key+":string", time.Second, count)
	require.ErrorIs(t, err, redlock.ErrInvalidKey)
	require.NotErrorIs(t, err, redlock.ErrQuorumUnavailable)
	assert.Contains(t, err.Error(), "WRONGTYPE")
	assert.Contains(t, err.Error(), "use a key of its own")
	assert.Equal(t, 1, attempts)

	// A lock's key given as another lock's fence counter.
	held, err := lc.TryAcquire(ctx, key+":held", 10*time.Second)
	require.NoError(t, err)
	_, err = lc.TryAcquire(ctx, key+":other", time.Second, redlock.FenceKey(key+":held"))
	require.ErrorIs(t, err, redlock.ErrInvalidKey)

	for _, s := range c.servers {
		require.NoError(t, s.Client().Set(ctx, key+":held", "overwritten", 0).Err())
	}
	_, err = held.Extend(ctx)
	require.ErrorIs(t, err, redlock.ErrLockLost)
}
