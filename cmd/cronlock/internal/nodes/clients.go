package nodes

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
	"github.com/cronlock/cronlock/redlock"
)

// Clients makes one go-redis client per node of cfg, with the options the lock needs: a
// *redis.Client for a standalone server, a *redis.ClusterClient for a Redis Cluster. It does
// not connect: go-redis dials on first use. A password variable that is not set is a
// usageError naming it.
func Clients(cfg *config.Config) ([]redis.UniversalClient, error) {
	var clients []redis.UniversalClient
	for _, n := range cfg.Nodes {
		pw, err := n.Password(nil)
		if err != nil {
			Close(clients)
			return nil, exitcode.Usage{Err: err}
		}
		opts := &redis.UniversalOptions{
			Addrs:                 []string{n.Addr},
			Username:              n.Username,
			Password:              pw,
			DB:                    n.DB,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DisableIdentity:       true, // see redlock.Node
		}
		if n.TLS {
			// A Cluster's members are on hosts of their own: without ServerName, each connection
			// verifies the host it dials.
			opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if n.Cluster != nil {
			opts.Addrs = n.Cluster
			clients = append(clients, redis.NewClusterClient(opts.Cluster()))
			continue
		}
		if n.TLS {
			opts.TLSConfig.ServerName, _, _ = net.SplitHostPort(n.Addr)
		}
		clients = append(clients, redis.NewClient(opts.Simple()))
	}
	return clients, nil
}

// Names returns the names of cfg's nodes, in messages.
func Names(cfg *config.Config) []string {
	names := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		names[i] = n.Name()
	}
	return names
}

// isCluster reports whether c is the client of a Redis Cluster.
func isCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// Close closes the clients.
func Close(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// LockClient makes the redlock client over the node clients.
func LockClient(cfg *config.Config, clients []redis.UniversalClient, label string) (*redlock.Client, error) {
	nodes := make([]redlock.Node, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	opts := []redlock.Option{redlock.WithLabel(label), redlock.WithBootKey(cfg.BootKey), redlock.WithMaxTTL(cfg.MaxTTL)}
	for i, n := range cfg.Nodes {
		opts = append(opts, redlock.WithNodeReplicas(i, n.WaitForReplicas))
	}
	if cfg.AllowEvenNodes {
		opts = append(opts, redlock.WithEvenNodes())
	}
	return redlock.New(nodes, opts...)
}

// DefaultReplica is this process's default replica name: hostname-pid.
func DefaultReplica() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// EachNode calls f for every client in parallel, each with ctx bounded by timeout, and waits.
func EachNode(ctx context.Context, clients []redis.UniversalClient, timeout time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			f(ctx, i, c)
		})
	}
	wg.Wait()
}
