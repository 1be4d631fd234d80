// Package localnodes gives the examples their lock nodes: the addresses of real Redis nodes,
// or three embedded Redis-protocol nodes (miniredis) started in the process, and a replica's
// lock client over them. It uses only cronlock's public API: copy it beside an example taken
// out of this repository.
package localnodes

import (
	"context"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/redlock"
)

// Addrs returns the addresses in list (comma-separated), or starts three embedded
// Redis-protocol nodes (miniredis) in this process, with a func that stops them.
func Addrs(list string) ([]string, func(), error) {
	if list != "" {
		return strings.Split(list, ","), func() {}, nil
	}
	var addrs []string
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, m := range servers {
			m.Close()
		}
	}
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		m.ClockTTL(true) // keys expire on the real clock
		servers = append(servers, m)
		addrs = append(addrs, m.Addr())
	}
	return addrs, stop, nil
}

// LockClient returns the lock client of one replica over the nodes at addrs, with a func that closes it and its
// connections. New nodes refuse locks for a minute (quarantine) unless told they are new:
// EndQuarantine is safe here because no lock can have been forgotten on them; in production,
// call it on first deployment only.
func LockClient(ctx context.Context, addrs []string) (*redlock.Client, func(), error) {
	var nodes []redlock.Node
	var clients []*redis.Client
	for _, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		clients = append(clients, rc)
		nodes = append(nodes, rc)
	}
	closeAll := func() {
		for _, rc := range clients {
			_ = rc.Close()
		}
	}
	c, err := redlock.New(nodes)
	if err == nil {
		err = c.EndQuarantine(ctx)
		if err != nil {
			_ = c.Close()
		}
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return c, func() { _ = c.Close(); closeAll() }, nil
}
