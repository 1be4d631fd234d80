// Package local gives the examples their lock nodes: the addresses given on the command line,
// or throwaway redis-server processes on this host.
package local

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// NodeAddrs returns the node addresses in list (comma-separated), or starts three throwaway
// redis-servers, with a func that stops them.
func NodeAddrs(list string) ([]string, func(), error) {
	if list != "" {
		return strings.Split(list, ","), func() {}, nil
	}
	servers, err := redistest.NewN(3, redistest.Config{})
	if err != nil {
		return nil, nil, err
	}
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	return addrs, func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}, nil
}

// LockClient returns a redlock client of one replica over the nodes, with a func that closes
// it and its node clients. New nodes refuse locks for a minute (quarantine) unless told they
// are new; EndQuarantine is safe here because no lock can have been forgotten on them — do
// not call it on every start in production.
func LockClient(ctx context.Context, addrs []string) (*redlock.Client, func(), error) {
	var nodes []redlock.Node
	var clients []*redis.Client
	for _, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true})
		clients = append(clients, rc)
		nodes = append(nodes, rc)
	}
	closeAll := func() {
		for _, rc := range clients {
			_ = rc.Close()
		}
	}
	c, err := redlock.New(nodes)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	if err := c.EndQuarantine(ctx); err != nil {
		_ = c.Close()
		closeAll()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); closeAll() }, nil
}
