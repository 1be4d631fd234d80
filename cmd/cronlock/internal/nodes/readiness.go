package nodes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

// Readiness answers /readyz: whether a quorum of nodes answers and is out of quarantine
// (grants locks), from a probe of every node that is at most readyCache old. A Cluster node
// answers when its cluster_state is ok and the primaries of the jobs' hash slots answer, and is
// out of quarantine when every slot of the jobs' keys is (probeCluster).
type Readiness struct {
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

// NewReadiness returns the readiness of the nodes of cfg, whose clients are clients; jobs
// returns the config whose jobs run now, whose keys' hash slots a Cluster node is probed for.
func NewReadiness(cfg *config.Config, clients []redis.UniversalClient, jobs func() *config.Config) *Readiness {
	return &Readiness{clients: clients, names: Names(cfg), quorum: cfg.Quorum(), bootKey: cfg.BootKey, slots: func() []int { return jobSlots(jobs()) }}
}

// Stop makes the nodes not ready from now on: the daemon is stopping.
func (r *Readiness) Stop() { r.stop.Store(true) }

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
func (r *Readiness) check(ctx context.Context) (usable int, states []nodeState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || time.Since(r.at) >= readyCache {
		r.states = make([]nodeState, len(r.clients))
		var slots []int
		if slices.ContainsFunc(r.clients, isCluster) {
			slots = r.slots()
		}
		EachNode(ctx, r.clients, readyTimeout, func(ctx context.Context, i int, c redis.UniversalClient) {
			var n nodeState
			if cc, ok := c.(*redis.ClusterClient); ok {
				n = probeCluster(ctx, cc, r.bootKey, slots)
			} else {
				q, err := ReadQuarantine(ctx, c, r.bootKey)
				n.err, n.missing, n.marker = err, q.Missing, q.Value
				if err == nil && q.Remaining > 0 {
					n.until = time.Now().Add(q.Remaining)
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

// Report answers /readyz and the console (the web package's Readiness): not ready while the daemon stops, or
// while fewer than a quorum of nodes answer and are out of quarantine; one line per node, with
// its address and error text only when details is set.
func (r *Readiness) Report(ctx context.Context, details bool) Status {
	if r.stop.Load() {
		return Status{Report: "not ready: stopping\n", Quorum: r.quorum}
	}
	usable, states := r.check(ctx)
	out := Status{Ready: usable >= r.quorum, Usable: usable, Quorum: r.quorum}
	var b strings.Builder
	verdict := "ready"
	if usable < r.quorum {
		verdict = "not ready"
	}
	fmt.Fprintf(&b, "%s: %d of %d nodes answer and are out of quarantine, quorum %d\n", verdict, usable, len(r.clients), r.quorum)
	for i, n := range states {
		state, _, _ := strings.Cut(n.kind(), " ")
		wn := NodeState{Name: fmt.Sprintf("nodes[%d]", i), State: state, Until: n.until}
		if details {
			wn.Name = n.addr
			fmt.Fprintln(&b, n)
		} else {
			fmt.Fprintf(&b, "nodes[%d]: %s\n", i, n.state(false))
		}
		out.Nodes = append(out.Nodes, wn)
	}
	out.Report = b.String()
	return out
}

// Status is the lock nodes' state, as this replica last probed them.
type Status struct {
	Ready  bool   // this replica is ready: a quorum of nodes grants locks
	Report string // /readyz's text
	Usable int    // how many nodes grant locks
	Quorum int
	Nodes  []NodeState
}

// NodeState is one lock node's state.
type NodeState struct {
	Name  string    // its address with details, else "nodes[i]"
	State string    // "ok", "down", "missing" (no boot marker) or "quarantined"
	Until time.Time // the end of its quarantine, on this host's clock; zero when not in one
}

// probeEvery is how often the daemon probes its nodes.
const probeEvery = readyCache

// Watch probes the nodes every probeEvery until ctx ends, and logs each change of a
// node's state once: down, back, in quarantine until a time, without a boot marker; and when
// the usable nodes fall below a quorum, or reach it again.
func (r *Readiness) Watch(ctx context.Context, log *slog.Logger, cfg *config.Config) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	var prev []nodeState
	wasQuorum := true
	for {
		usable, states := r.check(ctx)
		if ctx.Err() != nil {
			return
		}
		for i, n := range states {
			if prev != nil && prev[i].kind() == n.kind() {
				continue
			}
			switch {
			case n.err != nil:
				log.Warn("node does not answer", "node", n.addr, "err", n.err)
			case n.missing:
				log.Warn("node has no boot marker: it is new or lost its memory, and will refuse locks for max_ttl after the first lock attempt; on first deployment end its quarantine with 'cronlock check --end-quarantine'",
					"node", n.addr, "max_ttl", cfg.MaxTTL, "boot_key", cfg.BootKey)
			case !n.until.IsZero():
				log.Warn("node is in quarantine: it refuses locks until its boot marker's time", "node", n.addr, "until", n.until.UTC().Format(time.RFC3339Nano))
			case prev != nil:
				log.Info("node grants locks again", "node", n.addr, "was", prev[i].kind())
			}
		}
		if isQuorum := usable >= cfg.Quorum(); isQuorum != wasQuorum {
			if isQuorum {
				log.Info("a quorum of nodes grants locks again", "usable", usable, "nodes", len(r.clients), "quorum", cfg.Quorum())
			} else {
				log.Warn("fewer nodes grant locks than a quorum: no job can run until enough come back",
					"usable", usable, "nodes", len(r.clients), "quorum", cfg.Quorum())
			}
			wasQuorum = isQuorum
		}
		prev = states
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Quarantine is a node's boot marker, read against its clock.
type Quarantine struct {
	Missing   bool
	Value     string
	Remaining time.Duration // > 0 while in quarantine
	NodeTime  time.Time
}

// ReadQuarantine reads a standalone node's boot marker (microseconds of the node's clock at
// which its quarantine ends) and its clock.
func ReadQuarantine(ctx context.Context, c redis.UniversalClient, bootKey string) (Quarantine, error) {
	qs, err := readMarkers(ctx, c, []string{bootKey})
	if err != nil {
		return Quarantine{}, err
	}
	return qs[0], nil
}

// readMarkers reads boot markers on one server, and its clock, in one round trip.
func readMarkers(ctx context.Context, c redis.Cmdable, keys []string) ([]Quarantine, error) {
	pipe := c.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
	}
	tm := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	qs := make([]Quarantine, len(keys))
	for i, get := range gets {
		q := &qs[i]
		q.NodeTime = tm.Val()
		v, err := get.Result()
		if errors.Is(err, redis.Nil) {
			q.Missing = true
			continue
		}
		q.Value = strings.TrimSpace(v)
		var until int64
		if _, err := fmt.Sscan(q.Value, &until); err == nil {
			q.Remaining = time.UnixMicro(until).Sub(q.NodeTime)
		}
	}
	return qs, nil
}
