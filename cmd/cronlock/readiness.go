package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// readiness answers /readyz: whether a quorum of nodes answers and is out of quarantine
// (grants locks), from a probe of every node that is at most readyCache old. A Cluster node
// answers when its cluster_state is ok and the primaries of the jobs' hash slots answer, and is
// out of quarantine when every slot of the jobs' keys is (probeCluster).
type readiness struct {
	clients []redis.UniversalClient
	names   []string // the nodes' names in messages
	quorum  int
	bootKey string
	slots   func() []int // the hash slots of the jobs' keys, for Cluster nodes
	stop    atomic.Bool  // the daemon is stopping: not ready

	mu     sync.Mutex
	at     time.Time
	states []nodeState
}

const (
	readyTimeout = time.Second
	readyCache   = time.Second
)

// nodeState is what a probe found of a node.
type nodeState struct {
	addr    string
	err     error     // it did not answer
	missing bool      // it has no boot marker (a Cluster: a slot of the jobs has none): new, or lost its memory
	marker  string    // its boot marker (a Cluster: the one that ends last among the jobs' slots)
	until   time.Time // the end of its quarantine, on this host's clock (zero: none)

	// A Cluster's: how many of the jobs' slots it has, and how many of them have no boot
	// marker or are in quarantine.
	slots, missingSlots, quarantinedSlots int
}

// usable reports whether the node grants locks.
func (n nodeState) usable() bool { return n.err == nil && !n.missing && n.until.IsZero() }

// kind is the node's state without its details, to tell a change of state.
func (n nodeState) kind() string {
	switch {
	case n.err != nil:
		return "down"
	case n.missing:
		return "missing"
	case !n.until.IsZero():
		return "quarantined " + n.marker
	}
	return "ok"
}

// ofSlots says, for a Cluster, how many of the jobs' slots are affected: " (2 of the jobs' 5
// hash slots)"; "" for a standalone node.
func (n nodeState) ofSlots(count int) string {
	if n.slots == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of the jobs' %d hash slots)", count, n.slots)
}

func (n nodeState) String() string { return n.addr + ": " + n.state(true) }

// state says what the node's state is; with the error's text only when withErr is set.
func (n nodeState) state(withErr bool) string {
	switch {
	case n.err != nil && withErr:
		return fmt.Sprintf("down: %v", n.err)
	case n.err != nil:
		return "down"
	case n.missing:
		return fmt.Sprintf("no boot marker%s (new, or lost its memory): it refuses locks for max_ttl after the first lock attempt", n.ofSlots(n.missingSlots))
	case !n.until.IsZero():
		return fmt.Sprintf("in quarantine until %s%s: it refuses locks until then", n.until.UTC().Format(time.RFC3339), n.ofSlots(n.quarantinedSlots))
	}
	return "ok"
}

// check returns every node's state and how many are usable, probing the nodes if the last
// probe is older than readyCache.
func (r *readiness) check(ctx context.Context) (usable int, states []nodeState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || time.Since(r.at) >= readyCache {
		r.states = make([]nodeState, len(r.clients))
		var slots []int
		if slices.ContainsFunc(r.clients, isCluster) {
			slots = r.slots()
		}
		eachNode(ctx, r.clients, readyTimeout, func(ctx context.Context, i int, c redis.UniversalClient) {
			var n nodeState
			if cc, ok := c.(*redis.ClusterClient); ok {
				n = probeCluster(ctx, cc, r.bootKey, slots)
			} else {
				q, err := readQuarantine(ctx, c, r.bootKey)
				n.err, n.missing, n.marker = err, q.missing, q.value
				if err == nil && q.remaining > 0 {
					n.until = time.Now().Add(q.remaining)
				}
			}
			n.addr = r.names[i]
			r.states[i] = n
		})
		r.at = time.Now()
	}
	for _, n := range r.states {
		if n.usable() {
			usable++
		}
	}
	return usable, slices.Clone(r.states)
}

// report answers /readyz (web.Readiness): not ready while the daemon stops, or while fewer than
// a quorum of nodes answer and are out of quarantine; one line per node, with its address and
// error text only when details is set.
func (r *readiness) report(ctx context.Context, details bool) (bool, string) {
	if r.stop.Load() {
		return false, "not ready: stopping\n"
	}
	usable, states := r.check(ctx)
	var b strings.Builder
	verdict := "ready"
	if usable < r.quorum {
		verdict = "not ready"
	}
	fmt.Fprintf(&b, "%s: %d of %d nodes answer and are out of quarantine, quorum %d\n", verdict, usable, len(r.clients), r.quorum)
	for i, n := range states {
		if details {
			fmt.Fprintln(&b, n)
		} else {
			fmt.Fprintf(&b, "nodes[%d]: %s\n", i, n.state(false))
		}
	}
	return usable >= r.quorum, b.String()
}
