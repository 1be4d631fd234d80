package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/redlock"
)

// Every bad configuration is refused with a message that names the setting. No server is
// contacted: these checks are pure.
func TestBadConfigIsRefused(t *testing.T) {
	port := 0
	node := func() redlock.Node {
		port++ // one address per node: the same address twice is refused
		rc := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), ContextTimeoutEnabled: true})
		t.Cleanup(func() { rc.Close() })
		return rc
	}
	three := []redlock.Node{node(), node(), node()}
	noCtxTimeout := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer noCtxTimeout.Close()
	sameAddr := redis.NewClient(&redis.Options{Addr: "127.0.0.1:2", ContextTimeoutEnabled: true})
	defer sameAddr.Close()

	for _, tc := range []struct {
		name  string
		nodes []redlock.Node
		opts  []redlock.Option
		want  string
	}{
		{"no nodes", nil, nil, "no nodes"},
		{"nil node", []redlock.Node{nil}, nil, "node 0 is nil"},
		{"even", []redlock.Node{node(), node()}, nil, "use an odd number"},
		{"quorum not a majority", three, []redlock.Option{redlock.WithQuorum(1)}, "must be a majority, between 2 and 3"},
		{"quorum above N", three, []redlock.Option{redlock.WithQuorum(4)}, "must be a majority"},
		{"quorum zero", three, []redlock.Option{redlock.WithQuorum(0)}, "quorum 0"},
		{"drift negative", three, []redlock.Option{redlock.WithDriftFactor(-0.1)}, "drift factor -0.1"},
		{"drift too large", three, []redlock.Option{redlock.WithDriftFactor(0.5)}, "must be in [0, 0.5)"},
		{"node timeout", three, []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout 0s"},
		{"max TTL", three, []redlock.Option{redlock.WithMaxTTL(-time.Second)}, "max TTL -1s"},
		{"max wait", three, []redlock.Option{redlock.WithMaxWait(0)}, "max wait 0s"},
		{"wait for replicas", three, []redlock.Option{redlock.WithWaitForReplicas(-1)}, "WithWaitForReplicas(-1)"},
		{"node replicas", three, []redlock.Option{redlock.WithNodeReplicas(0, -1)}, "WithNodeReplicas(0, -1)"},
		{"node replicas' node", three, []redlock.Option{redlock.WithNodeReplicas(-1, 1)}, "WithNodeReplicas(-1, 1)"},
		{"node replicas past the nodes", three, []redlock.Option{redlock.WithNodeReplicas(3, 1)}, "WithNodeReplicas(3, …): there are 3 nodes"},
		{"boot key", three, []redlock.Option{redlock.WithBootKey("")}, "boot key is empty"},
		{"backoff", three, []redlock.Option{redlock.WithBackOff(nil)}, "backoff factory is nil"},
		{"context timeouts off", []redlock.Node{noCtxTimeout}, nil, "ContextTimeoutEnabled"},
		{"nil option", three, []redlock.Option{redlock.WithEvenNodes(), nil}, "option 1 is nil"},
		{"typed nil client", []redlock.Node{node(), (*redis.Client)(nil), node()}, nil, "node 1 is a nil *redis.Client"},
		{"same client twice", []redlock.Node{three[0], three[1], three[0]}, nil, "nodes 0 and 2 are the same node"},
		{"same address twice", []redlock.Node{three[0], three[1], sameAddr}, nil, "nodes 1 and 2 are the same node (127.0.0.1:2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redlock.New(tc.nodes, tc.opts...)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "redlock: ")
		})
	}

	even, err := redlock.New([]redlock.Node{node(), node()}, redlock.WithEvenNodes())
	require.NoError(t, err)
	assert.Equal(t, 2, even.Quorum())
	require.NoError(t, even.Close())
}

func TestBadAcquireIsRefused(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rc.Close()
	c, err := redlock.New([]redlock.Node{rc}, redlock.WithMaxTTL(time.Minute))
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		key  string
		ttl  time.Duration
		opts []redlock.AcquireOption
		want string
	}{
		{"", time.Second, nil, "key is empty"},
		{"k", 0, nil, "TTL 0s is not positive"},
		{"k", 2 * time.Minute, nil, "TTL 2m0s is above the max TTL 1m0s"},
		{"k", 6 * time.Millisecond, nil, "leaves no validity"},
		{"k", time.Second, []redlock.AcquireOption{redlock.Also("")}, "Also key is empty"},
		{"k", time.Second, []redlock.AcquireOption{redlock.Also("k")}, `Also key "k" repeats`},
	} {
		_, err := c.TryAcquire(ctx, tc.key, tc.ttl, tc.opts...)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		if tc.key != "" && tc.opts == nil {
			assert.ErrorIs(t, err, redlock.ErrInvalidTTL)
			assert.Equal(t, err, lockseam.CheckTTL(c, tc.ttl))
		} else {
			assert.NotErrorIs(t, err, redlock.ErrInvalidTTL)
		}
		_, err = c.Acquire(ctx, tc.key, tc.ttl, tc.opts...)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestAccessors(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rc.Close()
	c, err := redlock.New([]redlock.Node{rc})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, lockseam.DefaultMaxTTL, c.MaxTTL())
	assert.Equal(t, 200*time.Millisecond, c.NodeTimeout(10*time.Second))
	assert.Equal(t, 5*time.Millisecond, c.NodeTimeout(100*time.Millisecond))
	assert.NoError(t, lockseam.CheckTTL(c, time.Second))

	c2, err := redlock.New([]redlock.Node{rc}, redlock.WithMaxTTL(time.Hour), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer c2.Close()
	assert.Equal(t, time.Hour, c2.MaxTTL())
	assert.Equal(t, time.Second, c2.NodeTimeout(10*time.Second))
}

func TestCancelledAcquireReportsTheContext(t *testing.T) {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rc.Close()
	c, err := redlock.New([]redlock.Node{rc})
	require.NoError(t, err)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.TryAcquire(ctx, "k", time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrQuorumUnavailable)
	_, err = c.Acquire(ctx, "k", time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrQuorumUnavailable)
}

func TestLongKeyIsCutInMessages(t *testing.T) {
	key := strings.Repeat("k", 10_000)
	err := &redlock.AcquireError{Key: key, Reason: redlock.ErrNotAcquired}
	assert.Less(t, len(err.Error()), 300, err.Error())
	assert.Contains(t, err.Error(), "(10000 bytes)")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rc.Close()
	c, err2 := redlock.New([]redlock.Node{rc})
	require.NoError(t, err2)
	defer c.Close()
	_, err2 = c.TryAcquire(ctx, key, time.Second)
	require.Error(t, err2)
	assert.Less(t, len(err2.Error()), 300, err2.Error())
}
