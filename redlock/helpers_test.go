package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

func TestMain(m *testing.M) {
	// Nodes are killed on purpose here: go-redis's reconnect complaints are noise.
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// cluster is a set of real redis-server nodes for one test, optionally each behind a fault
// proxy.
type cluster struct {
	servers []*redistest.Server
	proxies []*faultproxy.Proxy // nil unless proxied
	nodes   []redlock.Node
}

func newCluster(t testing.TB, n int, proxied bool) *cluster {
	t.Helper()
	c := &cluster{servers: redistest.StartN(t, n, redistest.Config{})}
	for _, s := range c.servers {
		addr := s.Addr()
		if proxied {
			p := faultproxy.Start(t, addr)
			c.proxies = append(c.proxies, p)
			addr = p.Addr()
		}
		c.nodes = append(c.nodes, nodeClient(t, addr))
	}
	return c
}

// nodeClient returns a go-redis client as redlock wants it: context deadlines enforced, no
// retries hidden inside a node request.
func nodeClient(t testing.TB, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// client returns a redlock client over the cluster's nodes, with the nodes' quarantine ended
// (they are new), closed at cleanup. Its node timeout is 200ms unless opts say otherwise: the
// default (TTL/50) is a few milliseconds for the short TTLs of tests, too tight for a loaded
// 2-core machine running -race.
func (c *cluster) client(t testing.TB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	opts = append([]redlock.Option{redlock.WithNodeTimeout(200 * time.Millisecond)}, opts...)
	lc, err := redlock.New(c.nodes, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lc.EndQuarantine(ctx); err != nil {
		t.Fatal(err)
	}
	return lc
}

// waitLimit bounds a test's waits for an event, so that a broken test fails instead of
// hanging; the events come much sooner.
const waitLimit = 30 * time.Second

// ctxT returns a context bounded by waitLimit, ended at the test's cleanup.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}
