// Package locktest sets up redlock clients over real redis-server nodes, for the tests of the
// packages built on redlock.
package locktest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// Cluster is a set of real redis-server lock nodes for one test, each optionally behind a
// fault proxy.
type Cluster struct {
	Servers []*redistest.Server
	Proxies []*faultproxy.Proxy // nil unless started proxied
}

// Start starts n nodes, each behind a fault proxy if proxied; all are stopped at cleanup.
func Start(tb testing.TB, n int, proxied bool) *Cluster {
	tb.Helper()
	c := &Cluster{Servers: redistest.StartN(tb, n, redistest.Config{})}
	if proxied {
		for _, s := range c.Servers {
			c.Proxies = append(c.Proxies, faultproxy.Start(tb, s.Addr()))
		}
	}
	return c
}

// Client returns a redlock client of its own (own connections, like a separate replica) over
// the nodes, through the proxies if viaProxy, with the nodes' quarantine ended (they are new);
// it is closed at cleanup. Its node timeout is 100ms unless opts say otherwise: the default
// (TTL/50) is a few milliseconds for the short TTLs of tests, too tight for renewals on a
// loaded machine.
func (c *Cluster) Client(tb testing.TB, viaProxy bool, opts ...redlock.Option) *redlock.Client {
	tb.Helper()
	var nodes []redlock.Node
	for i, s := range c.Servers {
		addr := s.Addr()
		if viaProxy {
			addr = c.Proxies[i].Addr()
		}
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		tb.Cleanup(func() { _ = rc.Close() })
		nodes = append(nodes, rc)
	}
	lc, err := redlock.New(nodes, append([]redlock.Option{redlock.WithNodeTimeout(100 * time.Millisecond)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = lc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lc.EndQuarantine(ctx); err != nil {
		tb.Fatal(err)
	}
	return lc
}

// ClusterNodes returns a go-redis cluster client of each Redis Cluster, as redlock wants its
// nodes (context deadlines enforced, no retries hidden inside a node request), closed at
// cleanup.
func ClusterNodes(tb testing.TB, clusters ...*redistest.Cluster) []redlock.Node {
	nodes := make([]redlock.Node, len(clusters))
	for i, c := range clusters {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		tb.Cleanup(func() { _ = cc.Close() })
		nodes[i] = cc
	}
	return nodes
}

// Blackhole starts a node that accepts connections and never answers, stopped at cleanup,
// and returns its address and a channel that receives a value for each connection accepted
// (up to 100 not received).
func Blackhole(tb testing.TB) (string, <-chan struct{}) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	accepted := make(chan struct{}, 100)
	wg.Go(func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, cn)
			mu.Unlock()
			select {
			case accepted <- struct{}{}:
			default:
			}
		}
	})
	tb.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, cn := range conns {
			_ = cn.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// SlowNode returns a node client as redlock wants it that waits a minute to dial, read and
// write, closed at cleanup: only redlock's own bounds end its requests to a node that never
// answers.
func SlowNode(tb testing.TB, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true,
		DialTimeout: time.Minute, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	tb.Cleanup(func() { _ = rc.Close() })
	return rc
}
