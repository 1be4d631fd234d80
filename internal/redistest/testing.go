package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// Start starts a server like New and registers its Close with tb.Cleanup.
// It fails the test if the server cannot be started (for example when
// redis-server is not installed).
func Start(tb testing.TB, cfg Config) *Server {
	tb.Helper()
	s, err := New(cfg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}

// StartN starts n independent servers with the same configuration,
// concurrently, each closed by tb.Cleanup. If cfg.Dir is set, server i uses
// the subdirectory cfg.Dir/node<i>.
func StartN(tb testing.TB, n int, cfg Config) []*Server {
	tb.Helper()
	servers, err := NewN(n, cfg)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	for _, s := range servers {
		tb.Cleanup(func() {
			if err := s.Close(); err != nil {
				tb.Errorf("%v", err)
			}
		})
	}
	return servers
}

// StartClusters starts n independent Clusters of the given number of primaries like
// NewCluster, concurrently, each closed by tb.Cleanup. If cfg.Dir is set, cluster i uses the
// subdirectory cfg.Dir/cluster<i>. It fails the test if any cannot be started.
func StartClusters(tb testing.TB, n, primaries int, cfg Config) []*Cluster {
	tb.Helper()
	clusters, errs := startEach(n, cfg, "cluster", func(c Config) (*Cluster, error) { return NewCluster(primaries, c) })
	for _, c := range clusters {
		if c != nil {
			tb.Cleanup(func() {
				if err := c.Close(); err != nil {
					tb.Errorf("%v", err)
				}
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("%v", err)
	}
	return clusters
}

// Key returns a key that is unique to this call: the test name, with every
// character other than letters, digits, '-', '_' and '.' replaced by '_',
// followed by ':' and 16 random hex digits. Use it to keep tests that share
// servers apart.
func Key(tb testing.TB) string {
	tb.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, tb.Name())
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return name + ":" + hex.EncodeToString(b[:])
}
